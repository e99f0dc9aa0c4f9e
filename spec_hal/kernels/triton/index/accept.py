"""Triton providers of family A after verify (A5-A7): accepted slot compaction, source/target slot
lists and the accept filters."""

from __future__ import annotations

import functools

import triton
import triton.language as tl
from torch import Tensor

from ..config import LaunchConfig
from ..device_math import floor_div
from ..launch import Launch, cdiv, kernel
from ..sizing import latency_warps, pow2, rows_per_program, scan_args, scanning_warps
from ._common import IN_RANGE, PLUS_ONE, VALUE, copy_runs, exclusive_offsets, load_run, store_run, sum_before


@kernel
@triton.jit
def _compact_accepted_kernel(
    accept_ptr,
    accept_stride,
    slots_ptr,
    slots_stride,
    num_slots,
    out_ptr,
    out_stride,
    out_limit,
    size,
    BLOCK: tl.constexpr,
    SCAN_BLOCK: tl.constexpr,
    SCAN_CHUNKS: tl.constexpr,
):
    """A5 stream compaction: accepted entry p (0 <= accept[p] < num_slots) writes its slot at its rank
    among accepted entries (the exclusive scan of the accepted flags). Each entry is loaded once, as
    flag and as slot index. Grid: (cdiv(size, BLOCK),)."""
    first = tl.program_id(0) * BLOCK
    entry = (first + tl.arange(0, BLOCK)).to(tl.int64)
    index = tl.load(accept_ptr + entry * accept_stride, mask=entry < size, other=-1).to(tl.int64)
    accepted = ((index >= 0) & (index < num_slots)).to(tl.int64)
    before = sum_before(
        first,
        accept_ptr,
        accept_stride,
        accept_ptr,
        accept_stride,
        num_slots,
        IN_RANGE,
        SCAN_BLOCK,
        SCAN_CHUNKS,
    )
    rank = before + tl.cumsum(accepted, axis=0) - accepted
    keep = (accepted > 0) & (rank < out_limit)
    slot = tl.load(slots_ptr + index * slots_stride, mask=keep)
    tl.store(out_ptr + rank * out_stride, slot.to(tl.int64), mask=keep)


@kernel
@triton.jit
def _src_tgt_kernel(
    seq_lens_ptr,
    seq_stride,
    slots_ptr,
    slots_stride,
    num_slots,
    accept_ptr,
    accept_stride,
    num_accepted,
    ncd_ptr,
    ncd_stride,
    src_ptr,
    src_stride,
    tgt_ptr,
    tgt_stride,
    to_free_ptr,
    to_free_stride,
    bs,
    draft_token_num,
    PAGE_SIZE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """A6 get_src_tgt_cache_loc: lane p handles accepted entry p (gather + zero) and request p (slots to
    free). Grid: (cdiv(max(A, bs), BLOCK),)."""
    lane = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_accept = lane < num_accepted
    in_batch = lane < bs
    index = tl.load(accept_ptr + lane * accept_stride, mask=in_accept, other=-1).to(tl.int64)
    seq = tl.load(seq_lens_ptr + lane * seq_stride, mask=in_batch, other=0).to(tl.int64)
    ncd = tl.load(ncd_ptr + lane * ncd_stride, mask=in_batch, other=0).to(tl.int64)
    readable = in_accept & (index >= 0) & (index < num_slots)
    slot = tl.load(slots_ptr + index * slots_stride, mask=readable)
    tl.store(tgt_ptr + lane * tgt_stride, tl.zeros([BLOCK], dtype=tl.int64), mask=in_accept)
    extended = seq + draft_token_num
    page_end = floor_div(seq + ncd + PAGE_SIZE, PAGE_SIZE) * PAGE_SIZE  # roundup(seq + ncd + 1, ps)
    tl.store(to_free_ptr + lane * to_free_stride, extended - tl.minimum(page_end, extended), mask=in_batch)
    tl.store(src_ptr + lane * src_stride, slot.to(tl.int64), mask=readable)


@kernel
@triton.jit
def _target_cache_loc_kernel(
    tgt_ptr,
    tgt_stride,
    tgt_limit,
    free_ptr,
    free_stride,
    free_limit,
    ncd_ptr,
    ncd_stride,
    to_free_ptr,
    to_free_stride,
    slots_ptr,
    slots_stride,
    bs,
    draft_token_num,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    SCAN_BLOCK: tl.constexpr,
    SCAN_CHUNKS: tl.constexpr,
):
    """A6 get_target_cache_loc: request b's first ncd+1 verify slots to ``tgt`` and its last
    ``to_free_num_slots`` to ``to_free_slots``, each at the exclusive cumsum of its run lengths. Both
    runs hold at most D (<= COLS) slots: both are loaded before either is stored (two levels).
    Grid: (cdiv(bs, ROWS),)."""
    first = tl.program_id(0) * ROWS
    committed, tgt_start = exclusive_offsets(
        first, bs, ncd_ptr, ncd_stride, ncd_ptr, ncd_stride, 0, PLUS_ONE, ROWS, SCAN_BLOCK, SCAN_CHUNKS
    )
    freed, free_start = exclusive_offsets(
        first,
        bs,
        to_free_ptr,
        to_free_stride,
        to_free_ptr,
        to_free_stride,
        0,
        VALUE,
        ROWS,
        SCAN_BLOCK,
        SCAN_CHUNKS,
    )
    live = first + tl.arange(0, ROWS) < bs
    request_slots = (first + tl.arange(0, ROWS)).to(tl.int64) * draft_token_num  # its first verify slot
    # Accepted: verify column i < D.
    lo = tl.maximum(-tgt_start, 0)
    hi = tl.minimum(tl.minimum(committed, draft_token_num), tgt_limit - tgt_start)
    hi = tl.where(live, hi, 0)
    accepted, accepted_at, accepted_mask = load_run(
        slots_ptr, request_slots * slots_stride, slots_stride, lo, hi, COLS
    )
    # Freed: verify column D - freed + i, inside [0, D).
    lo = tl.maximum(tl.maximum(-free_start, freed - draft_token_num), 0)
    hi = tl.where(live, tl.minimum(freed, free_limit - free_start), 0)
    freed_base = (request_slots + draft_token_num - freed) * slots_stride
    released, released_at, released_mask = load_run(slots_ptr, freed_base, slots_stride, lo, hi, COLS)
    store_run(tgt_ptr, tgt_start * tgt_stride, tgt_stride, accepted, accepted_at, accepted_mask)
    store_run(free_ptr, free_start * free_stride, free_stride, released, released_at, released_mask)


@triton.jit
def _listed_requests(first, unfinished_ptr, unfinished_stride, num_unfinished, bs, BLOCK: tl.constexpr):
    """Entries ``first ..`` of the unfinished list: their request (int64) and whether it is a row."""
    entry = (first + tl.arange(0, BLOCK)).to(tl.int64)
    in_list = entry < num_unfinished
    request = tl.load(unfinished_ptr + entry * unfinished_stride, mask=in_list, other=-1).to(tl.int64)
    return request, in_list & (request >= 0) & (request < bs)


@triton.jit
def _committed(ncd_ptr, ncd_stride, request, mask):
    """Committed tokens (ncd + 1, int64) of each request."""
    return tl.load(ncd_ptr + request * ncd_stride, mask=mask, other=0).to(tl.int64) + 1


@triton.jit
def _advance_requests(
    first, ncd_ptr, ncd_stride, seq_lens_ptr, seq_stride, filter_ptr, filter_stride, bs, BLOCK: tl.constexpr
):
    """Requests ``first ..``: ``seq_lens += ncd + 1`` and a zero filter."""
    request = (first + tl.arange(0, BLOCK)).to(tl.int64)
    live = request < bs
    committed = _committed(ncd_ptr, ncd_stride, request, live)
    seq = tl.load(seq_lens_ptr + request * seq_stride, mask=live, other=0)
    tl.store(seq_lens_ptr + request * seq_stride, (seq.to(tl.int64) + committed).to(seq.dtype), mask=live)
    tl.store(filter_ptr + request * filter_stride, tl.zeros([BLOCK], dtype=tl.int32), mask=live)


@kernel
@triton.jit
def _accept_filter_kernel(
    ncd_ptr,
    ncd_stride,
    unfinished_ptr,
    unfinished_stride,
    num_unfinished,
    seq_lens_ptr,
    seq_stride,
    filter_ptr,
    filter_stride,
    bs,
    BLOCK: tl.constexpr,
):
    """A7 create_num_accept_tokens_filter in one program (grid (1,)): zero the filter and advance
    seq_lens, then (after a barrier, so that no zero lands on a count) write ncd+1 at the unfinished
    rows. The first block of the list and its counts are loaded before the zeros are stored (two
    dependent levels when everything fits a block). A duplicated row writes the same value twice."""
    request, valid = _listed_requests(0, unfinished_ptr, unfinished_stride, num_unfinished, bs, BLOCK)
    committed = _committed(ncd_ptr, ncd_stride, request, valid)
    for first in range(0, bs, BLOCK):
        _advance_requests(
            first, ncd_ptr, ncd_stride, seq_lens_ptr, seq_stride, filter_ptr, filter_stride, bs, BLOCK
        )
    tl.debug_barrier()
    tl.store(filter_ptr + request * filter_stride, committed.to(tl.int32), mask=valid)
    for first in range(BLOCK, num_unfinished, BLOCK):
        request, valid = _listed_requests(first, unfinished_ptr, unfinished_stride, num_unfinished, bs, BLOCK)
        committed = _committed(ncd_ptr, ncd_stride, request, valid)
        tl.store(filter_ptr + request * filter_stride, committed.to(tl.int32), mask=valid)


@kernel
@triton.jit
def _filter_finished_kernel(
    out_ptr,
    out_stride,
    out_limit,
    tgt_ptr,
    tgt_stride,
    tgt_numel,
    ncd_ptr,
    ncd_stride,
    filter_ptr,
    filter_stride,
    bs,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    SCAN_BLOCK: tl.constexpr,
    SCAN_CHUNKS: tl.constexpr,
):
    """A7 filter_finished_cache_loc: the first filter[b] of request b's ncd+1 committed slots (run at
    the exclusive cumsum of ncd+1 in ``tgt``) go to ``out`` at the exclusive cumsum of the filter.
    Grid: (cdiv(bs, ROWS),)."""
    first = tl.program_id(0) * ROWS
    kept, out_start = exclusive_offsets(
        first,
        bs,
        filter_ptr,
        filter_stride,
        filter_ptr,
        filter_stride,
        0,
        VALUE,
        ROWS,
        SCAN_BLOCK,
        SCAN_CHUNKS,
    )
    committed, tgt_start = exclusive_offsets(
        first, bs, ncd_ptr, ncd_stride, ncd_ptr, ncd_stride, 0, PLUS_ONE, ROWS, SCAN_BLOCK, SCAN_CHUNKS
    )
    lo = tl.maximum(tl.maximum(-out_start, -tgt_start), 0)
    hi = tl.minimum(tl.minimum(kept, committed), tl.minimum(out_limit - out_start, tgt_numel - tgt_start))
    copy_runs(
        tgt_ptr, tgt_start * tgt_stride, tgt_stride, out_ptr, out_start * out_stride, out_stride, lo, hi, COLS
    )


def fill_accept_out_cache_loc(
    config: LaunchConfig, accept_index: Tensor, out_cache_loc: Tensor, accept_out_cache_loc: Tensor, size: int
) -> None:
    # Flat entry p of a [bs, W] tensor whose rows are evenly strided lies p * stride(1) from its
    # start: the kernel reads it in place. Other layouts are flattened (a copy).
    (bs, width), (row_stride, flat_stride) = accept_index.shape, accept_index.stride()
    if width == 1:
        flat_stride = row_stride
    elif bs > 1 and row_stride != width * flat_stride:
        accept_index, flat_stride = accept_index.reshape(-1), 1
    _compact_accepted_launch(config, size)(
        accept_index,
        flat_stride,
        out_cache_loc,
        out_cache_loc.stride()[0],
        out_cache_loc.shape[0],
        accept_out_cache_loc,
        accept_out_cache_loc.stride()[0],
        min(accept_out_cache_loc.shape[0], size),
        size,
    )


@functools.lru_cache(maxsize=1024)
def _compact_accepted_launch(config: LaunchConfig, size: int) -> Launch:
    block = rows_per_program(size, 1, config)
    num_warps = scanning_warps(config, block, size)
    return _compact_accepted_kernel.at(
        (cdiv(size, block),), BLOCK=block, **scan_args(size, config, num_warps), num_warps=num_warps
    )


def get_src_tgt_cache_loc(
    config: LaunchConfig,
    seq_lens: Tensor,
    out_cache_loc: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    draft_token_num: int,
    page_size: int,
    src_cache_loc: Tensor,
    tgt_cache_loc: Tensor,
    to_free_num_slots: Tensor,
) -> None:
    bs, accepted = seq_lens.shape[0], accept_index.shape[0]
    _src_tgt_launch(config, max(bs, accepted), page_size)(
        seq_lens,
        seq_lens.stride()[0],
        out_cache_loc,
        out_cache_loc.stride()[0],
        out_cache_loc.shape[0],
        accept_index,
        accept_index.stride()[0],
        accepted,
        num_correct_drafts,
        num_correct_drafts.stride()[0],
        src_cache_loc,
        src_cache_loc.stride()[0],
        tgt_cache_loc,
        tgt_cache_loc.stride()[0],
        to_free_num_slots,
        to_free_num_slots.stride()[0],
        bs,
        draft_token_num,
    )


@functools.lru_cache(maxsize=1024)
def _src_tgt_launch(config: LaunchConfig, lanes: int, page_size: int) -> Launch:
    block = rows_per_program(lanes, 1, config)
    return _src_tgt_kernel.at(
        (cdiv(lanes, block),), PAGE_SIZE=page_size, BLOCK=block, num_warps=latency_warps(config, block)
    )


def get_target_cache_loc(
    config: LaunchConfig,
    tgt_cache_loc: Tensor,
    to_free_slots: Tensor,
    num_correct_drafts: Tensor,
    to_free_num_slots: Tensor,
    out_cache_loc: Tensor,
    draft_token_num: int,
) -> None:
    bs = num_correct_drafts.shape[0]
    bound = bs * draft_token_num  # each run lies within the request's D verify slots
    _target_cache_loc_launch(config, bs, draft_token_num)(
        tgt_cache_loc,
        tgt_cache_loc.stride()[0],
        min(tgt_cache_loc.shape[0], bound),
        to_free_slots,
        to_free_slots.stride()[0],
        min(to_free_slots.shape[0], bound),
        num_correct_drafts,
        num_correct_drafts.stride()[0],
        to_free_num_slots,
        to_free_num_slots.stride()[0],
        out_cache_loc,
        out_cache_loc.stride()[0],
        bs,
        draft_token_num,
    )


@functools.lru_cache(maxsize=1024)
def _target_cache_loc_launch(config: LaunchConfig, bs: int, draft_token_num: int) -> Launch:
    columns = pow2(draft_token_num)
    rows = rows_per_program(bs, columns, config)
    num_warps = scanning_warps(config, rows * columns, bs)
    return _target_cache_loc_kernel.at(
        (cdiv(bs, rows),), ROWS=rows, COLS=columns, **scan_args(bs, config, num_warps), num_warps=num_warps
    )


def create_num_accept_tokens_filter(
    config: LaunchConfig,
    num_correct_drafts: Tensor,
    unfinished_index: Tensor,
    seq_lens: Tensor,
    num_accept_tokens_filter: Tensor,
) -> None:
    bs = num_correct_drafts.shape[0]
    _accept_filter_launch(config, max(bs, unfinished_index.shape[0]))(
        num_correct_drafts,
        num_correct_drafts.stride()[0],
        unfinished_index,
        unfinished_index.stride()[0],
        unfinished_index.shape[0],
        seq_lens,
        seq_lens.stride()[0],
        num_accept_tokens_filter,
        num_accept_tokens_filter.stride()[0],
        bs,
    )


@functools.lru_cache(maxsize=1024)
def _accept_filter_launch(config: LaunchConfig, entries: int) -> Launch:
    block = min(pow2(entries), config.block)
    return _accept_filter_kernel.at((1,), BLOCK=block, num_warps=latency_warps(config, block))


def filter_finished_cache_loc(
    config: LaunchConfig,
    out_cache_loc: Tensor,
    tgt_cache_loc: Tensor,
    num_correct_drafts: Tensor,
    num_accept_tokens_filter: Tensor,
) -> None:
    bs = num_correct_drafts.shape[0]
    _filter_finished_launch(config, bs)(
        out_cache_loc,
        out_cache_loc.stride()[0],
        min(out_cache_loc.shape[0], tgt_cache_loc.shape[0]),
        tgt_cache_loc,
        tgt_cache_loc.stride()[0],
        tgt_cache_loc.shape[0],
        num_correct_drafts,
        num_correct_drafts.stride()[0],
        num_accept_tokens_filter,
        num_accept_tokens_filter.stride()[0],
        bs,
    )


@functools.lru_cache(maxsize=1024)
def _filter_finished_launch(config: LaunchConfig, bs: int) -> Launch:
    columns = config.warp_size  # runs are data-dependent: a warp-wide chunk per iteration
    rows = rows_per_program(bs, columns, config)
    num_warps = scanning_warps(config, rows * columns, bs)
    return _filter_finished_kernel.at(
        (cdiv(bs, rows),), ROWS=rows, COLS=columns, **scan_args(bs, config, num_warps), num_warps=num_warps
    )
