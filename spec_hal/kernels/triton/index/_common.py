"""Device helpers shared by family A's kernels: the ragged-offset scan, run loads and copies, and
the draft slot column."""

from __future__ import annotations

import triton
import triton.language as tl

from ..device_math import floor_div

#: How :func:`_load_lengths` reads the length of entry j (a constexpr selector, so one scan serves all).
VALUE = tl.constexpr(0)  # values[j]
PLUS_ONE = tl.constexpr(1)  # values[j] + 1 (committed tokens: num_correct_drafts + 1)
DIFFERENCE = tl.constexpr(2)  # values[j] - other[j] (window length: end - start)
IN_RANGE = tl.constexpr(3)  # 1 if 0 <= values[j] < bound else 0 (accepted entries of accept_index)

#: Most scan chunks issued as one unrolled level; longer scans loop (one level per chunk).
_UNROLLED_CHUNKS = tl.constexpr(8)


@triton.jit
def _load_lengths(values_ptr, values_stride, other_ptr, other_stride, bound, entry, mask, KIND: tl.constexpr):
    """Length of each ``entry`` (int64; 0 on masked lanes), read as ``KIND`` says."""
    entry = entry.to(tl.int64)
    length = tl.load(values_ptr + entry * values_stride, mask=mask, other=0).to(tl.int64)
    if KIND == PLUS_ONE:
        length += 1
    if KIND == DIFFERENCE:
        length -= tl.load(other_ptr + entry * other_stride, mask=mask, other=0).to(tl.int64)
    if KIND == IN_RANGE:
        length = ((length >= 0) & (length < bound)).to(tl.int64)
    return tl.where(mask, length, 0)


@triton.jit
def sum_before(
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
def exclusive_offsets(
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
    before = sum_before(
        first, values_ptr, values_stride, other_ptr, other_stride, bound, KIND, SCAN_BLOCK, SCAN_CHUNKS
    )
    return lengths, before + tl.cumsum(lengths, axis=0) - lengths


@triton.jit
def load_run(src_ptr, src_base, src_step, lo, hi, COLS: tl.constexpr):
    """Positions ``lo[r] <= i < hi[r]`` (at most COLS of them) of each run r of the tile:
    ``src[src_base[r] + i*src_step]`` with the positions i ([runs, COLS] int64) and their mask."""
    i = lo[:, None] + tl.arange(0, COLS).to(tl.int64)[None, :]
    mask = i < hi[:, None]
    return tl.load(src_ptr + src_base[:, None] + i * src_step, mask=mask), i, mask


@triton.jit
def store_run(dst_ptr, dst_base, dst_step, value, i, mask):
    """``dst[dst_base[r] + i*dst_step] = value`` on the lanes of a :func:`load_run` (dst's dtype)."""
    tl.store(dst_ptr + dst_base[:, None] + i * dst_step, value.to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def copy_runs(src_ptr, src_base, src_step, dst_ptr, dst_base, dst_step, lo, hi, COLS: tl.constexpr):
    """``dst[dst_base[r] + i*dst_step] = src[src_base[r] + i*src_step]`` for every run r of the tile
    and every ``lo[r] <= i < hi[r]``, converted to dst's dtype, COLS positions per iteration."""
    end = tl.max(hi - lo, axis=0).to(tl.int32)
    for column in range(0, end, COLS):
        value, i, mask = load_run(src_ptr, src_base, src_step, lo + column, hi, COLS)
        store_run(dst_ptr, dst_base, dst_step, value, i, mask)


@triton.jit
def draft_column(seq_len, branch, step, PAGE_SIZE: tl.constexpr, STEPS: tl.constexpr):
    """``req_to_token`` column of draft ``step`` of ``branch`` (paged tree layout of §A3; contiguous
    ``seq_len + branch*STEPS + step`` when ``PAGE_SIZE == 1`` or there is one branch)."""
    partial_page = seq_len - floor_div(seq_len, PAGE_SIZE) * PAGE_SIZE
    pages_per_branch = (partial_page + (STEPS + PAGE_SIZE - 1)) // PAGE_SIZE
    return seq_len + branch * pages_per_branch * PAGE_SIZE + step


@triton.jit
def load_rows(req_pool_indices_ptr, rpi_stride, request, live, num_rows):
    """The ``req_to_token`` row of each request (int64) and whether it lies inside the table."""
    row = tl.load(req_pool_indices_ptr + request.to(tl.int64) * rpi_stride, mask=live, other=0).to(tl.int64)
    return row, live & (row >= 0) & (row < num_rows)
