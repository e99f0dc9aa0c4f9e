"""Triton providers of A8 ``align_evict_mask_to_page_size`` and A9
``rebuild_compact_draft_req_to_token``."""

from __future__ import annotations

import functools

import triton
import triton.language as tl
from torch import Tensor

from ..config import LaunchConfig
from ..device_math import floor_div
from ..launch import Launch, cdiv, kernel
from ..sizing import copy_warps, latency_warps, pow2, rows_per_program
from ._common import load_rows


@kernel
@triton.jit
def _align_evict_mask_kernel(
    seq_lens_ptr,
    seq_stride,
    mask_ptr,
    mask_stride,
    bs,
    draft_token_num,
    PAGE_SIZE: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """A8: per request row of D (<= COLS) flags, clear the flags of the page holding the last kept
    token. A row belongs to one program, which reads it whole before clearing (one level).
    Grid: (cdiv(bs, ROWS),)."""
    request = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    live = request < bs
    column = tl.arange(0, COLS)[None, :]
    inside = live[:, None] & (column < draft_token_num)
    entry = request[:, None] * draft_token_num + column
    flags = tl.load(mask_ptr + entry * mask_stride, mask=inside, other=0)
    seq = tl.load(seq_lens_ptr + request * seq_stride, mask=live, other=0).to(tl.int64)
    kept = draft_token_num - tl.sum(flags.to(tl.int64), axis=1)
    # Offset, from the request's first verify slot, of the page holding its last kept token.
    page_start = (floor_div(seq + kept - 1, PAGE_SIZE) * PAGE_SIZE - seq)[:, None]
    clear = inside & (column >= page_start) & (column < page_start + PAGE_SIZE)
    tl.store(mask_ptr + entry * mask_stride, tl.zeros([ROWS, COLS], dtype=tl.int1), mask=clear)


@triton.jit
def _rebuild_draft_chunk(
    column0,
    end,
    draft_row,
    draft_col_stride,
    target_row,
    target_col_stride,
    target_len,
    suffix,
    prefix_len,
    verify_row,
    verify_col_stride,
    block,
    COLS: tl.constexpr,
):
    """Draft columns ``column0 .. column0+COLS-1`` (those below ``end``) of one request: the target
    slot below ``prefix_len``, the verify slot in the ``block`` columns after it. Both sources are
    loaded before the one store."""
    column = column0 + tl.arange(0, COLS).to(tl.int64)
    inside = column < end
    in_prefix = column < prefix_len
    target_column = suffix + column
    from_target = inside & in_prefix & (target_column >= 0) & (target_column < target_len)
    block_column = column - prefix_len
    from_verify = inside & (block_column >= 0) & (block_column < block)
    # The two sources are disjoint and each reads 0 where masked: their sum is the slot.
    target_slot = tl.load(target_row + target_column * target_col_stride, mask=from_target, other=0)
    verify_slot = tl.load(verify_row + block_column * verify_col_stride, mask=from_verify, other=0)
    value = target_slot + verify_slot.to(tl.int32)
    tl.store(draft_row + column * draft_col_stride, value, mask=from_target | from_verify)


@kernel
@triton.jit
def _rebuild_compact_draft_kernel(
    draft_ptr,
    draft_row_stride,
    draft_col_stride,
    draft_len,
    target_ptr,
    target_row_stride,
    target_col_stride,
    target_len,
    num_rows,
    rpi_ptr,
    rpi_stride,
    suffix_ptr,
    suffix_stride,
    prefix_ptr,
    prefix_stride,
    verify_ptr,
    verify_row_stride,
    verify_col_stride,
    block,
    COLS: tl.constexpr,
):
    """A9: draft row ``rpi[b]`` = target row's ``[suffix, suffix + pl)`` then the request's ``block``
    verify slots. Grid: (bs, column chunks), chunks grid-strided over the row. The first chunk is
    straight-line code (no branch between the loads of a level: two levels)."""
    request = tl.program_id(0).to(tl.int64)
    row, row_ok = load_rows(rpi_ptr, rpi_stride, request, request >= 0, num_rows)
    suffix = tl.load(suffix_ptr + request * suffix_stride).to(tl.int64)
    prefix_len = tl.load(prefix_ptr + request * prefix_stride).to(tl.int64)
    # Columns written lie below pl + block (and inside the draft row).
    end = tl.where(row_ok, tl.minimum(tl.maximum(prefix_len + block, 0), draft_len), 0)
    draft_row = draft_ptr + row * draft_row_stride
    target_row = target_ptr + row * target_row_stride
    verify_row = verify_ptr + request * verify_row_stride
    chunk_step = tl.num_programs(1) * COLS
    first_column = tl.program_id(1) * COLS
    _rebuild_draft_chunk(
        first_column.to(tl.int64),
        end,
        draft_row,
        draft_col_stride,
        target_row,
        target_col_stride,
        target_len,
        suffix,
        prefix_len,
        verify_row,
        verify_col_stride,
        block,
        COLS,
    )
    for column0 in range(first_column + chunk_step, end.to(tl.int32), chunk_step):  # rows past the grid
        _rebuild_draft_chunk(
            tl.cast(column0, tl.int64),
            end,
            draft_row,
            draft_col_stride,
            target_row,
            target_col_stride,
            target_len,
            suffix,
            prefix_len,
            verify_row,
            verify_col_stride,
            block,
            COLS,
        )


def align_evict_mask_to_page_size(
    config: LaunchConfig, seq_lens: Tensor, evict_mask: Tensor, page_size: int, draft_token_num: int
) -> None:
    bs = seq_lens.shape[0]
    _align_evict_mask_launch(config, bs, page_size, draft_token_num)(
        seq_lens,
        seq_lens.stride()[0],
        evict_mask,
        evict_mask.stride()[0],
        bs,
        draft_token_num,
    )


@functools.lru_cache(maxsize=1024)
def _align_evict_mask_launch(config: LaunchConfig, bs: int, page_size: int, draft_token_num: int) -> Launch:
    columns = pow2(draft_token_num)
    rows = rows_per_program(bs, columns, config)
    return _align_evict_mask_kernel.at(
        (cdiv(bs, rows),),
        PAGE_SIZE=page_size,
        ROWS=rows,
        COLS=columns,
        num_warps=latency_warps(config, rows * columns),
    )


def rebuild_compact_draft_req_to_token(
    config: LaunchConfig,
    draft_req_to_token: Tensor,
    target_req_to_token: Tensor,
    req_pool_indices: Tensor,
    suffix_start: Tensor,
    draft_prefix_lens: Tensor,
    verify_out_cache_loc: Tensor,
) -> None:
    draft_len = draft_req_to_token.shape[1]
    _rebuild_compact_draft_launch(
        config, req_pool_indices.shape[0], draft_len, draft_req_to_token.element_size()
    )(
        draft_req_to_token,
        *draft_req_to_token.stride(),
        draft_len,
        target_req_to_token,
        *target_req_to_token.stride(),
        target_req_to_token.shape[1],
        draft_req_to_token.shape[0],
        req_pool_indices,
        req_pool_indices.stride()[0],
        suffix_start,
        suffix_start.stride()[0],
        draft_prefix_lens,
        draft_prefix_lens.stride()[0],
        verify_out_cache_loc,
        *verify_out_cache_loc.stride(),
        verify_out_cache_loc.shape[1],
    )


@functools.lru_cache(maxsize=1024)
def _rebuild_compact_draft_launch(config: LaunchConfig, bs: int, draft_len: int, element_size: int) -> Launch:
    columns = min(max(config.copy_block_bytes // element_size, 1), pow2(draft_len))
    grid = (bs, max(min(cdiv(draft_len, columns), config.max_grid), 1))
    return _rebuild_compact_draft_kernel.at(grid, COLS=columns, num_warps=copy_warps(config, columns))
