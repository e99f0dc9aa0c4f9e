"""An empty Triton kernel: the launch floor the benchmarks divide latency-bound timings by."""

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
