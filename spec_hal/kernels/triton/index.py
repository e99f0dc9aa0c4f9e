"""Triton providers of family A, index plumbing (references in ``spec_hal/ops/index.py``).

Every provider takes the op's provider signature (outputs allocated by the contract), launches one
kernel and returns None. Conventions shared by every kernel here:

* Index tensors are read through their own pointer type (int32 or int64, specialised by Triton, never
  copied) and every tensor through its strides; loaded ids and all address arithmetic are int64.
* Every loaded id is bound-masked the way the portable reference masks it: a lane whose row, column
  or flat id is out of range (or -1) is neither read nor written, and output entries past the
  reference's total stay untouched.
* Latency: the ops are chains of dependent loads (request -> ``req_to_token`` row -> slot), so each
  kernel issues every load of a level before it uses any of them, and has no loop whose iterations
  wait on each other's loads. Widths known on the host (D, K*S, the page size) are constexpr: tiles
  cover them without a runtime column loop and divisions are by constants. A launch spreads the batch
  over up to ``LATENCY_PROGRAMS`` small programs.
* Ragged outputs (request b's run at the exclusive prefix sum of the run lengths) use one shared scan,
  :func:`_exclusive_offsets`: a program owns a block of consecutive requests (or entries), loads their
  lengths and, in the same level, those of all earlier entries (``SCAN_CHUNKS`` loads of
  ``SCAN_BLOCK`` entries, unrolled while few) and ``tl.cumsum``-s its own block.
* Ragged copies whose length only the device knows go through :func:`_copy_runs` (warp-wide column
  chunks: one iteration for the usual short runs); runs bounded on the host (at most D) are loaded
  whole with :func:`_load_run` before any is stored.
* Grids depend on shapes only; nothing reads device data on the host (graph-capturable).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import triton
import triton.language as tl
from torch import Tensor

from .config import LaunchConfig
from .device_math import floor_div
from .launch import Launch, cdiv, kernel
from .sizing import copy_warps, latency_warps, pow2, rows_per_program, scan_args, scan_shape, scanning_warps

# --------------------------------------------------------------------------------------------------
# Shared device helpers

#: How :func:`_load_lengths` reads the length of entry j (a constexpr selector, so one scan serves all).
_VALUE = tl.constexpr(0)  # values[j]
_PLUS_ONE = tl.constexpr(1)  # values[j] + 1 (committed tokens: num_correct_drafts + 1)
_DIFFERENCE = tl.constexpr(2)  # values[j] - other[j] (window length: end - start)
_IN_RANGE = tl.constexpr(3)  # 1 if 0 <= values[j] < bound else 0 (accepted entries of accept_index)

#: Most scan chunks issued as one unrolled level; longer scans loop (one level per chunk).
_UNROLLED_CHUNKS = tl.constexpr(8)


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
def _sum_before(
    first,
    values_ptr,
    values_stride,
    other_ptr,
    other_stride,
    bound,
    KIND: tl.constexpr,
    SCAN_BLOCK: tl.constexpr,
    SCAN_CHUNKS: tl.constexpr,
):
    """Total length of entries ``0 .. first-1`` (int64 scalar), read in ``SCAN_CHUNKS`` chunks of
    ``SCAN_BLOCK`` entries (enough for the whole batch). Up to ``_UNROLLED_CHUNKS`` chunks are
    unrolled, so that their loads are all in flight at once (chunks past ``first`` read nothing)."""
    running = tl.zeros([SCAN_BLOCK], dtype=tl.int64)
    if SCAN_CHUNKS <= _UNROLLED_CHUNKS:
        for chunk in tl.static_range(SCAN_CHUNKS):
            entry = chunk * SCAN_BLOCK + tl.arange(0, SCAN_BLOCK)
            running += _load_lengths(
                values_ptr, values_stride, other_ptr, other_stride, bound, entry, entry < first, KIND
            )
    else:
        for chunk0 in range(0, first, SCAN_BLOCK):
            entry = chunk0 + tl.arange(0, SCAN_BLOCK)
            running += _load_lengths(
                values_ptr, values_stride, other_ptr, other_stride, bound, entry, entry < first, KIND
            )
    return tl.sum(running, axis=0)


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
    SCAN_CHUNKS: tl.constexpr,
):
    """Lengths of entries ``first .. first+BLOCK-1`` (0 past ``count``) and their exclusive prefix sums
    over all entries from 0: the start of each entry's run in a ragged output (both int64 [BLOCK]).

    The block's own lengths are loaded first, so that their load overlaps the earlier chunks' loads.
    """
    entry = first + tl.arange(0, BLOCK)
    lengths = _load_lengths(
        values_ptr, values_stride, other_ptr, other_stride, bound, entry, entry < count, KIND
    )
    before = _sum_before(
        first, values_ptr, values_stride, other_ptr, other_stride, bound, KIND, SCAN_BLOCK, SCAN_CHUNKS
    )
    return lengths, before + tl.cumsum(lengths, axis=0) - lengths


@triton.jit
def _load_run(src_ptr, src_base, src_step, lo, hi, COLS: tl.constexpr):
    """Positions ``lo[r] <= i < hi[r]`` (at most COLS of them) of each run r of the tile:
    ``src[src_base[r] + i*src_step]`` with the positions i ([runs, COLS] int64) and their mask."""
    i = lo[:, None] + tl.arange(0, COLS).to(tl.int64)[None, :]
    mask = i < hi[:, None]
    return tl.load(src_ptr + src_base[:, None] + i * src_step, mask=mask), i, mask


@triton.jit
def _store_run(dst_ptr, dst_base, dst_step, value, i, mask):
    """``dst[dst_base[r] + i*dst_step] = value`` on the lanes of a :func:`_load_run` (dst's dtype)."""
    tl.store(dst_ptr + dst_base[:, None] + i * dst_step, value.to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _copy_runs(src_ptr, src_base, src_step, dst_ptr, dst_base, dst_step, lo, hi, COLS: tl.constexpr):
    """``dst[dst_base[r] + i*dst_step] = src[src_base[r] + i*src_step]`` for every run r of the tile
    and every ``lo[r] <= i < hi[r]``, converted to dst's dtype, COLS positions per iteration."""
    end = tl.max(hi - lo, axis=0).to(tl.int32)
    for column in range(0, end, COLS):
        value, i, mask = _load_run(src_ptr, src_base, src_step, lo + column, hi, COLS)
        _store_run(dst_ptr, dst_base, dst_step, value, i, mask)


@triton.jit
def _draft_column(seq_len, branch, step, PAGE_SIZE: tl.constexpr, STEPS: tl.constexpr):
    """``req_to_token`` column of draft ``step`` of ``branch`` (paged tree layout of §A3; contiguous
    ``seq_len + branch*STEPS + step`` when ``PAGE_SIZE == 1`` or there is one branch)."""
    partial_page = seq_len - floor_div(seq_len, PAGE_SIZE) * PAGE_SIZE
    pages_per_branch = (partial_page + (STEPS + PAGE_SIZE - 1)) // PAGE_SIZE
    return seq_len + branch * pages_per_branch * PAGE_SIZE + step


@triton.jit
def _load_rows(req_pool_indices_ptr, rpi_stride, request, live, num_rows):
    """The ``req_to_token`` row of each request (int64) and whether it lies inside the table."""
    row = tl.load(req_pool_indices_ptr + request.to(tl.int64) * rpi_stride, mask=live, other=0).to(tl.int64)
    return row, live & (row >= 0) & (row < num_rows)


# --------------------------------------------------------------------------------------------------
# Kernels


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
    row, row_ok = _load_rows(rpi_ptr, rpi_stride, request, live, num_rows)
    begin = tl.load(start_ptr + request.to(tl.int64) * start_stride, mask=live, other=0).to(tl.int64)
    lengths, offsets = _exclusive_offsets(
        first, bs, end_ptr, end_stride, start_ptr, start_stride, 0, _DIFFERENCE, ROWS, SCAN_BLOCK, SCAN_CHUNKS
    )
    # Position i of a run: column begin + i of the table, flat position offsets + i; both in range.
    lo = tl.maximum(tl.maximum(-begin, -offsets), 0)
    hi = tl.minimum(tl.minimum(lengths, pool_len - begin), flat_limit - offsets)
    hi = tl.where(row_ok, hi, 0)
    table_base = row * table_row_stride + begin * table_col_stride
    flat_base = offsets * flat_stride
    if TO_TABLE:
        _copy_runs(flat_ptr, flat_base, flat_stride, table_ptr, table_base, table_col_stride, lo, hi, COLS)
    else:
        _copy_runs(table_ptr, table_base, table_col_stride, flat_ptr, flat_base, flat_stride, lo, hi, COLS)


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
    row, row_ok = _load_rows(rpi_ptr, rpi_stride, request, live, num_rows)
    seq = tl.load(seq_lens_ptr + request * seq_stride, mask=live, other=0).to(tl.int64)
    column = _draft_column(seq[:, None], branch, step, PAGE_SIZE, STEPS)
    readable = row_ok[:, None] & (draft[None, :] < TOPK * STEPS) & (column >= 0) & (column < pool_len)
    slot = tl.load(table_ptr + row[:, None] * table_row_stride + column * table_col_stride, mask=readable)
    entry = request[:, None] * (TOPK * STEPS) + draft[None, :]
    tl.store(out_ptr + entry * out_stride, slot.to(tl.int64), mask=readable)


@triton.jit
def _branch_list_start(before, seq, request, branch, step, TOPK: tl.constexpr):
    """Start, in ``kv_indices`` row ``step``, of the list of ``branch`` of ``request``: the lists of the
    earlier branches hold their prefix (``seq`` each) plus ``step + 1`` draft slots."""
    return TOPK * before + branch * seq + (request * TOPK + branch) * (step + 1)


@triton.jit
def _lanes_below(count, TILE: tl.constexpr):
    """``count`` clamped to ``[0, TILE]`` as int32: a tile's lane l is live iff ``l < _lanes_below``."""
    return tl.minimum(tl.maximum(count, 0), TILE).to(tl.int32)


@triton.jit
def _load_prefix_tile(table_row, table_col_stride, column0, copy_end, TILE: tl.constexpr):
    """Prefix columns ``column0 .. column0+TILE-1`` (those below ``copy_end``) of a ``req_to_token`` row."""
    lane = tl.arange(0, TILE)
    source = table_row + column0 * table_col_stride + lane.to(tl.int64) * table_col_stride
    return tl.load(source, mask=lane < _lanes_below(copy_end - column0, TILE))


@triton.jit
def _store_prefix_tile(
    slot,
    column0,
    copy_end,
    before,
    seq,
    request,
    indices_ptr,
    indices_row_stride,
    indices_col_stride,
    indices_limit,
    TOPK: tl.constexpr,
    STEPS: tl.constexpr,
    TILE: tl.constexpr,
):
    """Store a prefix tile (from :func:`_load_prefix_tile`) into the K*S branch lists holding it: one
    contiguous run each, whose start and live length are scalars (per lane: a compare and a store).
    The lists are a loop, not unrolled: one list's registers at a time (K*S unrolled runs spill at
    K 8, S 5) and every store in the load's layout (no shared-memory layout conversion)."""
    lane = tl.arange(0, TILE)
    offsets = lane.to(tl.int64) * indices_col_stride
    for step in range(STEPS):
        row_of_step = indices_ptr + tl.cast(step, tl.int64) * indices_row_stride
        for branch in range(TOPK):
            list_start = _branch_list_start(before, seq, request, branch, step, TOPK)
            run_start = list_start + column0
            live = tl.minimum(copy_end - column0, indices_limit - run_start)
            live = tl.where(list_start >= 0, live, 0)
            destination = row_of_step + run_start * indices_col_stride + offsets
            tl.store(destination, slot, mask=lane < _lanes_below(live, TILE))


@triton.jit
def _store_draft_lists(
    table_row,
    table_col_stride,
    pool_len,
    row_ok,
    before,
    seq,
    request,
    indices_ptr,
    indices_row_stride,
    indices_col_stride,
    indices_limit,
    PAGE_SIZE: tl.constexpr,
    TOPK: tl.constexpr,
    STEPS: tl.constexpr,
    BRANCHES: tl.constexpr,
    STEP_LANES: tl.constexpr,
):
    """The draft slots of a request: row s lists steps 0..s of each branch right after its prefix.
    The ``[BRANCHES >= K, STEP_LANES >= S]`` slots are read once and stored S times."""
    branch = tl.arange(0, BRANCHES)[:, None]
    step = tl.arange(0, STEP_LANES)[None, :]
    column = _draft_column(seq, branch, step, PAGE_SIZE, STEPS)
    readable = row_ok & (branch < TOPK) & (step < STEPS) & (column >= 0) & (column < pool_len)
    slot = tl.load(table_row + column * table_col_stride, mask=readable)
    for s in tl.static_range(STEPS):
        position = _branch_list_start(before, seq, request, branch, s, TOPK) + seq + step
        keep = readable & (step <= s) & (position >= 0) & (position < indices_limit)
        row_of_step = indices_ptr + tl.cast(s, tl.int64) * indices_row_stride
        tl.store(row_of_step + position * indices_col_stride, slot, mask=keep)


@triton.jit
def _store_indptr_block(
    block_no,
    positions_ptr,
    positions_stride,
    indptr_ptr,
    indptr_row_stride,
    indptr_col_stride,
    num_branches,
    STEPS: tl.constexpr,
    BLOCK: tl.constexpr,
    SCAN_BLOCK: tl.constexpr,
    SCAN_CHUNKS: tl.constexpr,
):
    """``kv_indptr[s][z + 1] = sum(positions[:z + 1]) + (z + 1)*(s + 1)`` for the branches z of block
    ``block_no`` (BLOCK consecutive branches; blocks past the last branch write nothing)."""
    first = block_no * BLOCK
    if first < num_branches:
        lengths, prefix = _exclusive_offsets(
            first,
            num_branches,
            positions_ptr,
            positions_stride,
            positions_ptr,
            positions_stride,
            0,
            _VALUE,
            BLOCK,
            SCAN_BLOCK,
            SCAN_CHUNKS,
        )
        column = first + tl.arange(0, BLOCK).to(tl.int64) + 1
        for s in tl.static_range(STEPS):
            value = prefix + lengths + column * (s + 1)
            row_of_step = indptr_ptr + tl.cast(s, tl.int64) * indptr_row_stride
            tl.store(
                row_of_step + column * indptr_col_stride, value.to(tl.int32), mask=column <= num_branches
            )


@kernel
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
    PAGE_SIZE: tl.constexpr,
    TOPK: tl.constexpr,
    STEPS: tl.constexpr,
    TILE: tl.constexpr,
    BRANCHES: tl.constexpr,
    STEP_LANES: tl.constexpr,
    SCAN_BLOCK: tl.constexpr,
    SCAN_CHUNKS: tl.constexpr,
    INDPTR_BLOCK: tl.constexpr,
    INDPTR_SCAN_BLOCK: tl.constexpr,
    INDPTR_SCAN_CHUNKS: tl.constexpr,
):
    """A4. Grid: (bs, prefix tiles). Program (b, c) reads prefix tile c (TILE columns) of request b once
    and stores it into the K*S branch lists holding it (tiles past the grid: grid-strided). Programs
    (b, 0) also store the request's draft slots and the ``kv_indptr`` entries of branch block b.
    Two dependent levels: lengths, row (and the indptr scan), then the slots."""
    request = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    seq = tl.load(seq_lens_ptr + request * seq_stride).to(tl.int64)
    row, row_ok = _load_rows(rpi_ptr, rpi_stride, request, request < bs, num_rows)
    before = _sum_before(
        request, seq_lens_ptr, seq_stride, seq_lens_ptr, seq_stride, 0, _VALUE, SCAN_BLOCK, SCAN_CHUNKS
    )
    if tile == 0:
        _store_indptr_block(
            request,
            positions_ptr,
            positions_stride,
            indptr_ptr,
            indptr_row_stride,
            indptr_col_stride,
            bs * TOPK,
            STEPS,
            INDPTR_BLOCK,
            INDPTR_SCAN_BLOCK,
            INDPTR_SCAN_CHUNKS,
        )
    copy_end = tl.where(row_ok, tl.minimum(seq, pool_len), 0)  # prefix columns read from the row
    table_row = table_ptr + row * table_row_stride
    column0 = tile.to(tl.int64) * TILE
    # The first tile's load is in flight while program (b, 0) reads and stores the draft slots.
    slot = _load_prefix_tile(table_row, table_col_stride, column0, copy_end, TILE)
    if tile == 0:
        _store_draft_lists(
            table_row,
            table_col_stride,
            pool_len,
            row_ok,
            before,
            seq,
            request,
            indices_ptr,
            indices_row_stride,
            indices_col_stride,
            indices_limit,
            PAGE_SIZE,
            TOPK,
            STEPS,
            BRANCHES,
            STEP_LANES,
        )
    if column0 < copy_end:
        _store_prefix_tile(
            slot,
            column0,
            copy_end,
            before,
            seq,
            request,
            indices_ptr,
            indices_row_stride,
            indices_col_stride,
            indices_limit,
            TOPK,
            STEPS,
            TILE,
        )
    # Tiles past the grid (a row of more than max_grid tiles).
    tile_step = tl.num_programs(1) * TILE
    for next_column in range(tile * TILE + tile_step, copy_end.to(tl.int32), tile_step):
        column0 = tl.cast(next_column, tl.int64)
        slot = _load_prefix_tile(table_row, table_col_stride, column0, copy_end, TILE)
        _store_prefix_tile(
            slot,
            column0,
            copy_end,
            before,
            seq,
            request,
            indices_ptr,
            indices_row_stride,
            indices_col_stride,
            indices_limit,
            TOPK,
            STEPS,
            TILE,
        )


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
    before = _sum_before(
        first,
        accept_ptr,
        accept_stride,
        accept_ptr,
        accept_stride,
        num_slots,
        _IN_RANGE,
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
    committed, tgt_start = _exclusive_offsets(
        first, bs, ncd_ptr, ncd_stride, ncd_ptr, ncd_stride, 0, _PLUS_ONE, ROWS, SCAN_BLOCK, SCAN_CHUNKS
    )
    freed, free_start = _exclusive_offsets(
        first,
        bs,
        to_free_ptr,
        to_free_stride,
        to_free_ptr,
        to_free_stride,
        0,
        _VALUE,
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
    accepted, accepted_at, accepted_mask = _load_run(
        slots_ptr, request_slots * slots_stride, slots_stride, lo, hi, COLS
    )
    # Freed: verify column D - freed + i, inside [0, D).
    lo = tl.maximum(tl.maximum(-free_start, freed - draft_token_num), 0)
    hi = tl.where(live, tl.minimum(freed, free_limit - free_start), 0)
    freed_base = (request_slots + draft_token_num - freed) * slots_stride
    released, released_at, released_mask = _load_run(slots_ptr, freed_base, slots_stride, lo, hi, COLS)
    _store_run(tgt_ptr, tgt_start * tgt_stride, tgt_stride, accepted, accepted_at, accepted_mask)
    _store_run(free_ptr, free_start * free_stride, free_stride, released, released_at, released_mask)


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
    kept, out_start = _exclusive_offsets(
        first,
        bs,
        filter_ptr,
        filter_stride,
        filter_ptr,
        filter_stride,
        0,
        _VALUE,
        ROWS,
        SCAN_BLOCK,
        SCAN_CHUNKS,
    )
    committed, tgt_start = _exclusive_offsets(
        first, bs, ncd_ptr, ncd_stride, ncd_ptr, ncd_stride, 0, _PLUS_ONE, ROWS, SCAN_BLOCK, SCAN_CHUNKS
    )
    lo = tl.maximum(tl.maximum(-out_start, -tgt_start), 0)
    hi = tl.minimum(tl.minimum(kept, committed), tl.minimum(out_limit - out_start, tgt_numel - tgt_start))
    _copy_runs(
        tgt_ptr, tgt_start * tgt_stride, tgt_stride, out_ptr, out_start * out_stride, out_stride, lo, hi, COLS
    )


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
    row, row_ok = _load_rows(rpi_ptr, rpi_stride, request, request >= 0, num_rows)
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


# --------------------------------------------------------------------------------------------------
# Providers (the op's provider signature; outputs allocated by the contract)


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


_DRAFT_KV_TILE_DIVISOR = 4


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
    launch, limit = _draft_kv_launch(
        config,
        req_pool_indices.shape[0],
        req_to_token.shape[1],
        kv_indices.shape[1],
        kv_indices.element_size(),
        page_size,
        topk,
        num_steps,
    )
    launch(
        req_pool_indices,
        req_pool_indices.stride()[0],
        req_to_token,
        *req_to_token.stride(),
        *req_to_token.shape,
        seq_lens,
        seq_lens.stride()[0],
        positions,
        positions.stride()[0],
        kv_indices,
        *kv_indices.stride(),
        limit,
        kv_indptr,
        *kv_indptr.stride(),
        req_pool_indices.shape[0],
    )


@functools.lru_cache(maxsize=1024)
def _draft_kv_launch(
    config: LaunchConfig,
    bs: int,
    pool_len: int,
    list_capacity: int,
    element_size: int,
    page_size: int,
    topk: int,
    num_steps: int,
) -> tuple[Launch, int]:
    """(the draft KV-index launch, its write limit), once per layout."""
    # A program writes its prefix tile into all K*S lists (unaligned runs, not 16-byte vectors):
    # quarter-size tiles give four times the programs, which the stores need more than wide tiles
    # (``spec-hal bench --sweep`` compares tile sizes).
    tile_bytes = max(config.copy_block_bytes // _DRAFT_KV_TILE_DIVISOR, element_size)
    tile = min(tile_bytes // element_size, pow2(pool_len))
    branches = bs * topk
    # Short rows: the kv_indptr scan over the branches sets the warps of the (small) programs.
    num_warps = max(copy_warps(config, tile), scanning_warps(config, tile, branches))
    indptr_scan_block, indptr_scan_chunks = scan_shape(branches, config, num_warps)
    # The reference writes no position past its bound (each prefix lies within a row).
    limit = min(list_capacity, topk * bs * pool_len + bs * topk * num_steps)
    launch = _draft_kv_indices_kernel.at(
        (bs, max(min(cdiv(pool_len, tile), config.max_grid), 1)),
        PAGE_SIZE=page_size,
        TOPK=topk,
        STEPS=num_steps,
        TILE=tile,
        BRANCHES=pow2(topk),
        STEP_LANES=pow2(num_steps),
        **scan_args(bs, config, num_warps),
        # Branch blocks of kv_indptr: at least K branches each, so that the bs programs cover them.
        INDPTR_BLOCK=max(indptr_scan_block, pow2(topk)),
        INDPTR_SCAN_BLOCK=indptr_scan_block,
        INDPTR_SCAN_CHUNKS=indptr_scan_chunks,
        num_warps=num_warps,
    )
    return launch, limit


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


#: The family's launchers of this module: op name -> launcher(config, *provider arguments).
LAUNCHERS: dict[str, Callable[..., None]] = {
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


__all__ = ["LAUNCHERS"]
