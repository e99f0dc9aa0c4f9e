"""Triton providers of family A, index plumbing (spec ops.md §A; references in ``spec_hal/ops/index.py``).

Every provider takes the op's provider signature (outputs allocated by the contract), launches one
kernel and returns None. Conventions shared by every kernel here:

* Index tensors are read through their own pointer type (int32 or int64, specialised by Triton, never
  copied) and every tensor through its strides; loaded ids and all address arithmetic are int64.
* Every loaded id is bound-masked the way the portable reference masks it: a lane whose row, column
  or flat id is out of range (or -1) is neither read nor written, and output entries past the
  reference's total stay untouched.
* Ragged outputs (request b's run at the exclusive prefix sum of the run lengths) use one shared scan,
  :func:`_exclusive_offsets`: a program owns a block of consecutive requests (or entries), sums the
  lengths of all earlier ones in ``SCAN_BLOCK``-wide chunks (one vector load per chunk: a single one
  while the batch fits the block) and ``tl.cumsum``-s its own block. No program reduces per request.
* Ragged copies go through :func:`_copy_runs`: a ``[requests, columns]`` tile looping over columns,
  each run bounded by an interval ``[lo, hi)`` of run positions in which both its source and its
  destination are in range.
* Grids depend on shapes only; nothing reads device data on the host (graph-capturable).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import triton
import triton.language as tl
from torch import Tensor

from ...registry import TRITON, register_impl
from .config import LaunchConfig

# --------------------------------------------------------------------------------------------------
# Shared device helpers

#: How :func:`_load_lengths` reads the length of entry j (a constexpr selector, so one scan serves all).
_VALUE = tl.constexpr(0)  # values[j]
_PLUS_ONE = tl.constexpr(1)  # values[j] + 1 (committed tokens: num_correct_drafts + 1)
_DIFFERENCE = tl.constexpr(2)  # values[j] - other[j] (window length: end - start)
_IN_RANGE = tl.constexpr(3)  # 1 if 0 <= values[j] < bound else 0 (accepted entries of accept_index)


@triton.jit
def _load_lengths(values_ptr, values_stride, other_ptr, other_stride, bound, entry, mask, KIND: tl.constexpr):
    """Length of each ``entry`` (int64; 0 on masked lanes), read as ``KIND`` says."""
    entry = entry.to(tl.int64)
    length = tl.load(values_ptr + entry * values_stride, mask=mask, other=0).to(tl.int64)
    if KIND == _PLUS_ONE:
        length += 1
    if KIND == _DIFFERENCE:
        length -= tl.load(other_ptr + entry * other_stride, mask=mask, other=0).to(tl.int64)
    if KIND == _IN_RANGE:
        length = ((length >= 0) & (length < bound)).to(tl.int64)
    return tl.where(mask, length, 0)


@triton.jit
def _exclusive_offsets(
    first,
    count,
    values_ptr,
    values_stride,
    other_ptr,
    other_stride,
    bound,
    KIND: tl.constexpr,
    BLOCK: tl.constexpr,
    SCAN_BLOCK: tl.constexpr,
):
    """Lengths of entries ``first .. first+BLOCK-1`` (0 past ``count``) and their exclusive prefix sums
    over all entries from 0: the start of each entry's run in a ragged output (both int64 [BLOCK]).

    The lengths before ``first`` are summed chunk by chunk into a running vector (one load per
    ``SCAN_BLOCK`` entries), then the program's own block is scanned with ``tl.cumsum``.
    """
    running = tl.zeros([SCAN_BLOCK], dtype=tl.int64)
    for chunk in range(0, first, SCAN_BLOCK):
        entry = chunk + tl.arange(0, SCAN_BLOCK)
        running += _load_lengths(
            values_ptr, values_stride, other_ptr, other_stride, bound, entry, entry < first, KIND
        )
    entry = first + tl.arange(0, BLOCK)
    lengths = _load_lengths(
        values_ptr, values_stride, other_ptr, other_stride, bound, entry, entry < count, KIND
    )
    return lengths, tl.sum(running, axis=0) + tl.cumsum(lengths, axis=0) - lengths


@triton.jit
def _copy_runs(
    src_ptr,
    src_base,
    src_step,
    dst_ptr,
    dst_base,
    dst_step,
    lo,
    hi,
    first_column,
    column_step,
    COLS: tl.constexpr,
):
    """``dst[dst_base[r] + i*dst_step] = src[src_base[r] + i*src_step]`` for every run r of the tile and
    every ``lo[r] <= i < hi[r]`` (``lo >= 0``), converted to dst's dtype; columns are visited from
    ``first_column`` by ``column_step`` (grid-strided when several programs share the runs)."""
    end = tl.max(hi, axis=0).to(tl.int32)
    for column in range(first_column, end, column_step):
        i = column + tl.arange(0, COLS)
        mask = (i[None, :] >= lo[:, None]) & (i[None, :] < hi[:, None])
        i = i.to(tl.int64)[None, :]
        value = tl.load(src_ptr + src_base[:, None] + i * src_step, mask=mask)
        tl.store(dst_ptr + dst_base[:, None] + i * dst_step, value.to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _floor_div(numerator, divisor):
    """Floor division by a positive ``divisor`` for any sign of ``numerator`` (torch's rounding): the
    quotient each lane keeps divides non-negative operands, where Triton's ``//`` (truncating toward
    zero, like C) agrees with floor."""
    return tl.where(numerator >= 0, numerator // divisor, -((divisor - 1 - numerator) // divisor))


@triton.jit
def _draft_column(seq_len, branch, step, page_size, num_steps):
    """``req_to_token`` column of draft ``step`` of ``branch`` (paged tree layout of §A3; contiguous
    ``seq_len + branch*num_steps + step`` when ``page_size == 1`` or there is one branch)."""
    partial_page = seq_len - _floor_div(seq_len, page_size) * page_size
    pages_per_branch = (partial_page + num_steps + page_size - 1) // page_size
    return seq_len + branch * pages_per_branch * page_size + step


@triton.jit
def _load_rows(req_pool_indices_ptr, rpi_stride, request, live, num_rows):
    """The ``req_to_token`` row of each request (int64) and whether it lies inside the table."""
    row = tl.load(req_pool_indices_ptr + request.to(tl.int64) * rpi_stride, mask=live, other=0).to(tl.int64)
    return row, live & (row >= 0) & (row < num_rows)


# --------------------------------------------------------------------------------------------------
# Kernels


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
):
    """A1 (table -> flat) and A2 (flat -> table): window ``[start[b], end[b])`` of row ``rpi[b]`` <->
    the flat run at the exclusive cumsum of the window lengths. Grid: (cdiv(bs, ROWS),)."""
    first = tl.program_id(0) * ROWS
    lengths, offsets = _exclusive_offsets(
        first, bs, end_ptr, end_stride, start_ptr, start_stride, 0, _DIFFERENCE, ROWS, SCAN_BLOCK
    )
    request = first + tl.arange(0, ROWS)
    row, row_ok = _load_rows(rpi_ptr, rpi_stride, request, request < bs, num_rows)
    begin = tl.load(start_ptr + request.to(tl.int64) * start_stride, mask=request < bs, other=0).to(tl.int64)
    # Position i of a run: column begin + i of the table, flat position offsets + i; both in range.
    lo = tl.maximum(tl.maximum(-begin, -offsets), 0)
    hi = tl.minimum(tl.minimum(lengths, pool_len - begin), flat_limit - offsets)
    hi = tl.where(row_ok, hi, 0)
    table_base = row * table_row_stride + begin * table_col_stride
    flat_base = offsets * flat_stride
    if TO_TABLE:
        _copy_runs(
            flat_ptr, flat_base, flat_stride, table_ptr, table_base, table_col_stride, lo, hi, 0, COLS, COLS
        )
    else:
        _copy_runs(
            table_ptr, table_base, table_col_stride, flat_ptr, flat_base, flat_stride, lo, hi, 0, COLS, COLS
        )


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
    total,
    topk,
    num_steps,
    page_size,
    BLOCK: tl.constexpr,
):
    """A3 and A1-uniform: ``out[b*K*S + t*S + s] = req_to_token[rpi[b], draft column (t, s)]``, one
    lane per output entry. Grid: (cdiv(bs*K*S, BLOCK),)."""
    entry = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = entry < total
    request = entry // (topk * num_steps)
    branch = (entry // num_steps) % topk
    step = entry % num_steps
    row, row_ok = _load_rows(rpi_ptr, rpi_stride, request, live, num_rows)
    seq = tl.load(seq_lens_ptr + request * seq_stride, mask=live, other=0).to(tl.int64)
    column = _draft_column(seq, branch, step, page_size, num_steps)
    readable = row_ok & (column >= 0) & (column < pool_len)
    slot = tl.load(table_ptr + row * table_row_stride + column * table_col_stride, mask=readable)
    tl.store(out_ptr + entry * out_stride, slot.to(tl.int64), mask=readable)


@triton.jit
def _branch_list_start(before, seq, request, branch, step, topk):
    """Start, in ``kv_indices`` row ``step``, of the list of ``branch`` of ``request``: the lists of the
    earlier branches hold their prefix (``seq`` each) plus ``step + 1`` draft slots."""
    return topk * before + branch * seq + (request * topk + branch) * (step + 1)


@triton.jit
def _draft_kv_indices_kernel(
    rpi_ptr,
    rpi_stride,
    table_ptr,
    table_row_stride,
    table_col_stride,
    num_rows,
    pool_len,
    seq_lens_ptr,
    seq_stride,
    positions_ptr,
    positions_stride,
    indices_ptr,
    indices_row_stride,
    indices_col_stride,
    indices_limit,
    indptr_ptr,
    indptr_row_stride,
    indptr_col_stride,
    bs,
    page_size,
    topk,
    num_steps,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    BRANCHES: tl.constexpr,
    STEPS: tl.constexpr,
    SCAN_BLOCK: tl.constexpr,
):
    """A4. Grid: (cdiv(bs, ROWS), prefix column chunks). Program (g, c) copies prefix columns
    ``c*COLS + k*grid1*COLS ..`` of its ROWS requests: each tile is read once from ``req_to_token`` and
    written to the K*S branch lists holding it. Programs (g, 0) also write the draft slots and the
    ``kv_indptr`` entries of their requests. Programs past the group's longest prefix do nothing."""
    group_first = tl.program_id(0) * ROWS
    chunk = tl.program_id(1)
    request = (group_first + tl.arange(0, ROWS)).to(tl.int64)
    live = request < bs
    seq = tl.load(seq_lens_ptr + request * seq_stride, mask=live, other=0).to(tl.int64)
    copy_end = tl.minimum(tl.max(seq, axis=0), pool_len).to(tl.int32)  # prefix columns of the group
    if (chunk == 0) | (chunk * COLS < copy_end):
        _, before = _exclusive_offsets(
            group_first, bs, seq_lens_ptr, seq_stride, seq_lens_ptr, seq_stride, 0, _VALUE, ROWS, SCAN_BLOCK
        )
        row, row_ok = _load_rows(rpi_ptr, rpi_stride, request, live, num_rows)
        row_base = row * table_row_stride
        if chunk == 0:
            # Draft slots: row s lists steps 0..s of each branch right after the branch's prefix.
            step = tl.arange(0, STEPS)
            for branch in range(topk):
                column = _draft_column(seq[:, None], branch, step[None, :], page_size, num_steps)
                readable = row_ok[:, None] & (step[None, :] < num_steps) & (column >= 0) & (column < pool_len)
                slot = tl.load(table_ptr + row_base[:, None] + column * table_col_stride, mask=readable)
                for s in range(num_steps):
                    start = _branch_list_start(before, seq, request, branch, s, topk) + seq
                    position = start[:, None] + step[None, :]
                    keep = readable & (step[None, :] <= s) & (position >= 0) & (position < indices_limit)
                    row_of_step = indices_ptr + tl.cast(s, tl.int64) * indices_row_stride
                    tl.store(row_of_step + position * indices_col_stride, slot, mask=keep)
            # kv_indptr[s][z + 1] = sum(positions[:z + 1]) + (z + 1)*(s + 1) for the group's branches z.
            branch_first = group_first * topk
            lengths, prefix = _exclusive_offsets(
                branch_first,
                bs * topk,
                positions_ptr,
                positions_stride,
                positions_ptr,
                positions_stride,
                0,
                _VALUE,
                BRANCHES,
                SCAN_BLOCK,
            )
            z = branch_first + tl.arange(0, BRANCHES)
            own = (z < branch_first + ROWS * topk) & (z < bs * topk)
            column = z.to(tl.int64) + 1
            for s in range(num_steps):
                row_of_step = indptr_ptr + tl.cast(s, tl.int64) * indptr_row_stride
                value = prefix + lengths + column * (s + 1)
                tl.store(row_of_step + column * indptr_col_stride, value.to(tl.int32), mask=own)
        # Prefix slots: each tile is read once and written to the K*S lists holding it.
        for column0 in range(chunk * COLS, copy_end, tl.num_programs(1) * COLS):
            column = (column0 + tl.arange(0, COLS)).to(tl.int64)[None, :]
            readable = row_ok[:, None] & (column < seq[:, None]) & (column < pool_len)
            slot = tl.load(table_ptr + row_base[:, None] + column * table_col_stride, mask=readable)
            for s in range(num_steps):
                row_of_step = indices_ptr + tl.cast(s, tl.int64) * indices_row_stride
                for branch in range(topk):
                    position = _branch_list_start(before, seq, request, branch, s, topk)[:, None] + column
                    keep = readable & (position >= 0) & (position < indices_limit)
                    tl.store(row_of_step + position * indices_col_stride, slot, mask=keep)


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
):
    """A5 stream compaction: accepted entry p (0 <= accept[p] < num_slots) writes its slot at its rank
    among accepted entries (the exclusive scan of the accepted flags). Grid: (cdiv(size, BLOCK),)."""
    first = tl.program_id(0) * BLOCK
    accepted, rank = _exclusive_offsets(
        first,
        size,
        accept_ptr,
        accept_stride,
        accept_ptr,
        accept_stride,
        num_slots,
        _IN_RANGE,
        BLOCK,
        SCAN_BLOCK,
    )
    entry = (first + tl.arange(0, BLOCK)).to(tl.int64)
    keep = (accepted > 0) & (rank < out_limit)
    index = tl.load(accept_ptr + entry * accept_stride, mask=keep, other=0).to(tl.int64)
    slot = tl.load(slots_ptr + index * slots_stride, mask=keep)
    tl.store(out_ptr + rank * out_stride, slot.to(tl.int64), mask=keep)


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
    page_size,
    BLOCK: tl.constexpr,
):
    """A6 get_src_tgt_cache_loc: lane p handles accepted entry p (gather + zero) and request p (slots to
    free). Grid: (cdiv(max(A, bs), BLOCK),)."""
    lane = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_accept = lane < num_accepted
    index = tl.load(accept_ptr + lane * accept_stride, mask=in_accept, other=-1).to(tl.int64)
    readable = in_accept & (index >= 0) & (index < num_slots)
    slot = tl.load(slots_ptr + index * slots_stride, mask=readable)
    tl.store(src_ptr + lane * src_stride, slot.to(tl.int64), mask=readable)
    tl.store(tgt_ptr + lane * tgt_stride, tl.zeros([BLOCK], dtype=tl.int64), mask=in_accept)

    in_batch = lane < bs
    seq = tl.load(seq_lens_ptr + lane * seq_stride, mask=in_batch, other=0).to(tl.int64)
    ncd = tl.load(ncd_ptr + lane * ncd_stride, mask=in_batch, other=0).to(tl.int64)
    extended = seq + draft_token_num
    page_end = _floor_div(seq + ncd + page_size, page_size) * page_size  # roundup(seq + ncd + 1, ps)
    tl.store(to_free_ptr + lane * to_free_stride, extended - tl.minimum(page_end, extended), mask=in_batch)


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
):
    """A6 get_target_cache_loc: request b's first ncd+1 verify slots to ``tgt`` and its last
    ``to_free_num_slots`` to ``to_free_slots``, each at the exclusive cumsum of its run lengths.
    Grid: (cdiv(bs, ROWS),)."""
    first = tl.program_id(0) * ROWS
    committed, tgt_start = _exclusive_offsets(
        first, bs, ncd_ptr, ncd_stride, ncd_ptr, ncd_stride, 0, _PLUS_ONE, ROWS, SCAN_BLOCK
    )
    freed, free_start = _exclusive_offsets(
        first, bs, to_free_ptr, to_free_stride, to_free_ptr, to_free_stride, 0, _VALUE, ROWS, SCAN_BLOCK
    )
    live = first + tl.arange(0, ROWS) < bs
    request_slots = (first + tl.arange(0, ROWS)).to(tl.int64) * draft_token_num  # its first verify slot
    # Accepted: verify column i < D.
    lo = tl.maximum(-tgt_start, 0)
    hi = tl.minimum(tl.minimum(committed, draft_token_num), tgt_limit - tgt_start)
    hi = tl.where(live, hi, 0)
    _copy_runs(
        slots_ptr,
        request_slots * slots_stride,
        slots_stride,
        tgt_ptr,
        tgt_start * tgt_stride,
        tgt_stride,
        lo,
        hi,
        0,
        COLS,
        COLS,
    )
    # Freed: verify column D - freed + i, inside [0, D).
    lo = tl.maximum(tl.maximum(-free_start, freed - draft_token_num), 0)
    hi = tl.where(live, tl.minimum(freed, free_limit - free_start), 0)
    _copy_runs(
        slots_ptr,
        (request_slots + draft_token_num - freed) * slots_stride,
        slots_stride,
        free_ptr,
        free_start * free_stride,
        free_stride,
        lo,
        hi,
        0,
        COLS,
        COLS,
    )


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
    rows. A duplicated unfinished row writes the same value twice."""
    for first in range(0, bs, BLOCK):
        request = (first + tl.arange(0, BLOCK)).to(tl.int64)
        live = request < bs
        committed = tl.load(ncd_ptr + request * ncd_stride, mask=live, other=0).to(tl.int64) + 1
        seq = tl.load(seq_lens_ptr + request * seq_stride, mask=live, other=0)
        tl.store(seq_lens_ptr + request * seq_stride, (seq.to(tl.int64) + committed).to(seq.dtype), mask=live)
        tl.store(filter_ptr + request * filter_stride, tl.zeros([BLOCK], dtype=tl.int32), mask=live)
    tl.debug_barrier()
    for first in range(0, num_unfinished, BLOCK):
        entry = (first + tl.arange(0, BLOCK)).to(tl.int64)
        in_list = entry < num_unfinished
        request = tl.load(unfinished_ptr + entry * unfinished_stride, mask=in_list, other=-1).to(tl.int64)
        valid = in_list & (request >= 0) & (request < bs)
        committed = tl.load(ncd_ptr + request * ncd_stride, mask=valid, other=0).to(tl.int64) + 1
        tl.store(filter_ptr + request * filter_stride, committed.to(tl.int32), mask=valid)


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
):
    """A7 filter_finished_cache_loc: the first filter[b] of request b's ncd+1 committed slots (run at
    the exclusive cumsum of ncd+1 in ``tgt``) go to ``out`` at the exclusive cumsum of the filter.
    Grid: (cdiv(bs, ROWS),)."""
    first = tl.program_id(0) * ROWS
    kept, out_start = _exclusive_offsets(
        first, bs, filter_ptr, filter_stride, filter_ptr, filter_stride, 0, _VALUE, ROWS, SCAN_BLOCK
    )
    committed, tgt_start = _exclusive_offsets(
        first, bs, ncd_ptr, ncd_stride, ncd_ptr, ncd_stride, 0, _PLUS_ONE, ROWS, SCAN_BLOCK
    )
    lo = tl.maximum(tl.maximum(-out_start, -tgt_start), 0)
    hi = tl.minimum(tl.minimum(kept, committed), tl.minimum(out_limit - out_start, tgt_numel - tgt_start))
    _copy_runs(
        tgt_ptr,
        tgt_start * tgt_stride,
        tgt_stride,
        out_ptr,
        out_start * out_stride,
        out_stride,
        lo,
        hi,
        0,
        COLS,
        COLS,
    )


@triton.jit
def _align_evict_mask_kernel(
    seq_lens_ptr,
    seq_stride,
    mask_ptr,
    mask_stride,
    bs,
    page_size,
    draft_token_num,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """A8: per request row of D flags, clear the flags of the page holding the last kept token. A row
    belongs to one program, which reads it whole before clearing. Grid: (cdiv(bs, ROWS),)."""
    request = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    live = request < bs
    freed = tl.zeros([ROWS], dtype=tl.int64)
    for column0 in range(0, draft_token_num, COLS):
        column = column0 + tl.arange(0, COLS)
        inside = live[:, None] & (column[None, :] < draft_token_num)
        entry = request[:, None] * draft_token_num + column[None, :]
        flags = tl.load(mask_ptr + entry * mask_stride, mask=inside, other=0)
        freed += tl.sum(flags.to(tl.int64), axis=1)
    seq = tl.load(seq_lens_ptr + request * seq_stride, mask=live, other=0).to(tl.int64)
    kept = draft_token_num - freed
    # Offset, from the request's first verify slot, of the page holding its last kept token.
    page_start = (_floor_div(seq + kept - 1, page_size) * page_size - seq)[:, None]
    for column0 in range(0, draft_token_num, COLS):
        column = column0 + tl.arange(0, COLS)
        in_page = (column[None, :] >= page_start) & (column[None, :] < page_start + page_size)
        clear = live[:, None] & (column[None, :] < draft_token_num) & in_page
        entry = request[:, None] * draft_token_num + column[None, :]
        tl.store(mask_ptr + entry * mask_stride, tl.zeros([ROWS, COLS], dtype=tl.int1), mask=clear)


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
    verify slots. Grid: (bs, column chunks), chunks grid-strided over the row."""
    request = tl.program_id(0) + tl.arange(0, 1)
    row, row_ok = _load_rows(rpi_ptr, rpi_stride, request, request >= 0, num_rows)
    suffix = tl.load(suffix_ptr + request.to(tl.int64) * suffix_stride).to(tl.int64)
    prefix_len = tl.load(prefix_ptr + request.to(tl.int64) * prefix_stride).to(tl.int64)
    first_column = tl.program_id(1) * COLS
    column_step = tl.num_programs(1) * COLS
    draft_base = row * draft_row_stride
    # Prefix: draft column i < pl from target column suffix + i (both inside their rows).
    lo = tl.maximum(-suffix, 0)
    hi = tl.where(row_ok, tl.minimum(tl.minimum(prefix_len, draft_len), target_len - suffix), 0)
    target_base = row * target_row_stride + suffix * target_col_stride
    _copy_runs(
        target_ptr,
        target_base,
        target_col_stride,
        draft_ptr,
        draft_base,
        draft_col_stride,
        lo,
        hi,
        first_column,
        column_step,
        COLS,
    )
    # Verify block: draft column pl + j from verify column j < block.
    lo = tl.maximum(-prefix_len, 0)
    hi = tl.where(row_ok, tl.minimum(block, draft_len - prefix_len), 0)
    verify_base = request.to(tl.int64) * verify_row_stride
    _copy_runs(
        verify_ptr,
        verify_base,
        verify_col_stride,
        draft_ptr,
        draft_base + prefix_len * draft_col_stride,
        draft_col_stride,
        lo,
        hi,
        first_column,
        column_step,
        COLS,
    )


# --------------------------------------------------------------------------------------------------
# Providers (the op's provider signature; outputs allocated by the contract)

#: Target number of request groups of the bandwidth-bound A4 kernel (about one per SM): groups grow
#: with bs so that the prefix scans of all groups stay O(bs) work in total.
_REQUEST_GROUPS = 128


def _tile(config: LaunchConfig) -> tuple[int, int]:
    """(requests, columns) of a ragged-copy tile of ``config.block`` elements, columns the wider."""
    columns = 1 << (config.block.bit_length() // 2)
    return max(config.block // columns, 1), columns


def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(n, 1))


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
    rows, columns = _tile(config)
    _window_kernel[(triton.cdiv(bs, rows),)](
        req_pool_indices,
        req_pool_indices.stride(0),
        req_to_token,
        *req_to_token.stride(),
        *req_to_token.shape,
        start,
        start.stride(0),
        end,
        end.stride(0),
        flat,
        flat.stride(0),
        flat_limit,
        bs,
        TO_TABLE=to_table,
        ROWS=rows,
        COLS=columns,
        SCAN_BLOCK=config.block,
        num_warps=config.num_warps,
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
    total = req_pool_indices.shape[0] * topk * num_steps
    _draft_slots_kernel[(triton.cdiv(total, config.block),)](
        req_pool_indices,
        req_pool_indices.stride(0),
        req_to_token,
        *req_to_token.stride(),
        *req_to_token.shape,
        seq_lens,
        seq_lens.stride(0),
        out,
        out.stride(0),
        total,
        topk,
        num_steps,
        page_size,
        BLOCK=config.block,
        num_warps=config.num_warps,
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


def generate_draft_decode_kv_indices(
    config: LaunchConfig,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    positions: Tensor,
    page_size: int,
    topk: int,
    num_steps: int,
    kv_indices: Tensor,
    kv_indptr: Tensor,
) -> None:
    bs = req_pool_indices.shape[0]
    pool_len = req_to_token.shape[1]
    copy_elements = max(config.copy_block_bytes // kv_indices.element_size(), 1)
    rows = min(_pow2(triton.cdiv(bs, _REQUEST_GROUPS)), copy_elements)
    columns = max(copy_elements // rows, 1)
    # The reference writes no position past its bound (each prefix lies within a row).
    limit = min(kv_indices.shape[1], topk * bs * pool_len + bs * topk * num_steps)
    grid = (triton.cdiv(bs, rows), max(min(triton.cdiv(pool_len, columns), config.max_grid), 1))
    _draft_kv_indices_kernel[grid](
        req_pool_indices,
        req_pool_indices.stride(0),
        req_to_token,
        *req_to_token.stride(),
        *req_to_token.shape,
        seq_lens,
        seq_lens.stride(0),
        positions,
        positions.stride(0),
        kv_indices,
        *kv_indices.stride(),
        limit,
        kv_indptr,
        *kv_indptr.stride(),
        bs,
        page_size,
        topk,
        num_steps,
        ROWS=rows,
        COLS=columns,
        BRANCHES=_pow2(rows * topk),
        STEPS=_pow2(num_steps),
        SCAN_BLOCK=config.block,
        num_warps=config.copy_num_warps,
    )


def fill_accept_out_cache_loc(
    config: LaunchConfig, accept_index: Tensor, out_cache_loc: Tensor, accept_out_cache_loc: Tensor, size: int
) -> None:
    # A [bs, W] view flattens without a copy unless its rows are not evenly strided (then reshape copies).
    flat_accept = accept_index.reshape(-1)
    _compact_accepted_kernel[(triton.cdiv(size, config.block),)](
        flat_accept,
        flat_accept.stride(0),
        out_cache_loc,
        out_cache_loc.stride(0),
        out_cache_loc.shape[0],
        accept_out_cache_loc,
        accept_out_cache_loc.stride(0),
        min(accept_out_cache_loc.shape[0], size),
        size,
        BLOCK=config.block,
        SCAN_BLOCK=config.block,
        num_warps=config.num_warps,
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
    _src_tgt_kernel[(triton.cdiv(max(bs, accepted), config.block),)](
        seq_lens,
        seq_lens.stride(0),
        out_cache_loc,
        out_cache_loc.stride(0),
        out_cache_loc.shape[0],
        accept_index,
        accept_index.stride(0),
        accepted,
        num_correct_drafts,
        num_correct_drafts.stride(0),
        src_cache_loc,
        src_cache_loc.stride(0),
        tgt_cache_loc,
        tgt_cache_loc.stride(0),
        to_free_num_slots,
        to_free_num_slots.stride(0),
        bs,
        draft_token_num,
        page_size,
        BLOCK=config.block,
        num_warps=config.num_warps,
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
    rows, columns = _tile(config)
    _target_cache_loc_kernel[(triton.cdiv(bs, rows),)](
        tgt_cache_loc,
        tgt_cache_loc.stride(0),
        min(tgt_cache_loc.shape[0], bound),
        to_free_slots,
        to_free_slots.stride(0),
        min(to_free_slots.shape[0], bound),
        num_correct_drafts,
        num_correct_drafts.stride(0),
        to_free_num_slots,
        to_free_num_slots.stride(0),
        out_cache_loc,
        out_cache_loc.stride(0),
        bs,
        draft_token_num,
        ROWS=rows,
        COLS=columns,
        SCAN_BLOCK=config.block,
        num_warps=config.num_warps,
    )


def create_num_accept_tokens_filter(
    config: LaunchConfig,
    num_correct_drafts: Tensor,
    unfinished_index: Tensor,
    seq_lens: Tensor,
    num_accept_tokens_filter: Tensor,
) -> None:
    _accept_filter_kernel[(1,)](
        num_correct_drafts,
        num_correct_drafts.stride(0),
        unfinished_index,
        unfinished_index.stride(0),
        unfinished_index.shape[0],
        seq_lens,
        seq_lens.stride(0),
        num_accept_tokens_filter,
        num_accept_tokens_filter.stride(0),
        num_correct_drafts.shape[0],
        BLOCK=config.block,
        num_warps=config.num_warps,
    )


def filter_finished_cache_loc(
    config: LaunchConfig,
    out_cache_loc: Tensor,
    tgt_cache_loc: Tensor,
    num_correct_drafts: Tensor,
    num_accept_tokens_filter: Tensor,
) -> None:
    bs = num_correct_drafts.shape[0]
    rows, columns = _tile(config)
    _filter_finished_kernel[(triton.cdiv(bs, rows),)](
        out_cache_loc,
        out_cache_loc.stride(0),
        min(out_cache_loc.shape[0], tgt_cache_loc.shape[0]),
        tgt_cache_loc,
        tgt_cache_loc.stride(0),
        tgt_cache_loc.shape[0],
        num_correct_drafts,
        num_correct_drafts.stride(0),
        num_accept_tokens_filter,
        num_accept_tokens_filter.stride(0),
        bs,
        ROWS=rows,
        COLS=columns,
        SCAN_BLOCK=config.block,
        num_warps=config.num_warps,
    )


def align_evict_mask_to_page_size(
    config: LaunchConfig, seq_lens: Tensor, evict_mask: Tensor, page_size: int, draft_token_num: int
) -> None:
    bs = seq_lens.shape[0]
    rows, columns = _tile(config)
    _align_evict_mask_kernel[(triton.cdiv(bs, rows),)](
        seq_lens,
        seq_lens.stride(0),
        evict_mask,
        evict_mask.stride(0),
        bs,
        page_size,
        draft_token_num,
        ROWS=rows,
        COLS=columns,
        num_warps=config.num_warps,
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
    bs = req_pool_indices.shape[0]
    draft_len = draft_req_to_token.shape[1]
    columns = max(config.copy_block_bytes // draft_req_to_token.element_size(), 1)
    grid = (bs, max(min(triton.cdiv(draft_len, columns), config.max_grid), 1))
    _rebuild_compact_draft_kernel[grid](
        draft_req_to_token,
        *draft_req_to_token.stride(),
        draft_len,
        target_req_to_token,
        *target_req_to_token.stride(),
        target_req_to_token.shape[1],
        draft_req_to_token.shape[0],
        req_pool_indices,
        req_pool_indices.stride(0),
        suffix_start,
        suffix_start.stride(0),
        draft_prefix_lens,
        draft_prefix_lens.stride(0),
        verify_out_cache_loc,
        *verify_out_cache_loc.stride(),
        verify_out_cache_loc.shape[1],
        COLS=columns,
        num_warps=config.copy_num_warps,
    )


_PROVIDERS: dict[str, Callable[..., None]] = {
    "assign_extend_cache_locs": assign_extend_cache_locs,
    "assign_extend_cache_locs_uniform": assign_extend_cache_locs_uniform,
    "assign_req_to_token_pool": assign_req_to_token_pool,
    "assign_draft_cache_locs_contiguous": assign_draft_cache_locs_contiguous,
    "generate_draft_decode_kv_indices": generate_draft_decode_kv_indices,
    "fill_accept_out_cache_loc": fill_accept_out_cache_loc,
    "get_src_tgt_cache_loc": get_src_tgt_cache_loc,
    "get_target_cache_loc": get_target_cache_loc,
    "create_num_accept_tokens_filter": create_num_accept_tokens_filter,
    "filter_finished_cache_loc": filter_finished_cache_loc,
    "align_evict_mask_to_page_size": align_evict_mask_to_page_size,
    "rebuild_compact_draft_req_to_token": rebuild_compact_draft_req_to_token,
}


def register(vendor: str, config: LaunchConfig) -> list[str]:
    """Register the Triton provider of every family-A device op for ``vendor``; returns the ops.

    No op of the family has a variant a kernel declines (index dtypes are specialised, any strides
    are read through), so no ``supports`` check is registered.
    """
    for op, provider in _PROVIDERS.items():
        register_impl(op, vendor, TRITON, partial(provider, config))
    return list(_PROVIDERS)


__all__ = ["register"]
