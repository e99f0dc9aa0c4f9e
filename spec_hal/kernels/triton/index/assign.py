"""Triton providers of family A slot assignment (A1-A3): the extend window and draft slot kernels."""

from __future__ import annotations

import functools

import triton
import triton.language as tl
from torch import Tensor

from ..config import LaunchConfig
from ..launch import Launch, cdiv, kernel
from ..sizing import latency_warps, pow2, rows_per_program, scan_args, scanning_warps
from ._common import DIFFERENCE, copy_runs, draft_column, exclusive_offsets, load_rows


@kernel
@triton.jit
def _window_kernel(
    rpi_ptr,
    rpi_stride,
    table_ptr,
    table_row_stride,
    table_col_stride,
    num_rows,
    pool_len,
    start_ptr,
    start_stride,
    end_ptr,
    end_stride,
    flat_ptr,
    flat_stride,
    flat_limit,
    bs,
    TO_TABLE: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    SCAN_BLOCK: tl.constexpr,
    SCAN_CHUNKS: tl.constexpr,
):
    """A1 (table -> flat) and A2 (flat -> table): window ``[start[b], end[b])`` of row ``rpi[b]`` <->
    the flat run at the exclusive cumsum of the window lengths. Grid: (cdiv(bs, ROWS),)."""
    first = tl.program_id(0) * ROWS
    request = first + tl.arange(0, ROWS)
    live = request < bs
    # One level: the rows, the window starts and the lengths of the block and of all earlier windows.
    row, row_ok = load_rows(rpi_ptr, rpi_stride, request, live, num_rows)
    begin = tl.load(start_ptr + request.to(tl.int64) * start_stride, mask=live, other=0).to(tl.int64)
    lengths, offsets = exclusive_offsets(
        first, bs, end_ptr, end_stride, start_ptr, start_stride, 0, DIFFERENCE, ROWS, SCAN_BLOCK, SCAN_CHUNKS
    )
    # Position i of a run: column begin + i of the table, flat position offsets + i; both in range.
    lo = tl.maximum(tl.maximum(-begin, -offsets), 0)
    hi = tl.minimum(tl.minimum(lengths, pool_len - begin), flat_limit - offsets)
    hi = tl.where(row_ok, hi, 0)
    table_base = row * table_row_stride + begin * table_col_stride
    flat_base = offsets * flat_stride
    if TO_TABLE:
        copy_runs(flat_ptr, flat_base, flat_stride, table_ptr, table_base, table_col_stride, lo, hi, COLS)
    else:
        copy_runs(table_ptr, table_base, table_col_stride, flat_ptr, flat_base, flat_stride, lo, hi, COLS)


@kernel
@triton.jit
def _draft_slots_kernel(
    rpi_ptr,
    rpi_stride,
    table_ptr,
    table_row_stride,
    table_col_stride,
    num_rows,
    pool_len,
    seq_lens_ptr,
    seq_stride,
    out_ptr,
    out_stride,
    bs,
    TOPK: tl.constexpr,
    STEPS: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """A3 and A1-uniform: ``out[b*K*S + t*S + s] = req_to_token[rpi[b], draft column (t, s)]``, a
    ``[ROWS requests, COLS >= K*S]`` tile: two dependent levels (row and length, then the slots).
    Grid: (cdiv(bs, ROWS),)."""
    request = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    live = request < bs
    draft = tl.arange(0, COLS)  # t*S + s
    branch = (draft // STEPS)[None, :]
    step = (draft % STEPS)[None, :]
    row, row_ok = load_rows(rpi_ptr, rpi_stride, request, live, num_rows)
    seq = tl.load(seq_lens_ptr + request * seq_stride, mask=live, other=0).to(tl.int64)
    column = draft_column(seq[:, None], branch, step, PAGE_SIZE, STEPS)
    readable = row_ok[:, None] & (draft[None, :] < TOPK * STEPS) & (column >= 0) & (column < pool_len)
    slot = tl.load(table_ptr + row[:, None] * table_row_stride + column * table_col_stride, mask=readable)
    entry = request[:, None] * (TOPK * STEPS) + draft[None, :]
    tl.store(out_ptr + entry * out_stride, slot.to(tl.int64), mask=readable)


def assign_extend_cache_locs(
    config: LaunchConfig,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    start: Tensor,
    end: Tensor,
    out: Tensor,
) -> None:
    _launch_window(
        config,
        req_pool_indices,
        req_to_token,
        start,
        end,
        out,
        min(out.numel(), req_pool_indices.shape[0] * req_to_token.shape[1]),
        to_table=False,
    )


def assign_req_to_token_pool(
    config: LaunchConfig,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    start: Tensor,
    end: Tensor,
    out_cache_loc: Tensor,
) -> None:
    _launch_window(
        config,
        req_pool_indices,
        req_to_token,
        start,
        end,
        out_cache_loc,
        out_cache_loc.numel(),
        to_table=True,
    )


def _launch_window(
    config: LaunchConfig,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    start: Tensor,
    end: Tensor,
    flat: Tensor,
    flat_limit: int,
    *,
    to_table: bool,
) -> None:
    bs = req_pool_indices.shape[0]
    _window_launch(config, bs, to_table)(
        req_pool_indices,
        req_pool_indices.stride()[0],
        req_to_token,
        *req_to_token.stride(),
        *req_to_token.shape,
        start,
        start.stride()[0],
        end,
        end.stride()[0],
        flat,
        flat.stride()[0],
        flat_limit,
        bs,
    )


@functools.lru_cache(maxsize=1024)
def _window_launch(config: LaunchConfig, bs: int, to_table: bool) -> Launch:
    columns = config.warp_size  # windows are data-dependent: a warp-wide chunk per iteration
    rows = rows_per_program(bs, columns, config)
    num_warps = scanning_warps(config, rows * columns, bs)
    return _window_kernel.at(
        (cdiv(bs, rows),),
        TO_TABLE=to_table,
        ROWS=rows,
        COLS=columns,
        **scan_args(bs, config, num_warps),
        num_warps=num_warps,
    )


def _launch_draft_slots(
    config: LaunchConfig,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    topk: int,
    num_steps: int,
    page_size: int,
    out: Tensor,
) -> None:
    bs = req_pool_indices.shape[0]
    _draft_slots_launch(config, bs, topk, num_steps, page_size)(
        req_pool_indices,
        req_pool_indices.stride()[0],
        req_to_token,
        *req_to_token.stride(),
        *req_to_token.shape,
        seq_lens,
        seq_lens.stride()[0],
        out,
        out.stride()[0],
        bs,
    )


@functools.lru_cache(maxsize=1024)
def _draft_slots_launch(config: LaunchConfig, bs: int, topk: int, num_steps: int, page_size: int) -> Launch:
    columns = pow2(topk * num_steps)
    rows = rows_per_program(bs, columns, config)
    return _draft_slots_kernel.at(
        (cdiv(bs, rows),),
        TOPK=topk,
        STEPS=num_steps,
        PAGE_SIZE=page_size,
        ROWS=rows,
        COLS=columns,
        num_warps=latency_warps(config, rows * columns),
    )


def assign_extend_cache_locs_uniform(
    config: LaunchConfig,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    start: Tensor,
    draft_token_num: int,
    out: Tensor,
) -> None:
    # The uniform window [start, start + D) is the draft layout of a single branch of D steps.
    _launch_draft_slots(config, req_pool_indices, req_to_token, start, 1, draft_token_num, 1, out)


def assign_draft_cache_locs_contiguous(
    config: LaunchConfig,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    topk: int,
    num_steps: int,
    page_size: int,
    out: Tensor,
) -> None:
    _launch_draft_slots(config, req_pool_indices, req_to_token, seq_lens, topk, num_steps, page_size, out)
