"""A warm ``fast_topk`` call through the Triton family passes five of spec_hal's files: the contract
module, ``validation``, ``opdef`` (``dispatch`` alone), the launcher's module and ``launch`` (whose
gate is asked on every launch). The planned path runs against stand-ins of Triton's JIT function,
compiled kernel and driver (as in ``test_launch.py``)."""

from __future__ import annotations

import pytest
import torch
from call_walk import entered, files, walk

from spec_hal import ops
from spec_hal.kernels.triton import vocab
from spec_hal.kernels.triton.launch import Kernel

#: Rows shorter than the interpreter configuration's split_row_lanes: one launch per call.
PROBS = torch.rand(4, 128, generator=torch.Generator().manual_seed(0))
#: Files a warm call has no reason to enter: the capture check keeps the device's query, a launch
#: configuration hashes without a Python frame.
NOT_ENTERED = ("runtime.py", "kernels/triton/config.py", "devices/", "registry/")


def _unexpected(stops):
    return [file for file in files(stops) if file.startswith(NOT_ENTERED)]


def test_a_warm_call_under_the_interpreter_passes_at_most_five_files(triton_vendor):
    for _ in range(2):  # the first call may bind while the registry initialises: bound by the second
        ops.fast_topk(PROBS, 4)
    stops = walk(ops.fast_topk, PROBS, 4)
    assert len(files(stops)) <= 5 and not _unexpected(stops), stops
    assert "takes_tritons_path" not in entered(stops, "kernels/triton/launch.py")  # known at import
    assert entered(stops, "opdef.py") == ["dispatch"]


class _Run:
    """A compiled kernel's launcher: passes its arguments on to a C entry point that does nothing."""

    def __call__(self, *args):
        self.launch(*args)

    def launch(self, *args):
        return None


class _Compiled:
    def __init__(self) -> None:
        self.function, self.packed_metadata, self.run = "function", "metadata", _Run()


class _Jit:
    """Triton's JIT function as a launch uses it: ``[grid](...)`` compiles, ``device_caches`` binds."""

    def __init__(self) -> None:
        self.compiled = _Compiled()
        self.device_caches = {0: (self._binder,)}
        self.launches = 0

    @staticmethod
    def _binder(*args, **options):
        constexprs = {name: value for name, value in options.items() if name.isupper()}
        bound = {f"a{i}": arg for i, arg in enumerate(args)} | constexprs
        return bound, [("arg", None)] * len(args) + [("constexpr", v) for v in constexprs.values()], {}

    def __getitem__(self, grid):
        def run(*args, **options):
            self.launches += 1
            return self.compiled

        return run


@pytest.fixture
def planned_top_kernel(fake_runtime, monkeypatch):
    """``fast_topk``'s one-launch kernel on a stand-in JIT, with planned launches on (no interpreter)."""
    monkeypatch.setattr(vocab, "_top_kernel", Kernel(_Jit()))
    vocab._top_launches.cache_clear()  # launches of the real kernel: not this test's
    yield vocab._top_kernel.jit
    vocab._top_launches.cache_clear()


def test_a_warm_planned_call_passes_at_most_five_files(triton_vendor, planned_top_kernel):
    for _ in range(2):  # through Triton (the stand-in), which files the plan; then the plan
        ops.fast_topk(PROBS, 4)
    stops = walk(ops.fast_topk, PROBS, 4)
    assert planned_top_kernel.launches == 1, "the warm call took Triton's path, not its plan"
    # The plan's generated code: the reader of the arguments, then the direct launch.
    assert [function for file, function in stops if file.startswith("<")] == ["read", "go"]
    # The gate stays a call: whether a launch hook is set is read on every launch, in the one
    # module that reads Triton's private API.
    assert entered(stops, "kernels/triton/launch.py").count("takes_tritons_path") == 1
    assert len(files(stops)) <= 5 and not _unexpected(stops), stops
    assert entered(stops, "opdef.py") == ["dispatch"]


#: Ops whose warm call passes more files, and why: the mamba commit runs G1's and G2's argument
#: checks, each kept with its stage's contract (``ops/mamba/steps.py``, ``scatter.py``).
MORE_FILES = {"commit_mamba_states_after_verify": 7}


def test_every_ops_warm_call_on_an_accelerator_passes_at_most_five_files(triton_vendor, monkeypatch):
    """Every op of every family, Triton-served or portable, on its small cases: the contract's
    module, ``validation`` (every check several contract modules share is there), ``opdef``, the
    provider's module and ``launch``. CPU tensors stand in for the accelerator's, with value checks
    off as on an accelerator without ``SPEC_HAL_DEBUG`` (on CPU tensors they read the data, and some
    read the family's layout helpers)."""
    from spec_hal import config, validation
    from spec_hal.conformance import runner

    monkeypatch.setitem(validation._KIND_OF_DEVICE, torch.device("cpu"), "accelerator")
    monkeypatch.setattr(config, "debug_read", False)  # whatever SPEC_HAL_DEBUG the tests run under
    walked: dict[str, int] = {}
    seen: dict[str, int] = {}
    for case in runner.all_cases():
        if not case.small or seen.get(case.op, 0) >= 3:
            continue
        seen[case.op] = seen.get(case.op, 0) + 1
        for _ in range(2):  # the first call may bind while the registry initialises: bound by the second
            runner.call(case, runner.fresh_build(case, torch.device("cpu")))
        stops = walk(runner.call, case, runner.fresh_build(case, torch.device("cpu")))
        ours = [file for file in files(stops) if not file.startswith("conformance/")]
        assert not [file for file in ours if file.startswith(NOT_ENTERED)], (case.op, case.name, ours)
        assert len(ours) <= MORE_FILES.get(case.op, 5), (case.op, case.name, ours)
        walked[case.op] = max(walked.get(case.op, 0), len(ours))
    assert set(walked) == set(runner.builders())
    assert {op: walked[op] for op in MORE_FILES} == MORE_FILES, "an op walks fewer files: update MORE_FILES"
