"""The compiled-handle launcher of ``spec_hal/kernels/triton/launch.py``, against a fake Triton runtime.

No accelerator here: the JIT function, its binder, the compiled kernel and the driver are fakes that
record what the launcher calls. The real launcher runs on the H200 through the conformance suite.
"""

from __future__ import annotations

import types

import pytest
import triton

from spec_hal.kernels.triton import launch
from spec_hal.kernels.triton.launch import Kernel, cdiv, next_power_of_2


class FakeCompiled:
    def __init__(self, label: str) -> None:
        self.label = label
        self.function = f"function-{label}"
        self.packed_metadata = f"metadata-{label}"
        self.launches: list[tuple] = []

    def run(self, *args):
        self.launches.append(args)


class FakeJit:
    """Triton's JITFunction as the launcher uses it: ``[grid](...)``, ``device_caches``, the binder."""

    def __init__(self) -> None:
        self.device_caches: dict[int, tuple] = {}
        self.jit_launches: list[tuple] = []
        self.binaries: dict[tuple, FakeCompiled] = {}

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
            return self.binaries.setdefault(key, FakeCompiled(str(len(self.binaries))))

        return run


@pytest.fixture
def fake_runtime(monkeypatch):
    driver = types.SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device: 1234)
    monkeypatch.setattr(launch, "driver", types.SimpleNamespace(active=driver))
    monkeypatch.setattr(launch, "_INTERPRETED", False)
    monkeypatch.setattr(launch.knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(launch.knobs.runtime, "launch_exit_hook", None)
    monkeypatch.setattr(launch.knobs.runtime, "debug", False)
    return driver


def test_first_launch_goes_through_triton_then_the_compiled_handle(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    kernel[(4,)](7, 3, BLOCK=64, num_warps=4)  # the device's first launch: Triton builds its caches
    kernel[(4,)](7, 3, BLOCK=64, num_warps=4)  # a new specialisation for the launcher: Triton compiles
    assert len(jit.jit_launches) == 2
    kernel[(5, 2)](9, 3, BLOCK=64, num_warps=4)  # same specialisation (no int is 1): compiled handle
    assert len(jit.jit_launches) == 2
    (compiled,) = jit.binaries.values()
    assert compiled.launches == [
        (5, 2, 1, 1234, "function-0", "metadata-0", None, None, None, 9, 3, 64),
    ]


def test_a_new_specialisation_or_option_compiles_again(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    for _ in range(2):
        kernel[(1,)](7, BLOCK=64, num_warps=4)
    kernel[(1,)](1, BLOCK=64, num_warps=4)  # an int of 1 specialises differently
    kernel[(1,)](7, BLOCK=128, num_warps=4)  # another constexpr
    kernel[(1,)](7, BLOCK=64, num_warps=8)  # another launch option
    assert len(jit.jit_launches) == 5
    assert len(jit.binaries) == 4
    kernel[(1,)](1, BLOCK=64, num_warps=4)
    kernel[(1,)](7, BLOCK=64, num_warps=8)
    assert len(jit.jit_launches) == 5


def test_launch_hooks_and_the_interpreter_take_the_jit_path(fake_runtime, monkeypatch):
    jit = FakeJit()
    kernel = Kernel(jit)
    for _ in range(2):
        kernel[(1,)](7, BLOCK=64)
    monkeypatch.setattr(launch.knobs.runtime, "launch_enter_hook", lambda *args: None)
    kernel[(1,)](7, BLOCK=64)
    monkeypatch.setattr(launch.knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(launch, "_INTERPRETED", True)
    kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 4
    assert all(not c.launches for c in jit.binaries.values())


def test_an_exit_hook_or_a_debug_switch_is_honoured(fake_runtime, monkeypatch):
    jit = FakeJit()
    kernel = Kernel(jit)
    for _ in range(3):
        kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 2
    monkeypatch.setattr(launch.knobs.runtime, "launch_exit_hook", lambda *args: None)
    kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 3
    monkeypatch.setattr(launch.knobs.runtime, "launch_exit_hook", None)
    monkeypatch.setattr(launch.knobs.runtime, "debug", True)  # Triton compiles debug binaries then
    kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 4


def test_an_empty_hook_chain_is_no_hook(fake_runtime, monkeypatch):
    """Triton 3.6 keeps a HookChain (never None) as the launch hook: empty, it must not force the JIT
    path (the H200 profile showed every launch taking it)."""
    chain = types.SimpleNamespace(calls=[])
    monkeypatch.setattr(launch.knobs.runtime, "launch_enter_hook", chain)
    jit = FakeJit()
    kernel = Kernel(jit)
    for _ in range(3):
        kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 2
    chain.calls.append(lambda *args: None)
    kernel[(1,)](7, BLOCK=64)
    assert len(jit.jit_launches) == 3


def test_host_helpers_match_triton():
    for n in range(0, 2100):
        assert next_power_of_2(n) == triton.next_power_of_2(n)
        for divisor in (1, 2, 3, 7, 64, 1024):
            assert cdiv(n, divisor) == triton.cdiv(n, divisor)


def test_recorded_launches_are_timed_stage_by_stage(fake_runtime):
    jit = FakeJit()
    kernel = Kernel(jit)
    with launch.recording() as launches:
        kernel[(3,)](7, BLOCK=64, num_warps=4)  # first launch: no fast path yet
        assert launch.stage_seconds(*launches[0], repeats=5) is None
        kernel[(3,)](7, BLOCK=64, num_warps=4)
    assert [(grid, args) for _, grid, args, _ in launches] == [((3,), (7,)), ((3,), (7,))]
    (compiled,) = jit.binaries.values()
    before = len(compiled.launches)
    binder_s, launcher_s = launch.stage_seconds(*launches[1], repeats=5)
    assert binder_s > 0 and launcher_s > 0
    assert len(compiled.launches) == before + 5  # the launcher stage launches for real
    assert launch._recorded is None  # recording ends with the block
