"""Triton kernel of D8's ``keyed_uniform``: each program draws a tile of lanes of rows q, q + grid, ...

The draws are :func:`~spec_hal.kernels.triton.device_math.keyed_uniform_block`'s, which the keyed
exponential races of ``vocab.py`` compute in their passes too: a lane's value depends on its key
alone, so the tile and the grid change who computes it, never what it is.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .config import LaunchConfig
from .device_math import KEYED_GROUP, keyed_row, keyed_uniform_block
from .launch import Launch, cdiv, kernel, next_power_of_2
from .launcher import Launcher
from .sizing import copy_warps


@kernel
@triton.jit
def _keyed_uniform_kernel(
    seeds_ptr, seeds_stride, positions_ptr, positions_stride,
    out_ptr, out_stride_b, out_stride_n,
    batch, n, step, domain,
    BLOCK: tl.constexpr,
):  # fmt: skip
    start = tl.program_id(0) * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    inside = offsets < n
    for row in range(tl.program_id(1), batch, tl.num_programs(1)):
        row64 = tl.zeros((), tl.int64) + row
        key_low, key_high, counter1, counter2, counter3 = keyed_row(
            seeds_ptr, seeds_stride, positions_ptr, positions_stride, row64, step, domain
        )
        uniforms = keyed_uniform_block(key_low, key_high, counter1, counter2, counter3, start, BLOCK)
        tl.store(out_ptr + row64 * out_stride_b + offsets.to(tl.int64) * out_stride_n, uniforms, mask=inside)


@functools.lru_cache(maxsize=1024)
def _keyed_uniform_launch(config: LaunchConfig, batch: int, n: int) -> Launch:
    """Tiles of the copy tile's lanes (fewer for short rows), one program per tile and row."""
    block = max(min(next_power_of_2(n), next_power_of_2(config.copy_block_bytes // 4)), KEYED_GROUP)
    return _keyed_uniform_kernel.at(
        (cdiv(n, block), min(batch, config.max_grid)), BLOCK=block, num_warps=copy_warps(config, block)
    )


def launch_keyed_uniform(
    config: LaunchConfig,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    step: int,
    domain: int,
    out: torch.Tensor,
) -> None:
    batch, n = out.shape
    _keyed_uniform_launch(config, batch, n)(
        seeds, seeds.stride()[0], positions, positions.stride()[0], out, *out.stride(), batch, n, step, domain
    )


#: The family's launchers of this module.
LAUNCHERS: tuple[Launcher, ...] = (Launcher("keyed_uniform", launch_keyed_uniform),)
