"""The bench's per-grid launch floor (``spec_hal.bench.launch_shape`` and the empty launches timed
for it), with the Triton family interpreted on CPU tensors."""

from __future__ import annotations

import types

import torch

from spec_hal import ops, registry
from spec_hal.bench import TRITON_DEFAULT_WARPS, launch_shape
from spec_hal.conformance.cases import sampling as sampling_cases
from spec_hal.kernels.triton import empty
from spec_hal.testing import use_provider

CPU = torch.device("cpu")


def test_the_launch_shape_is_each_triton_launch_grid_and_warps(triton_vendor):
    """A one-slice vocabulary takes one launch, a wide one a partials launch first; the shape follows
    the launches the provider makes, grid by grid."""
    for vocab, launches in ((16, 1), (300 + 7, 2)):  # one slice, several (interpreter config)
        kwargs = sampling_cases.BUILDERS["draft_topk1_postprocess"](CPU, bs=3, vocab=vocab, seed=1)
        with use_provider("draft_topk1_postprocess", registry.TRITON):
            shape = launch_shape(lambda kwargs=kwargs: ops.draft_topk1_postprocess(**kwargs))
        assert len(shape) == launches
        grid, num_warps = shape[-1]
        assert grid == (3,)  # the op's kernel: one program per row
        assert isinstance(num_warps, int) and num_warps >= 1
        if launches == 2:
            assert len(shape[0][0]) == 2 and shape[0][0][1] == 3  # (slices, rows)


def test_a_provider_without_triton_launches_has_no_shape():
    kwargs = sampling_cases.BUILDERS["draft_topk1_postprocess"](CPU, bs=3, vocab=64, seed=1)
    assert launch_shape(lambda: ops.draft_topk1_postprocess(**kwargs)) == ()


def test_the_floor_launches_an_empty_kernel_per_grid_and_warps(monkeypatch):
    launched = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda marker, num_warps: launched.append((grid, num_warps))

    monkeypatch.setattr(empty, "_empty_kernel", Recorder())
    shape = (((4, 3), 8), ((3,), TRITON_DEFAULT_WARPS))
    empty.launch_empty_shaped(types.SimpleNamespace(), shape)
    assert launched == list(shape)
