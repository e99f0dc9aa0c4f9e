"""The planned launcher of ``spec_hal/kernels/triton/launch.py``, against a fake Triton runtime.

No accelerator here: the JIT function, its binder, the compiled kernel and the driver are fakes that
record what the launcher calls. The real launcher runs on the H200 through the conformance suite.
"""

from __future__ import annotations

import inspect
import random
import types

import pytest
import torch
import triton
import triton.language as tl

from spec_hal.kernels.triton import launch
from spec_hal.kernels.triton.launch import Kernel, cdiv, next_power_of_2


class FakeLauncher:
    """A compiled kernel's launcher: the wrapper passes its arguments on to the C entry point."""

    def __init__(self, compiled: FakeCompiled) -> None:
        self.compiled = compiled

    def __call__(self, *args):
        self.launch(*args)

    def launch(self, *args):
        self.compiled.launches.append(args)
        self.compiled.journal.append(self.compiled.label)


class FakeCompiled:
    def __init__(self, label: str, journal: list[str] | None = None, launcher=FakeLauncher) -> None:
        self.label = label
        self.function = f"function-{label}"
        self.packed_metadata = f"metadata-{label}"
        self.run = launcher(self)
        self.launches: list[tuple] = []
        #: Shared by a JIT's binaries: the labels of their launches, in order.
        self.journal = [] if journal is None else journal


class FakeJit:
    """Triton's JITFunction as the launcher uses it: ``[grid](...)``, ``device_caches``, the binder."""

    def __init__(self) -> None:
        self.device_caches: dict[int, tuple] = {}
        self.jit_launches: list[tuple] = []
        self.binaries: dict[tuple, FakeCompiled] = {}
        self.journal: list[str] = []
        #: Makes a binary's launcher from the binary.
        self.launcher = FakeLauncher

    def binder(self, *args, **kwargs):
        # Specialisation like Triton's: the dtype-ish "kind" of each argument and whether ints are 1.
        specialization = [("int", a == 1) if isinstance(a, int) else ("obj", type(a).__name__) for a in args]
        specialization += [("constexpr", v) for k, v in kwargs.items() if k.isupper()]
        options = {k: v for k, v in kwargs.items() if not k.isupper()}
        bound = {f"a{i}": a for i, a in enumerate(args)} | {k: v for k, v in kwargs.items() if k.isupper()}
        return bound, specialization, options

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.device_caches.setdefault(0, (None, None, None, None, self.binder))
            self.jit_launches.append((grid, args, kwargs))
            _, specialization, options = self.binder(*args, **kwargs)
            key = (tuple(specialization), tuple(options.items()))
            return self.binaries.setdefault(
                key, FakeCompiled(str(len(self.binaries)), self.journal, self.launcher)
            )

        return run


def test_first_launch_goes_through_triton_then_the_plan(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    table = torch.arange(8, dtype=torch.int32)
    launch_5_2 = kernel.at((5, 2), BLOCK=64, num_warps=4)
    launch_5_2(table, 3, 0.5)  # Triton compiles and launches; a plan is filed
    assert jit.jit_launches == [
        ((5, 2), (table, 3, 0.5), {"enable_fp_fusion": True, "BLOCK": 64, "num_warps": 4})
    ]
    launch_5_2(table, 3, 0.5)  # same key: the plan
    kernel[(5, 2)](table, 3, 0.5, BLOCK=64, num_warps=4)  # Triton's syntax finds the same launch
    assert kernel.at((5, 2), BLOCK=64, num_warps=4) is launch_5_2
    kernel[(6,)](table, 3, 0.5, BLOCK=64, num_warps=4)  # another grid: another launch, its own plans
    assert len(jit.jit_launches) == 2
    kernel[(6,)](table, 3, 0.5, BLOCK=64, num_warps=4)
    assert len(jit.jit_launches) == 2
    (compiled,) = jit.binaries.values()
    pointer = table.data_ptr()  # the launcher gets the device pointer as an int, not the tensor
    planned = (1234, "function-0", "metadata-0", None, None, None, pointer, 3, 0.5, 64)
    assert compiled.launches == [(5, 2, 1, *planned), (5, 2, 1, *planned), (6, 1, 1, *planned)]


def test_a_sequence_reads_its_arguments_once_for_every_launch(fake_runtime, monkeypatch):
    jit = FakeJit()
    kernel = Kernel(jit)
    stream_reads = []
    monkeypatch.setattr(fake_runtime, "get_current_stream", lambda device: stream_reads.append(device) or 99)
    passes = [kernel.at((4, 2), LEVEL=level, num_warps=4) for level in range(3)]
    sequence = launch.LaunchSequence(passes)
    table = torch.arange(8, dtype=torch.int32)
    sequence(table, 5)  # no plans yet: each launch goes through Triton and files its plan
    assert [kwargs["LEVEL"] for _, _, kwargs in jit.jit_launches] == [0, 1, 2]
    stream_reads.clear()
    other = torch.arange(8, dtype=torch.int32)
    sequence(table, 5)
    sequence(other, 5)  # another tensor of the same key
    assert len(jit.jit_launches) == 3 and stream_reads == [0, 0]  # one stream read a call
    for level, compiled in enumerate(jit.binaries.values()):
        fixed = (4, 2, 1, 99, compiled.function, compiled.packed_metadata, None, None, None)
        assert compiled.launches == [
            (*fixed, table.data_ptr(), 5, level),
            (*fixed, other.data_ptr(), 5, level),
        ]
    sequence(table.long(), 5)  # a new key: each launch through Triton again, then planned
    assert [kwargs["LEVEL"] for _, _, kwargs in jit.jit_launches[3:]] == [0, 1, 2]


def test_a_sequence_runs_its_launches_in_order(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    sequence = launch.LaunchSequence([kernel.at((1,), LEVEL=level) for level in (2, 0, 1)])
    table = torch.arange(4)
    sequence(table, 1)
    sequence(table, 1)
    labels = {kwargs["LEVEL"]: str(i) for i, (_, _, kwargs) in enumerate(jit.jit_launches)}
    assert jit.journal == [labels[2], labels[0], labels[1]]
    with launch.recording() as recorded:  # recorded as one entry, still launched in order
        sequence(table, 1)
    assert recorded == [(sequence, (table, 1))] and jit.journal[3:] == jit.journal[:3]
    # Timed stage by stage as one: the lookup once, then each launch (five times each here).
    plan_s, launcher_s = launch.stage_seconds(sequence, (table, 1), repeats=5)
    assert plan_s > 0 and launcher_s > 0 and jit.journal[6:] == jit.journal[:3] * 5


def test_a_sequence_whose_launches_are_partly_planned_makes_each_on_its_own(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    first, second = kernel.at((2,), LEVEL=0), kernel.at((2,), LEVEL=1)
    table = torch.arange(4)
    first(table, 3)  # only the first launch holds a plan
    sequence = launch.LaunchSequence([first, second])
    sequence(table, 3)  # the second goes through Triton (and files its plan), the first its plan
    assert [kwargs["LEVEL"] for _, _, kwargs in jit.jit_launches] == [0, 1]
    sequence(table, 3)  # both planned now: no more Triton
    assert len(jit.jit_launches) == 2 and jit.journal == ["0", "0", "1"]


def test_a_sequence_is_of_one_kernel():
    first, second = Kernel(FakeJit()), Kernel(FakeJit())
    with pytest.raises(ValueError, match="launches: one kernel"):
        launch.LaunchSequence([first.at((1,)), second.at((1,))])


def test_each_new_key_goes_through_triton_once(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    table = torch.arange(64, dtype=torch.int32)
    calls = [
        ((table, 7), {"BLOCK": 64, "num_warps": 4}),
        ((table, 1), {"BLOCK": 64, "num_warps": 4}),  # an int of 1 specialises differently
        ((table, 7), {"BLOCK": 128, "num_warps": 4}),  # another constexpr
        ((table, 7), {"BLOCK": 64, "num_warps": 8}),  # another launch option
        ((table.long(), 7), {"BLOCK": 64, "num_warps": 4}),  # another dtype
        ((table[1:], 7), {"BLOCK": 64, "num_warps": 4}),  # another alignment
        ((None, 7), {"BLOCK": 64, "num_warps": 4}),  # None for a tensor
    ]
    for args, kwargs in calls:
        kernel[(1,)](*args, **kwargs)
    assert len(jit.jit_launches) == len(calls)
    for args, kwargs in calls:
        kernel[(1,)](*args, **kwargs)
    assert len(jit.jit_launches) == len(calls)
    kernel[(1,)](torch.arange(64, dtype=torch.int32), 7, BLOCK=64, num_warps=4)  # other tensor, same key
    assert len(jit.jit_launches) == len(calls)


def test_each_signature_is_planned_on_its_own(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    table = torch.arange(8, dtype=torch.int32)
    signatures = [
        ((table, 3, 0.5), {"BLOCK": 64}),  # kinds: tensor, int, float
        ((table, 3, 0.5), {"BLOCK": 64, "num_warps": 4}),  # other keywords
        ((table, 3.0, 0.5), {"BLOCK": 64}),  # a float where an int was
        ((table, None, 0.5), {"BLOCK": 64}),  # None where an int was
    ]
    for args, kwargs in signatures:  # each goes through Triton once, then takes its plan
        for _ in range(3):
            kernel[(1,)](*args, **kwargs)
    assert len(jit.jit_launches) == len(signatures)
    for args, kwargs in signatures:
        kernel[(1,)](*args, **kwargs)
    assert len(jit.jit_launches) == len(signatures)
    # The int and the float at the same position run their own binaries, whatever the order.
    by_label = {c.label: c for c in jit.binaries.values()}
    int_binary, float_binary = by_label["0"], by_label["2"]
    before = len(int_binary.launches), len(float_binary.launches)
    kernel[(1,)](table, 3, 0.5, BLOCK=64)
    kernel[(1,)](table, 3.0, 0.5, BLOCK=64)
    assert (len(int_binary.launches), len(float_binary.launches)) == (before[0] + 1, before[1] + 1)
    assert type(float_binary.launches[-1][10]) is float and type(int_binary.launches[-1][10]) is int


def test_signatures_stop_at_the_cap(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    table = torch.arange(8, dtype=torch.int32)
    # One signature per call: a tensor then ever more ints, and one past the cap.
    signatures = [(table, *([3] * count)) for count in range(launch.MAX_SIGNATURES + 1)]
    for args in signatures[:-1]:
        kernel[(1,)](*args, BLOCK=64)
    assert len(kernel._readers) == launch.MAX_SIGNATURES
    for _ in range(2):  # no room for its signature: Triton every time
        kernel[(1,)](*signatures[-1], BLOCK=64)
    assert len(jit.jit_launches) == launch.MAX_SIGNATURES + 2
    for args in signatures[:-1]:  # the others still take their plans
        kernel[(1,)](*args, BLOCK=64)
    assert (
        len(jit.jit_launches) == launch.MAX_SIGNATURES + 2 and len(kernel._readers) == launch.MAX_SIGNATURES
    )


def test_plans_stop_at_the_cap(fake_runtime, monkeypatch):
    monkeypatch.setattr(launch, "MAX_PLANS", 3)
    jit = FakeJit()
    kernel = Kernel(jit)
    for value in range(2, 8):
        kernel[(1,)](value, BLOCK=64)
    assert len(kernel.at((1,), BLOCK=64)._plans) == 3
    kernel[(1,)](2, BLOCK=64)
    kernel[(1,)](7, BLOCK=64)  # no plan: Triton's path
    assert len(jit.jit_launches) == 7


def test_launch_hooks_and_the_interpreter_take_the_jit_path(fake_runtime, monkeypatch):
    jit = FakeJit()
    kernel = Kernel(jit)
    kernel[(1,)](7, BLOCK=64)
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *args: None)
    kernel[(1,)](7, BLOCK=64)
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(launch, "_INTERPRETED", True)
    kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 3
    assert all(not c.launches for c in jit.binaries.values())


def test_an_exit_hook_or_a_debug_switch_is_honoured(fake_runtime, monkeypatch):
    jit = FakeJit()
    kernel = Kernel(jit)
    for _ in range(3):
        kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 1
    monkeypatch.setattr(triton.knobs.runtime, "launch_exit_hook", lambda *args: None)
    kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 2
    monkeypatch.setattr(triton.knobs.runtime, "launch_exit_hook", None)
    monkeypatch.setattr(triton.knobs.runtime, "debug", True)  # Triton compiles debug binaries then
    kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 3
    monkeypatch.setattr(triton.knobs.runtime, "debug", False)
    monkeypatch.setattr(triton.knobs.compilation, "instrumentation_mode", "consan")
    kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 4
    monkeypatch.setattr(triton.knobs.compilation, "instrumentation_mode", "")
    kernel[(1,)](7, BLOCK=64)  # the plan again
    assert len(jit.jit_launches) == 4


def test_an_empty_hook_chain_is_no_hook(fake_runtime, monkeypatch):
    """Triton 3.6 keeps a HookChain (never None) as the launch hook: empty, it must not force the JIT
    path (the H200 profile showed every launch taking it)."""
    chain = types.SimpleNamespace(calls=[])
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", chain)
    jit = FakeJit()
    kernel = Kernel(jit)
    for _ in range(3):
        kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 1
    chain.calls.append(lambda *args: None)
    kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 2


def _tritons_binder(jit_fn):
    """Triton's own binder of ``jit_fn`` for an NVIDIA target (built without a device)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    return create_function_from_signature(
        jit_fn.signature, jit_fn.params, make_backend(GPUTarget("cuda", 90, 32))
    )


@pytest.mark.skipif(launch._INTERPRETED, reason="needs compiled kernels' signatures, not the interpreter's")
@pytest.mark.parametrize("seed", range(3))
def test_the_plan_key_is_never_coarser_than_tritons_specialisation(seed):
    """Equal reader keys must mean equal specialisations by Triton's own binder, over tensors of
    every alignment and dtype, None, and ints at Triton's thresholds (1, multiples of 16, the int32
    and int64 edges)."""
    from spec_hal.kernels.triton.index.accept import _compact_accepted_kernel as compact  # 3 tensors, 6 ints

    binder = _tritons_binder(compact.jit)
    rng = random.Random(seed)
    storage = {dtype: torch.zeros(64, dtype=dtype) for dtype in (torch.int32, torch.int64)}
    ints = [0, 1, 2, 15, 16, 17, 32, 2**31 - 1, 2**31, 2**32 + 16, 2**63 - 1, 2**63, -1, -16, -(2**31) - 1]

    def tensor():
        return storage[rng.choice(list(storage))][rng.randrange(4) :]

    def draw(kind):
        return tensor() if kind == "t" and rng.random() > 0.1 else None if kind == "t" else rng.choice(ints)

    kinds = "titiitiii"
    reader = launch.make_reader(kinds)
    assert reader is not None
    base = [draw(kind) for kind in kinds]
    seen: dict = {}
    for _ in range(600):  # one or two arguments redrawn at a time: keys meet often
        args = list(base)
        for position in rng.sample(range(len(kinds)), rng.choice((1, 2))):
            args[position] = draw(kinds[position])
        key, values = reader(0, *args)
        _, specialization, _ = binder(*args, BLOCK=64, SCAN_BLOCK=64, SCAN_CHUNKS=1)
        assert seen.setdefault(key, specialization) == specialization
        assert values == tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
    assert 20 < len(seen) < 500


class TritonSpecialisedJit(FakeJit):
    """A fake JIT whose binaries are keyed by Triton's own binder of a real kernel: each launch's
    binary is the one Triton would pick, and ``ran`` lists the binary of every launch."""

    def __init__(self, binder) -> None:
        super().__init__()
        self.tritons_binder = binder
        self.ran: list = []

    def binder(self, *args, **kwargs):
        return self.tritons_binder(*args, **kwargs)

    def pick(self, args, kwargs):
        _, specialization, options = self.tritons_binder(*args, **kwargs)
        return self.binaries.setdefault(
            (tuple(map(tuple, specialization)), str(options)), FakeCompiled(str(specialization))
        )

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.device_caches.setdefault(0, (None, None, None, None, self.binder))
            self.jit_launches.append((grid, args, kwargs))
            return self.pick(args, kwargs)

        return run


@pytest.mark.skipif(launch._INTERPRETED, reason="needs compiled kernels' signatures, not the interpreter's")
@pytest.mark.parametrize("seed", range(3))
def test_mixed_kinds_at_a_position_run_the_binary_triton_picks(fake_runtime, seed):
    """Ints, bools and floats at one position, in any order, planned per signature: every launch
    runs the binary Triton's own binder picks (an int never takes a float's binary, a bool never an
    int's)."""
    from spec_hal.kernels.triton.index.accept import _compact_accepted_kernel as compact

    jit = TritonSpecialisedJit(_tritons_binder(compact.jit))
    kernel = Kernel(jit)
    rng = random.Random(seed)
    table = torch.zeros(64, dtype=torch.int32)
    scalars = [0, 1, 3, 16, 2**31, True, False, 0.0, 1.0, 3.0, 16.0, float("nan"), 2**24 + 1, 2.0**24]
    kwargs = {"BLOCK": 64, "SCAN_BLOCK": 64, "SCAN_CHUNKS": 1}
    for _ in range(300):
        args = (table, rng.choice(scalars), table, rng.choice(scalars[:5]), 1, table, 1, 1, 1)
        want = jit.pick(args, kwargs)
        before = {binary: len(binary.launches) for binary in jit.binaries.values()}
        through_triton = len(jit.jit_launches)
        kernel[(1,)](*args, **kwargs)
        ran = [binary for binary in jit.binaries.values() if len(binary.launches) > before.get(binary, 0)]
        # The plan of Triton's binary, or Triton's own path (which picks it).
        assert ran == [want] or (ran == [] and len(jit.jit_launches) == through_triton + 1)
    assert len(jit.jit_launches) < 60  # the kinds plan: most launches take a plan


class Untouchable:
    """An argument whose tensor attributes must not be read."""

    def __getattr__(self, name):
        raise AssertionError(f"read {name}")


def test_a_reader_checks_its_scalars_before_reading_any_tensor():
    """A reader answers None to a scalar of another type (a tensor at an int position, an int at a
    float one, a bool at an int one) before reading a tensor: no ``| 0`` on a tensor (a device op),
    no pointer read."""
    table = torch.arange(8, dtype=torch.int32)
    reader = launch.make_reader("tib", number=2)
    assert reader(0, Untouchable(), table, True) is None
    assert reader(0, Untouchable(), 3, 1) is None
    assert launch.make_reader("tf")(0, Untouchable(), 3) is None
    assert reader(5, table, 3, True) == ((2, 5, torch.int32, 3, True, 0), (table.data_ptr(), 3, True))


def test_a_key_holds_each_pointers_residue_only_where_one_is_misaligned():
    reader = launch.make_reader("tt")
    table = torch.arange(64, dtype=torch.int32)
    assert reader(0, table, None)[0] == (0, 0, torch.int32, None, 0)
    assert reader(0, table, table[2:])[0] == (0, 0, torch.int32, torch.int32, (0, 8))
    assert reader(0, None, table[1:])[0] == (0, 0, None, torch.int32, (0, 4))
    assert reader(0, table, None)[0] != reader(1, table, None)[0]  # the device is in the key


def test_a_tensor_where_a_scalar_was_runs_no_torch_op(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    table = torch.arange(8, dtype=torch.int32)
    kernel[(1,)](table, 3, BLOCK=64)
    for _ in range(2):
        kernel[(1,)](table, table, BLOCK=64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        kernel[(1,)](table, table, BLOCK=64)
    assert [event.name for event in profile.events() if event.name.startswith("aten::")] == []
    assert len(jit.jit_launches) == 2


@triton.jit
def _positional_constexpr_kernel(x_ptr, F: tl.constexpr, scale):
    pass


@pytest.mark.skipif(launch._INTERPRETED, reason="needs compiled kernels' signatures, not the interpreter's")
def test_a_float_passed_by_position_to_a_constexpr_never_takes_another_values_binary(fake_runtime):
    jit = TritonSpecialisedJit(_tritons_binder(_positional_constexpr_kernel))
    kernel = Kernel(jit)
    table = torch.zeros(4)
    for value in (1.5, 2.0, 1.5, 2.0, 2.5):
        args = (table, value, 0.5)
        want = jit.pick(args, {})
        through_triton = len(jit.jit_launches)
        kernel[(1,)](*args)
        assert len(jit.jit_launches) == through_triton + 1  # no plan: Triton's path picks per value
    assert len({id(binary) for binary in jit.binaries.values()}) == 3 and want is jit.pick(
        (table, 2.5, 0.5), {}
    )


def test_a_signature_that_cannot_plan_takes_no_slot(fake_runtime, monkeypatch):
    jit = FakeJit()
    kernel = Kernel(jit)
    tail = Kernel.constexpr_tail
    monkeypatch.setattr(Kernel, "constexpr_tail", lambda self, device, args, options: None)
    for value in range(launch.MAX_SIGNATURES + 1):
        kernel[(1,)](*([7] * (value + 1)), BLOCK=64)
    assert kernel._readers == () and kernel.at((1,), BLOCK=64)._plans == {}
    monkeypatch.setattr(Kernel, "constexpr_tail", tail)
    for _ in range(3):
        kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == launch.MAX_SIGNATURES + 2


def test_keywords_of_any_name_are_planned_by_their_launch(fake_runtime):
    """Keywords never reach a reader (the launch holds them): names like the reader's own locals or
    the builtins it checks types with plan like any other, each value its own launch and binary."""
    jit = FakeJit()
    kernel = Kernel(jit)
    table = torch.arange(8, dtype=torch.int32)
    for p0 in (1, 2, 2, 1):
        kernel[(1,)](table, 3, p0=p0, device=5, int=64)
    assert len(jit.jit_launches) == 2 and len(jit.binaries) == 2
    assert [len(binary.launches) for binary in jit.binaries.values()] == [1, 1]


def test_two_threads_filing_first_plans_keep_the_table_whole(fake_runtime):
    """Two threads filing a kernel's first two signatures at once, the first paused while it inserts
    its signature: both end up planned under their own numbers."""
    import threading
    import time

    class SlowTable(dict):
        def __setitem__(self, key, value):
            time.sleep(0.2)  # the other thread runs meanwhile
            super().__setitem__(key, value)

    jit = FakeJit()
    kernel = Kernel(jit)
    kernel._signatures = SlowTable()
    table = torch.arange(8, dtype=torch.int32)
    start = threading.Barrier(2)

    def launch_after_barrier(*args):
        start.wait()
        kernel[(1,)](*args, BLOCK=64)

    threads = [
        threading.Thread(target=launch_after_barrier, args=args) for args in ((table, 3), (table, 0.5))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(kernel._readers) == 2 and {key[0] for key in kernel.at((1,), BLOCK=64)._plans} == {0, 1}
    launches = len(jit.jit_launches)
    kernel[(1,)](table, 3, BLOCK=64)
    kernel[(1,)](table, 0.5, BLOCK=64)
    assert len(jit.jit_launches) == launches


def test_host_helpers_match_triton():
    for n in range(0, 2100):
        assert next_power_of_2(n) == triton.next_power_of_2(n)
        for divisor in (1, 2, 3, 7, 64, 1024):
            assert cdiv(n, divisor) == triton.cdiv(n, divisor)


def test_recorded_launches_are_timed_stage_by_stage(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    bound = kernel.at((3,), BLOCK=64, num_warps=4)
    with launch.recording() as launches:
        assert launch.stage_seconds(bound, (7,), repeats=5) is None
        bound(7)  # first launch: files the plan
        kernel[(3,)](7, BLOCK=64, num_warps=4)
    assert launches == [(bound, (7,)), (bound, (7,))]
    (compiled,) = jit.binaries.values()
    before = len(compiled.launches)
    plan_s, launcher_s = launch.stage_seconds(*launches[1], repeats=5)
    assert plan_s > 0 and launcher_s > 0
    assert len(compiled.launches) == before + 5  # the launcher stage launches for real
    assert launch._recorded is None  # recording ends with the block


class Triton36StyleLauncher:
    """The shape of Triton 3.6's CUDA launcher wrapper: kernel arguments forwarded flat, the launch
    metadata and hooks among them."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, True

    def __call__(self, x, y, z, stream, function, *args):
        self.launch(
            x, y, z, stream, function, self.launch_cooperative_grid, self.launch_pdl, None, None, *args
        )


def _installed_launchers():
    from triton.backends.amd.driver import HIPLauncher
    from triton.backends.nvidia.driver import CudaLauncher

    return [CudaLauncher, HIPLauncher]


@pytest.mark.parametrize(
    "launcher_type", [Triton36StyleLauncher, *_installed_launchers()], ids=lambda t: t.__name__
)
def test_the_direct_launch_passes_what_the_wrapper_passes(launcher_type):
    """Against the installed Triton's own CUDA and HIP wrappers (called on a launcher object whose C
    entry point records) and a 3.6-shaped one: same arguments, in the same order."""
    run = object.__new__(launcher_type)
    for name, value in {
        "global_scratch_size": 0, "global_scratch_align": 1, "profile_scratch_size": 0,
        "profile_scratch_align": 1, "num_ctas": 1, "launch_cooperative_grid": False, "launch_pdl": True,
        "arg_annotations": ("annotations",), "kernel_signature": ("signature",), "warp_size": 64,
    }.items():  # fmt: skip
        setattr(run, name, value)
    calls = []
    run.launch = lambda *args: calls.append(args)
    go = launch.direct_launch(run, "function", "metadata", (64, 1))
    assert go is not None
    go(3, 2, 1, 99, (111, 5, 0.5))
    run(3, 2, 1, 99, "function", "metadata", None, None, None, 111, 5, 0.5, 64, 1)
    assert len(calls) == 2 and calls[0] == calls[1]


def test_a_wrapper_that_allocates_scratch_is_called_itself():
    class Scratch(Triton36StyleLauncher):
        global_scratch_size = 128  # allocates per launch

    run = Scratch()
    calls = []
    run.launch = lambda *args: calls.append(args)
    launch.direct_launch(run, "function", "metadata", (64,))(3, 2, 1, 99, (111,))
    assert calls == [
        (3, 2, 1, 99, "function", False, True, None, None, "metadata", None, None, None, 111, 64)
    ]


class Twice(Triton36StyleLauncher):
    def __call__(self, *args):
        super().__call__(*args)
        super().__call__(*args)


class Reorders(Triton36StyleLauncher):
    def __call__(self, x, y, z, stream, function, *args):
        self.launch(x, y, z, stream, function, *reversed(args))


class Raises(Triton36StyleLauncher):
    def __call__(self, *args):
        raise TypeError("another signature")


class NoEntryPoint:
    def __call__(self, *args):
        pass


@pytest.mark.parametrize("launcher_type", [Twice, Reorders, Raises, NoEntryPoint], ids=lambda t: t.__name__)
def test_learning_fails_where_the_wrapper_does_more_than_pass_its_arguments_on(launcher_type):
    run = launcher_type()
    if launcher_type is not NoEntryPoint:
        run.launch = lambda *args: None
    with pytest.raises(launch.LearningFailed):
        launch.direct_launch(run, "function", "metadata", ())


@pytest.fixture
def gate_state(monkeypatch):
    """The gate's state as this process's Triton left it, restored after the test."""
    monkeypatch.setattr(launch, "_planned", True)
    monkeypatch.setattr(launch, "_reason", "planned launches (stand-in)")


def test_the_gate_plans_on_verified_releases_only():
    for version in ("3.6.0", "3.6.1", "3.7.1"):
        assert launch.gate(version) == (
            True,
            f"planned launches (Triton {version}; verified on 3.6.x, 3.7.x)",
        )
    for version in ("3.5.1", "3.9.0", "4.0.0", "3.10.0+git1234"):
        planned, reason = launch.gate(version)
        assert not planned
        assert (
            reason.startswith("Triton's own launch path:") and f"Triton {version} is not a release" in reason
        )


def test_a_release_off_the_gate_launches_through_triton_every_time(fake_runtime, gate_state, monkeypatch):
    monkeypatch.setattr(launch, "_planned", False)
    jit = FakeJit()
    kernel = Kernel(jit)
    for _ in range(3):
        kernel[(2,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 3 and all(not c.launches for c in jit.binaries.values())
    assert not kernel.at((2,), BLOCK=64)._plans


def test_a_failure_to_learn_the_launcher_takes_tritons_path_from_then_on(fake_runtime, gate_state, caplog):
    jit = FakeJit()
    kernel = Kernel(jit)
    planned_before = kernel.at((1,), BLOCK=64)
    for _ in range(2):
        planned_before(7)  # a plan, then launched by it
    assert len(jit.jit_launches) == 1
    jit.launcher = lambda compiled: NoEntryPoint()  # stand-in: another Triton's launcher
    jit.binaries.clear()  # the next launch compiles again
    with caplog.at_level("WARNING"):
        for _ in range(3):
            kernel[(4,)](7, BLOCK=64)  # learning fails on the first: Triton's path every time
            planned_before(7)  # its plan is no longer taken
        kernel[(5,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 1 + 3 * 2 + 1
    planned, reason = launch.launch_path()
    assert not planned and reason == (
        "Triton's own launch path: learning Triton's launcher failed "
        "(the launcher has no C entry point (launch))"
    )
    assert [r.getMessage() for r in caplog.records] == [f"spec_hal: {reason}"]  # recorded once
    assert not kernel.at((4,), BLOCK=64)._plans


def test_a_sequence_takes_tritons_path_off_the_gate(fake_runtime, gate_state, monkeypatch):
    jit = FakeJit()
    kernel = Kernel(jit)
    sequence = launch.LaunchSequence([kernel.at((1,), LEVEL=level) for level in range(3)])
    sequence(7)
    sequence(7)
    assert len(jit.jit_launches) == 3
    monkeypatch.setattr(launch, "_planned", False)
    sequence(7)
    assert len(jit.jit_launches) == 6


def test_the_launch_path_names_the_interpreter(monkeypatch, gate_state):
    monkeypatch.setattr(launch, "_INTERPRETED", True)
    assert launch.launch_path() == (False, "Triton's interpreter (TRITON_INTERPRET=1)")
    monkeypatch.setattr(launch, "_INTERPRETED", False)
    assert launch.launch_path() == (True, "planned launches (stand-in)")


def test_a_binder_missing_from_the_jit_is_a_failure_to_learn():
    with pytest.raises(launch.LearningFailed, match="device_caches"):
        launch.binder(types.SimpleNamespace(device_caches={}), 0)
    with pytest.raises(launch.LearningFailed, match="packed_metadata"):
        launch.compiled_parts(types.SimpleNamespace(run=None, function=None))


@pytest.mark.parametrize(
    "op, sizes",
    [
        ("assign_req_to_token_pool", {"bs": 4}),
        ("draft_topk1_postprocess", {"bs": 3, "vocab": 300}),  # partials, then the op's kernel
        ("move_kv_cache", {"bs": 4, "num_steps": 3}),
        ("top_p_renorm_prob", {"bs": 2, "vocab": 200}),
        ("fast_topk", {"bs": 3, "vocab": 100}),
        ("scatter_mamba_states_after_mtp_verify", {"bs": 3}),  # launches kept by the parts plan
        ("commit_mamba_states_after_verify", {"bs": 3}),
    ],
)
def test_a_launcher_builds_its_launches_once_per_launch_shape(op, sizes, monkeypatch):
    """Two calls of one size make the same launches (the same objects, holding the plans), and the
    second builds none: its grids, constexprs and options are not worked out again."""
    from spec_hal import ops, registry
    from spec_hal.bench import builders
    from spec_hal.testing import emulate, use_provider

    builder = builders()[op]
    params = inspect.signature(builder).parameters
    inputs = builder(torch.device("cpu"), **{k: v for k, v in sizes.items() if k in params})
    with emulate("cuda"), use_provider(op, registry.TRITON):
        with launch.recording() as first:
            getattr(ops, op)(**inputs)
        built = []
        at = Kernel.at
        monkeypatch.setattr(
            Kernel, "at", lambda self, grid, /, **options: built.append(grid) or at(self, grid, **options)
        )
        with launch.recording() as second:
            getattr(ops, op)(**inputs)
    assert first and built == []
    assert all(a is b for (a, _), (b, _) in zip(first, second, strict=True)) and len(first) == len(second)


def test_every_launch_states_fp_fusion_instead_of_leaving_it_to_tritons_default():
    """Triton 3.9 warns on every compile that leaves ``enable_fp_fusion`` unset (3.10 turns the
    default off): every launch of the family states it, so no compile takes the default."""
    from spec_hal.aot import capture
    from spec_hal.kernels.triton.config import INTERPRETER

    launches = capture({"interpreter": INTERPRETER}, "quick").launches["interpreter"]
    assert launches and all(launch.kwargs.get("enable_fp_fusion") is True for launch in launches)
