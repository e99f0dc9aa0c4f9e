"""An empty Triton kernel: the launch floor the benchmarks divide latency-bound timings by."""

from collections.abc import Sequence

import torch
import triton

from .launch import Kernel


@triton.jit
def _empty_kernel(marker_ptr):
    pass


_empty_kernel_compiled = Kernel(_empty_kernel)


def launch_empty(marker: torch.Tensor) -> None:
    """Through Triton's JIT launch: the floor the issue's host-time target is stated against."""
    _empty_kernel[(1,)](marker)


def launch_empty_compiled(marker: torch.Tensor) -> None:
    """Through :class:`~spec_hal.kernels.triton.launch.Kernel`, as the family's kernels launch."""
    _empty_kernel_compiled[(1,)](marker)


def launch_empty_shaped(marker: torch.Tensor, shape: Sequence[tuple[tuple[int, ...], int]]) -> None:
    """One empty launch per ``(grid, num_warps)`` of ``shape``: the floor of an op whose launches
    have those grids and warps."""
    for grid, num_warps in shape:
        _empty_kernel[grid](marker, num_warps=num_warps)
