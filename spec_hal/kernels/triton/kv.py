"""Family B (KV movement) in Triton: ``move_kv_cache`` and the slot lists of
``move_accept_tokens_to_target_kvcache``.

``move_kv_cache`` moves every buffer of a :class:`~spec_hal.ops.KVBuffers` in one launch: programs
read their buffers' base addresses from the KVBuffers' pointer table, so the launch does not depend
on how many buffers (layers) there are. Rows are moved as integer *words* (int32 when the KVBuffers
is vectorizable, with a 16-byte alignment hint so loads and stores are 128-bit; otherwise the widest
word every row, slot stride and buffer start is a multiple of), whatever the buffers' dtype.

Work split: grid (segment runs, buffer groups, column tiles). A program loads the slots of a chunk
of its segments once, then walks its group of buffers a *block* at a time: one register tile of
``[block buffers x chunk lanes, tile columns]`` (a tile of small rows stacks several buffers). The
next block's rows, and the pointers of the block after it, are loaded before the current block is
stored, so a program keeps two tiles in flight and pays the dependent index loads (segment lengths,
then slots) once per chunk for its whole group. The grid is sized from shapes: a program takes two
blocks, or up to :data:`MAX_BLOCKS` where that keeps the launch near :data:`TARGET_PROGRAMS`
programs. ``segment_lens=None`` with few lanes is one chunk (no lengths tensor is built).

Read-before-write (the contract's per-segment gather-then-scatter): chunks are whole segments of at
most ``LANE_BLOCK`` lanes together. A block's stores are predicated on a reduction over every word
the block loaded (its rows are spread over the program's threads, and a barrier does not wait for
loads in flight on every vendor), so no target row of a segment is written before all its source
rows are read. Rows of different segments, buffers or columns never overlap (contract; buffers are
distinct), so neither the order of chunks and blocks inside a program nor the order of programs
matters. Segment starts are prefix sums of ``segment_lens``: a program sums the lengths before its
first segment once (chunked vector sums), and with many segments the programs per buffer group and
tile are capped, so the total prefix work stays linear in the number of segments.

Segments longer than ``LANE_BLOCK`` (never in spec use, where segments are W lanes): up to
``HELD_LANES`` lanes (:data:`MAX_HELD_LANES` at most) are still held in registers, a narrow
column slice at a time (read-before-write per slice is enough: slices never overlap). Longer ones
are staged through a scratch buffer ``[N, row]`` by the programs of the first buffer group, one
buffer after the other with a barrier between its gather and its scatter; the provider allocates
that scratch only when N exceeds the held lanes, the only case where such a segment can exist.
Both paths keep tiles no larger than the main one: a kernel has one register allocation, so a
rarely taken branch with big tiles would cost the main path its occupancy. With
``segment_lens=None`` and more than :data:`MAX_LANES` lanes (one large segment) the move is two
launches instead: gather every source row into a scratch buffer, then scatter it.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .config import LaunchConfig
from .launch import Launch, cdiv, kernel, next_power_of_2
from .sizing import (
    MAX_BLOCKS,
    MAX_HELD_LANES,
    MAX_LANES,
    MAX_STAGE_BYTES,
    MIN_BLOCKS,
    MIN_LANES,
    TARGET_PROGRAMS,
    VECTOR_BYTES,
    pow2_floor,
)

__all__ = ["LAUNCHERS"]


_WORDS = {1: (torch.int8, tl.int8), 2: (torch.int16, tl.int16), 4: (torch.int32, tl.int32)}


# --------------------------------------------------------------------------------------------------
# Device helpers shared by the move kernels


@triton.jit
def _buffer_words(ptr_table, buffers, buffer_end, WORD: tl.constexpr, ALIGNED: tl.constexpr):
    """Data pointers of ``buffers`` (a scalar or a tensor), read from the pointer table, as pointers
    to words; null for buffers past ``buffer_end``."""
    bases = tl.load(ptr_table + buffers, mask=buffers < buffer_end, other=0).to(tl.pointer_type(WORD))
    if ALIGNED:
        bases = tl.multiple_of(bases, 16)  # vectorizable KVBuffers: 16-byte aligned buffers
    return bases


@triton.jit
def _block_bases(
    ptr_table,
    block,
    block_rows,
    buffer_end,
    WORD: tl.constexpr,
    ALIGNED: tl.constexpr,
    BUFFER_BLOCK: tl.constexpr,
):
    """Pointers of the buffers of the block starting at buffer ``block``, per row ([rows, 1]); a
    scalar when a block is one buffer (one register pair, not one per row)."""
    if BUFFER_BLOCK == 1:
        bases = _buffer_words(ptr_table, block, buffer_end, WORD, ALIGNED)
    else:
        bases = _buffer_words(ptr_table, block + block_rows, buffer_end, WORD, ALIGNED)[:, None]
    return bases


@triton.jit
def _lane_slots(tgt_loc, src_loc, lanes, lane_end, num_slots, tgt_stride, src_stride):
    """(target, source, moved) of ``lanes``: lanes past ``lane_end``, -1 or out-of-range slots are
    not moved, and their slots are 0 so that no wild address is even formed."""
    in_range = (lanes >= 0) & (lanes < lane_end)
    tgt = tl.load(tgt_loc + lanes * tgt_stride, mask=in_range, other=-1).to(tl.int64)
    src = tl.load(src_loc + lanes * src_stride, mask=in_range, other=-1).to(tl.int64)
    moved = (tgt >= 0) & (tgt < num_slots) & (src >= 0) & (src < num_slots)
    # Clamped, not tl.where(moved, ...): Triton 3.6 miscompiled that select for some block shapes on
    # the H200 (condition and value given different layouts). Unmoved lanes are masked anyway.
    last = num_slots - 1
    return tl.minimum(tl.maximum(tgt, 0), last), tl.minimum(tl.maximum(src, 0), last), moved


@triton.jit
def _row_words(base, slots, cols, STRIDE_WORDS: tl.constexpr):
    """Pointers to words ``cols`` of rows ``slots`` ([lanes, cols]); ``base`` is a buffer's pointer
    or a [lanes, 1] column of per-row buffer pointers."""
    return base + slots[:, None] * STRIDE_WORDS + cols[None, :]


@triton.jit
def _staged_words(scratch, rows, cols, ROW_WORDS: tl.constexpr):
    """Pointers to words ``cols`` of scratch rows ``rows`` (int64) of ``ROW_WORDS`` words each."""
    return scratch + rows[:, None] * ROW_WORDS + cols[None, :]


@triton.jit
def _once_every_row_is_read(mask, rows, ordering_zero):
    """``mask``, made to depend on every word of ``rows`` that any thread of the program loaded.

    The rows of a tile are spread over the program's threads, and one thread's target may be
    another thread's source. A barrier alone does not order them everywhere (an AMD ``s_barrier``
    does not wait for loads in flight), so the stores are predicated on a reduction over all the
    loaded words: no thread can store before every thread's loads have returned. ``ordering_zero``
    is 0 at run time, unknown to the compiler, so the dependency cannot be folded away.
    """
    everything = tl.max(tl.max(rows, axis=1), axis=0)
    return mask & ((everything & ordering_zero) == 0)


@triton.jit
def _segment_lengths(segment_lens, ids, in_range, seg_stride, num_lanes, SEGMENTED: tl.constexpr):
    """Lengths of segments ``ids`` (0 outside ``in_range``); unsegmented: one segment of every lane."""
    if SEGMENTED:
        lengths = tl.load(segment_lens + ids * seg_stride, mask=in_range, other=0).to(tl.int64)
    else:
        lengths = (in_range & (ids == 0)).to(tl.int64) * num_lanes
    return lengths


@triton.jit
def _segments_before(
    segment_lens, first_segment, seg_stride, num_lanes, BLOCK: tl.constexpr, SEGMENTED: tl.constexpr
):
    """Lanes of the segments before ``first_segment``: the start of a program's first segment."""
    total = tl.zeros([BLOCK], dtype=tl.int64)
    for start in range(0, first_segment, BLOCK):
        ids = start + tl.arange(0, BLOCK)
        total += _segment_lengths(segment_lens, ids, ids < first_segment, seg_stride, num_lanes, SEGMENTED)
    return tl.sum(total, axis=0)


@triton.jit
def _run_lengths(
    segment_lens,
    segment,
    segment_end,
    seg_stride,
    num_lanes,
    LANE_BLOCK: tl.constexpr,
    SEGMENTED: tl.constexpr,
):
    """Lengths of segments [segment, segment + LANE_BLOCK), 0 from ``segment_end`` on."""
    ids = segment + tl.arange(0, LANE_BLOCK)
    return _segment_lengths(segment_lens, ids, ids < segment_end, seg_stride, num_lanes, SEGMENTED)


@triton.jit
def _next_chunk(lengths, segment, segment_end, LANE_BLOCK: tl.constexpr):
    """(segments, lanes) of the chunk of whole segments from ``segment`` (before ``segment_end``,
    lengths ``lengths``) that fits in LANE_BLOCK lanes, and the length of ``segment`` (alone when
    none fits)."""
    ids = segment + tl.arange(0, LANE_BLOCK)
    fits = ((ids < segment_end) & (tl.cumsum(lengths, axis=0) <= LANE_BLOCK)).to(tl.int64)
    first_length = tl.sum(lengths * (ids == segment).to(tl.int64), axis=0)
    return tl.sum(fits, axis=0).to(tl.int32), tl.sum(lengths * fits, axis=0), first_length


@triton.jit
def _move_blocks(
    ptr_table,
    block_rows,
    buffer_first,
    buffer_end,
    tgt,
    src,
    moved,
    cols,
    ordering_zero,
    WORD: tl.constexpr,
    ALIGNED: tl.constexpr,
    ROW_WORDS: tl.constexpr,
    STRIDE_WORDS: tl.constexpr,
    BUFFER_BLOCK: tl.constexpr,
):
    """Move one chunk's rows in buffers [buffer_first, buffer_end), BUFFER_BLOCK buffers a block.

    Row r of the block starting at buffer ``block`` is slot ``tgt[r]`` / ``src[r]`` of buffer
    ``block + block_rows[r]``. Block i+1's rows and block i+2's pointers are loaded before block i
    is stored: two tiles in flight, and no pointer load on the critical path. Blocks are different
    buffers, so only a block's own loads must precede its stores.
    """
    col_ok = (cols < ROW_WORDS)[None, :]
    # The first two blocks' pointers do not depend on the slots: in flight along with them.
    bases = _block_bases(ptr_table, buffer_first, block_rows, buffer_end, WORD, ALIGNED, BUFFER_BLOCK)
    next_bases = _block_bases(
        ptr_table, buffer_first + BUFFER_BLOCK, block_rows, buffer_end, WORD, ALIGNED, BUFFER_BLOCK
    )
    valid = moved & (buffer_first + block_rows < buffer_end)
    words = tl.load(_row_words(bases, src, cols, STRIDE_WORDS), mask=valid[:, None] & col_ok)
    for block in range(buffer_first, buffer_end, BUFFER_BLOCK):
        after_next = _block_bases(
            ptr_table, block + 2 * BUFFER_BLOCK, block_rows, buffer_end, WORD, ALIGNED, BUFFER_BLOCK
        )
        next_valid = moved & (block + BUFFER_BLOCK + block_rows < buffer_end)
        next_words = tl.load(
            _row_words(next_bases, src, cols, STRIDE_WORDS), mask=next_valid[:, None] & col_ok
        )
        written = _once_every_row_is_read(valid[:, None] & col_ok, words, ordering_zero)
        tl.store(_row_words(bases, tgt, cols, STRIDE_WORDS), words, mask=written)
        bases, next_bases, valid, words = next_bases, after_next, next_valid, next_words


@triton.jit
def _move_held_segment(
    ptr_table,
    tgt_loc,
    src_loc,
    ordering_zero,
    lane,
    end,
    buffer_first,
    buffer_end,
    num_slots,
    tgt_stride,
    src_stride,
    tile_first,
    WORD: tl.constexpr,
    ALIGNED: tl.constexpr,
    ROW_WORDS: tl.constexpr,
    STRIDE_WORDS: tl.constexpr,
    TILE_WORDS: tl.constexpr,
    HELD_LANES: tl.constexpr,
    HELD_WORDS: tl.constexpr,
):
    """Move lanes [lane, end), one segment of at most HELD_LANES lanes, in buffers [buffer_first,
    buffer_end) and the tile starting at column ``tile_first``: every row of a HELD_WORDS-column
    slice is loaded before any is stored (slices never overlap, so that is read-before-write)."""
    lanes = lane + tl.arange(0, HELD_LANES).to(tl.int64)
    tgt, src, moved = _lane_slots(tgt_loc, src_loc, lanes, end, num_slots, tgt_stride, src_stride)
    for buffer in range(buffer_first, buffer_end):
        base = _buffer_words(ptr_table, buffer, buffer_end, WORD, ALIGNED)
        for offset in range(0, TILE_WORDS, HELD_WORDS):
            cols = tile_first + offset + tl.arange(0, HELD_WORDS)
            mask = moved[:, None] & (cols < ROW_WORDS)[None, :]
            rows = tl.load(_row_words(base, src, cols, STRIDE_WORDS), mask=mask)
            written = _once_every_row_is_read(mask, rows, ordering_zero)
            tl.store(_row_words(base, tgt, cols, STRIDE_WORDS), rows, mask=written)


@triton.jit
def _stage_long_segment(
    ptr_table,
    tgt_loc,
    src_loc,
    scratch,
    lane,
    end,
    num_buffers,
    num_slots,
    tgt_stride,
    src_stride,
    cols,
    WORD: tl.constexpr,
    ALIGNED: tl.constexpr,
    ROW_WORDS: tl.constexpr,
    STRIDE_WORDS: tl.constexpr,
    LANE_BLOCK: tl.constexpr,
):
    """Move lanes [lane, end), one segment longer than the held lanes, in every buffer of the launch
    (tile ``cols``) through the scratch rows of its lanes: all sources of a buffer are staged before
    any target is written. A scratch word is stored and loaded back through the same pointer
    expression, hence by the same thread (no cross-thread visibility needed between the passes)."""
    col_ok = (cols < ROW_WORDS)[None, :]
    for buffer in range(0, num_buffers):
        base = _buffer_words(ptr_table, buffer, num_buffers, WORD, ALIGNED)
        for start in range(lane, end, LANE_BLOCK):
            lanes = start + tl.arange(0, LANE_BLOCK).to(tl.int64)
            _, src, moved = _lane_slots(tgt_loc, src_loc, lanes, end, num_slots, tgt_stride, src_stride)
            mask = moved[:, None] & col_ok
            rows = tl.load(_row_words(base, src, cols, STRIDE_WORDS), mask=mask)
            tl.store(_staged_words(scratch, lanes, cols, ROW_WORDS), rows, mask=mask)
        # Each thread's scratch stores needed its loads' data, so once every thread is past this
        # barrier every source row is read: no target is written earlier.
        tl.debug_barrier()
        for start in range(lane, end, LANE_BLOCK):
            lanes = start + tl.arange(0, LANE_BLOCK).to(tl.int64)
            tgt, _, moved = _lane_slots(tgt_loc, src_loc, lanes, end, num_slots, tgt_stride, src_stride)
            mask = moved[:, None] & col_ok
            rows = tl.load(_staged_words(scratch, lanes, cols, ROW_WORDS), mask=mask)
            tl.store(_row_words(base, tgt, cols, STRIDE_WORDS), rows, mask=mask)
        tl.debug_barrier()  # the next buffer reuses the same scratch rows (read above, written below)


# --------------------------------------------------------------------------------------------------
# Kernels


@kernel
@triton.jit(do_not_specialize=["ordering_zero"])
def _move_kv_kernel(
    ptr_table,
    tgt_loc,
    src_loc,
    segment_lens,
    scratch,
    ordering_zero,
    num_lanes,
    num_segments,
    segments_per_program,
    num_buffers,
    buffers_per_program,
    num_slots,
    tgt_stride,
    src_stride,
    seg_stride,
    WORD: tl.constexpr,
    ALIGNED: tl.constexpr,
    ROW_WORDS: tl.constexpr,
    STRIDE_WORDS: tl.constexpr,
    TILE_WORDS: tl.constexpr,
    LANE_BLOCK: tl.constexpr,
    BUFFER_BLOCK: tl.constexpr,
    PREFIX_BLOCK: tl.constexpr,
    HELD_LANES: tl.constexpr,
    HELD_WORDS: tl.constexpr,
    SEGMENTED: tl.constexpr,
    STAGED: tl.constexpr,
):
    # Grid (segment runs, buffer groups, tiles): program (p, g, t) moves tile t of the buffers of
    # group g for segments [p * segments_per_program, ...), chunk by chunk (whole segments).
    buffer_first = tl.program_id(1) * buffers_per_program
    buffer_end = tl.minimum(buffer_first + buffers_per_program, num_buffers)
    tile_first = tl.program_id(2) * TILE_WORDS
    cols = tile_first + tl.arange(0, TILE_WORDS)
    rows = tl.arange(0, BUFFER_BLOCK * LANE_BLOCK)
    block_rows = rows // LANE_BLOCK  # row r: lane r % LANE_BLOCK of the block's buffer r // LANE_BLOCK
    row_lanes = (rows % LANE_BLOCK).to(tl.int64)
    segment = tl.program_id(0) * segments_per_program
    segment_end = tl.minimum(segment + segments_per_program, num_segments)
    # The first chunk's lengths do not depend on the prefix sum: in flight along with its loads.
    lengths = _run_lengths(segment_lens, segment, segment_end, seg_stride, num_lanes, LANE_BLOCK, SEGMENTED)
    lane = _segments_before(segment_lens, segment, seg_stride, num_lanes, PREFIX_BLOCK, SEGMENTED)
    while segment < segment_end:
        taken, chunk, first_length = _next_chunk(lengths, segment, segment_end, LANE_BLOCK)
        if taken > 0:
            chunk_end = tl.minimum(lane + chunk, num_lanes)  # lengths summing past N are unchecked
            tgt, src, moved = _lane_slots(
                tgt_loc, src_loc, lane + row_lanes, chunk_end, num_slots, tgt_stride, src_stride
            )
            _move_blocks(
                ptr_table,
                block_rows,
                buffer_first,
                buffer_end,
                tgt,
                src,
                moved,
                cols,
                ordering_zero,
                WORD,
                ALIGNED,
                ROW_WORDS,
                STRIDE_WORDS,
                BUFFER_BLOCK,
            )
            lane += chunk
            segment += taken
        else:
            end = tl.minimum(lane + first_length, num_lanes)
            if HELD_LANES > 0:  # noqa: SIM102 (a constexpr test: the branch compiles away)
                if first_length <= HELD_LANES:
                    _move_held_segment(
                        ptr_table,
                        tgt_loc,
                        src_loc,
                        ordering_zero,
                        lane,
                        end,
                        buffer_first,
                        buffer_end,
                        num_slots,
                        tgt_stride,
                        src_stride,
                        tile_first,
                        WORD,
                        ALIGNED,
                        ROW_WORDS,
                        STRIDE_WORDS,
                        TILE_WORDS,
                        HELD_LANES,
                        HELD_WORDS,
                    )
            if STAGED:  # noqa: SIM102 (a constexpr test: the branch compiles away)
                # The scratch rows are per lane: one program per run and tile stages every buffer.
                if (first_length > HELD_LANES) & (tl.program_id(1) == 0):
                    _stage_long_segment(
                        ptr_table,
                        tgt_loc,
                        src_loc,
                        scratch,
                        lane,
                        end,
                        num_buffers,
                        num_slots,
                        tgt_stride,
                        src_stride,
                        cols,
                        WORD,
                        ALIGNED,
                        ROW_WORDS,
                        STRIDE_WORDS,
                        LANE_BLOCK,
                    )
            lane += first_length
            segment += 1
        lengths = _run_lengths(
            segment_lens, segment, segment_end, seg_stride, num_lanes, LANE_BLOCK, SEGMENTED
        )


@kernel
@triton.jit
def _stage_rows_kernel(
    ptr_table,
    tgt_loc,
    src_loc,
    scratch,
    num_lanes,
    num_slots,
    tgt_stride,
    src_stride,
    TO_SCRATCH: tl.constexpr,
    WORD: tl.constexpr,
    ALIGNED: tl.constexpr,
    ROW_WORDS: tl.constexpr,
    STRIDE_WORDS: tl.constexpr,
    TILE_WORDS: tl.constexpr,
    LANE_BLOCK: tl.constexpr,
):
    # One half of the two-launch move of one large segment. Grid (lane blocks, buffers, tiles);
    # scratch is [buffers, lanes, row]: TO_SCRATCH gathers source rows into it, else it is scattered
    # onto the targets (the launch boundary orders every read before every write).
    buffer = tl.program_id(1)
    cols = tl.program_id(2) * TILE_WORDS + tl.arange(0, TILE_WORDS)
    col_ok = (cols < ROW_WORDS)[None, :]
    base = _buffer_words(ptr_table, buffer, buffer + 1, WORD, ALIGNED)
    staged_base = scratch + buffer.to(tl.int64) * num_lanes * ROW_WORDS
    step = tl.num_programs(0) * LANE_BLOCK
    for start in range(tl.program_id(0) * LANE_BLOCK, num_lanes, step):
        lanes = start + tl.arange(0, LANE_BLOCK).to(tl.int64)
        tgt, src, moved = _lane_slots(tgt_loc, src_loc, lanes, num_lanes, num_slots, tgt_stride, src_stride)
        mask = moved[:, None] & col_ok
        staged = _staged_words(staged_base, lanes, cols, ROW_WORDS)
        if TO_SCRATCH:
            tl.store(staged, tl.load(_row_words(base, src, cols, STRIDE_WORDS), mask=mask), mask=mask)
        else:
            tl.store(_row_words(base, tgt, cols, STRIDE_WORDS), tl.load(staged, mask=mask), mask=mask)


@kernel
@triton.jit
def _accept_locs_kernel(
    req_pool_indices,
    req_to_token,
    seq_lens,
    num_correct_drafts,
    accept_index,
    out_cache_loc,
    tgt_loc,
    src_loc,
    num_lanes,
    pool_rows,
    pool_len,
    num_nodes,
    rpi_stride,
    pool_row_stride,
    pool_col_stride,
    seq_stride,
    ncd_stride,
    accept_row_stride,
    accept_col_stride,
    loc_stride,
    tgt_stride,
    src_stride,
    WIDTH: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # Lane b*W + j: accepted node j of request b moves from its draft slot to committed position
    # seq_lens[b] + j. Two dependent load levels; W is a constant (fixed per deployment), so the
    # lane's request and step cost no division. Every index is bound-checked before it is used; a
    # lane failing any check is -1 (the masked loads' fill value).
    for start in range(tl.program_id(0) * BLOCK, num_lanes, tl.num_programs(0) * BLOCK):
        lanes = start + tl.arange(0, BLOCK).to(tl.int64)
        in_range = lanes < num_lanes
        request = lanes // WIDTH
        j = lanes % WIDTH
        row = tl.load(req_pool_indices + request * rpi_stride, mask=in_range, other=-1).to(tl.int64)
        column = tl.load(seq_lens + request * seq_stride, mask=in_range, other=-1).to(tl.int64) + j
        accepted_drafts = tl.load(num_correct_drafts + request * ncd_stride, mask=in_range, other=-1)
        node = tl.load(
            accept_index + request * accept_row_stride + j * accept_col_stride, mask=in_range, other=-1
        ).to(tl.int64)
        accepted = (
            in_range
            & (j <= accepted_drafts)
            & (node >= 0)
            & (node < num_nodes)
            & (row >= 0)
            & (row < pool_rows)
            & (column >= 0)
            & (column < pool_len)
        )
        target = tl.load(
            req_to_token + row * pool_row_stride + column * pool_col_stride, mask=accepted, other=-1
        )
        source = tl.load(out_cache_loc + node * loc_stride, mask=accepted, other=-1)
        tl.store(tgt_loc + lanes * tgt_stride, target.to(tl.int64), mask=in_range)
        tl.store(src_loc + lanes * src_stride, source.to(tl.int64), mask=in_range)


# --------------------------------------------------------------------------------------------------
# Providers


@dataclass(frozen=True)
class _Layout:
    """How the rows of one KVBuffers are moved (computed once per KVBuffers, from its pointer table)."""

    word_bytes: int
    aligned: bool
    row_words: int
    #: (first buffer, end buffer, slot stride in words): runs of buffers sharing a slot stride, one
    #: launch each (one run in practice).
    runs: tuple[tuple[int, int, int], ...]


#: Layouts by the id of the KVBuffers' pointer table (built once per KVBuffers, never reallocated
#: while in use), each with a weak reference that confirms the id still names that table: the
#: layout is computed on the first move only, and a lookup is one dict read.
_layouts: dict[int, tuple[weakref.ref[torch.Tensor], _Layout]] = {}
_MAX_LAYOUTS = 64


def _layout(buffers: list[torch.Tensor], ptr_table: torch.Tensor, vectorizable: bool) -> _Layout:
    known = _layouts.get(id(ptr_table))
    if known is not None and known[0]() is ptr_table:
        return known[1]
    element = buffers[0].element_size()
    row_bytes = buffers[0].shape[1:].numel() * element
    num_slots = buffers[0].shape[0]
    stride_bytes = [b.stride()[0] * element if num_slots > 1 else row_bytes for b in buffers]
    if vectorizable:
        word = 4
    else:
        common = math.gcd(row_bytes, *stride_bytes, *(b.data_ptr() for b in buffers))
        word = next(w for w in (4, 2, 1) if common % w == 0)
    runs: list[tuple[int, int, int]] = []
    for i, stride in enumerate(stride_bytes):
        if runs and runs[-1][2] == stride // word:
            runs[-1] = (runs[-1][0], i + 1, stride // word)
        else:
            runs.append((i, i + 1, stride // word))
    layout = _Layout(word, vectorizable, row_bytes // word, tuple(runs))
    if len(_layouts) >= _MAX_LAYOUTS:
        _layouts.clear()
    _layouts[id(ptr_table)] = (weakref.ref(ptr_table), layout)
    return layout


def _tile_words(config: LaunchConfig, lanes: int, layout: _Layout) -> int:
    """Words per row tile: a program holds ``lanes`` rows of it, copy_block_bytes in all."""
    budget = pow2_floor(config.copy_block_bytes // (lanes * layout.word_bytes))
    tile = min(budget, next_power_of_2(layout.row_words))
    if layout.aligned:
        tile = max(tile, VECTOR_BYTES // layout.word_bytes)  # one 16-byte vector
    return max(tile, next_power_of_2(cdiv(layout.row_words, config.max_grid)))


def _buffer_groups(layout: _Layout, group: int):
    """(pointer-table slice, slot stride in words) per launch: runs split into groups of ``group``."""
    for first, end, stride_words in layout.runs:
        for start in range(first, end, group):
            yield start, min(start + group, end), stride_words


@dataclass(frozen=True)
class _MovePlan:
    """Tile shapes and launches of one ``move_kv_cache`` shape (segmented or one short segment)."""

    lane_block: int
    buffer_block: int
    tile_words: int
    #: Lanes and columns of the tile holding a segment longer than lane_block (0: no such segment
    #: can exist, or the tile budget holds no more lanes than lane_block: every one is staged).
    held_lanes: int
    held_words: int
    #: Whether a segment can be longer than the held lanes (then a scratch buffer is needed).
    staged: bool
    #: (first buffer, end buffer, slot stride in words, grid, segments per program, buffers per
    #: program) per launch.
    launches: tuple[tuple[int, int, int, tuple[int, int, int], int, int], ...]
    #: The kernel launch of each entry of ``launches``.
    bound: tuple[Launch, ...]


def _held_tile(
    config: LaunchConfig, layout: _Layout, num_lanes: int, lane_block: int, tile_words: int
) -> tuple[int, int]:
    """(lanes, words) of the tile holding a segment longer than lane_block: columns of one 16-byte
    vector (one word if not vectorizable), as many lanes as copy_block_bytes holds; (0, 0) if none."""
    vector_words = VECTOR_BYTES // layout.word_bytes if layout.aligned else 1
    lanes = min(MAX_HELD_LANES, pow2_floor(config.copy_block_bytes // (vector_words * layout.word_bytes)))
    if num_lanes <= lane_block or lanes <= lane_block:
        return 0, 0
    return lanes, min(
        tile_words, max(vector_words, pow2_floor(config.copy_block_bytes // (lanes * layout.word_bytes)))
    )


@functools.lru_cache(maxsize=256)
def _move_plan(
    config: LaunchConfig, layout: _Layout, num_lanes: int, num_segments: int, segmented: bool
) -> _MovePlan:
    typical = cdiv(num_lanes, num_segments)
    lane_block = min(max(next_power_of_2(typical), MIN_LANES), MAX_LANES)
    tile_words = _tile_words(config, lane_block, layout)
    num_tiles = cdiv(layout.row_words, tile_words)
    # Small rows: one tile stacks the rows of several buffers (copy_block_bytes in all).
    longest_run = max(end - first for first, end, _ in layout.runs)
    stacked = config.copy_block_bytes // (lane_block * tile_words * layout.word_bytes)
    buffer_block = min(pow2_floor(stacked), next_power_of_2(longest_run))
    held_lanes, held_words = _held_tile(config, layout, num_lanes, lane_block, tile_words)
    # A run is as many typical segments as fill a chunk; a program takes whole runs.
    segments_per_run = max(1, lane_block // typical)
    runs = cdiv(num_segments, segments_per_run)
    launches = []
    for first, end, stride_words in layout.runs:
        blocks = cdiv(end - first, buffer_block)
        # Blocks per program: more than MIN_BLOCKS only past about TARGET_PROGRAMS programs, at
        # most MAX_BLOCKS (short tails) unless the grid limit needs more.
        wanted = min(max(MIN_BLOCKS, cdiv(runs * num_tiles * blocks, TARGET_PROGRAMS)), MAX_BLOCKS)
        blocks_per_program = min(blocks, max(wanted, cdiv(blocks, config.max_grid)))
        groups = cdiv(blocks, blocks_per_program)
        run_programs = min(runs, config.max_grid)
        if num_segments > config.block:  # prefix sums loop: cap the programs that each sum them
            run_programs = min(run_programs, max(1, TARGET_PROGRAMS // (groups * num_tiles)))
        segments_per_program = segments_per_run * cdiv(runs, run_programs)
        grid = (cdiv(num_segments, segments_per_program), groups, num_tiles)
        launches.append(
            (first, end, stride_words, grid, segments_per_program, blocks_per_program * buffer_block)
        )
    staged = num_lanes > max(lane_block, held_lanes)
    bound = tuple(
        _move_kv_kernel.at(
            grid,
            WORD=_WORDS[layout.word_bytes][1],
            ALIGNED=layout.aligned,
            ROW_WORDS=layout.row_words,
            STRIDE_WORDS=stride_words,
            TILE_WORDS=tile_words,
            LANE_BLOCK=lane_block,
            BUFFER_BLOCK=buffer_block,
            PREFIX_BLOCK=config.block,
            HELD_LANES=held_lanes,
            HELD_WORDS=held_words,
            SEGMENTED=segmented,
            STAGED=staged,
            num_warps=config.copy_num_warps,
        )
        for _, _, stride_words, grid, _, _ in launches
    )
    return _MovePlan(
        lane_block, buffer_block, tile_words, held_lanes, held_words, staged, tuple(launches), bound
    )


def _move_kv_cache(
    config: LaunchConfig,
    buffers: list[torch.Tensor],
    ptr_table: torch.Tensor,
    vectorizable: bool,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
    segment_lens: torch.Tensor | None,
) -> None:
    num_lanes, num_slots = tgt_loc.shape[0], buffers[0].shape[0]
    if num_lanes == 0 or num_slots == 0:
        return
    layout = _layout(buffers, ptr_table, vectorizable)
    if layout.row_words == 0:
        return
    if segment_lens is None and num_lanes > MAX_LANES:
        _move_one_large_segment(config, layout, ptr_table, num_slots, tgt_loc, src_loc)
        return
    num_segments = 1 if segment_lens is None else segment_lens.shape[0]
    if num_segments == 0:
        return
    plan = _move_plan(config, layout, num_lanes, num_segments, segment_lens is not None)
    word_dtype = _WORDS[layout.word_bytes][0]
    # Scratch rows of the lanes of segments longer than the held lanes (sized from shapes), only
    # when N lanes can make such a segment.
    scratch = (
        torch.empty(num_lanes, layout.row_words, dtype=word_dtype, device=tgt_loc.device)
        if plan.staged
        else ptr_table
    )
    for (first, end, _, _, segments_per_program, buffers_per_program), launch in zip(
        plan.launches, plan.bound, strict=True
    ):
        launch(
            ptr_table if len(plan.launches) == 1 else ptr_table[first:end],
            tgt_loc,
            src_loc,
            tgt_loc if segment_lens is None else segment_lens,  # unread without segments
            scratch,
            0,  # ordering_zero
            num_lanes,
            num_segments,
            segments_per_program,
            end - first,
            buffers_per_program,
            num_slots,
            tgt_loc.stride()[0],
            src_loc.stride()[0],
            1 if segment_lens is None else segment_lens.stride()[0],
        )


def _move_one_large_segment(
    config: LaunchConfig,
    layout: _Layout,
    ptr_table: torch.Tensor,
    num_slots: int,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """Two launches per group of buffers: gather every source row into scratch, then scatter it."""
    num_lanes = tgt_loc.shape[0]
    word_dtype, word = _WORDS[layout.word_bytes]
    row_bytes = layout.row_words * layout.word_bytes
    group = max(1, min(MAX_STAGE_BYTES // (num_lanes * row_bytes), config.max_grid))
    tile_words = _tile_words(config, MIN_LANES, layout)
    num_tiles = cdiv(layout.row_words, tile_words)
    lane_blocks = min(cdiv(num_lanes, MIN_LANES), config.max_grid)
    scratch = torch.empty(
        min(group, len(ptr_table)), num_lanes, layout.row_words, dtype=word_dtype, device=tgt_loc.device
    )
    for first, end, stride_words in _buffer_groups(layout, group):
        for to_scratch in (True, False):
            _stage_rows_kernel.at(
                (lane_blocks, end - first, num_tiles),
                TO_SCRATCH=to_scratch,
                WORD=word,
                ALIGNED=layout.aligned,
                ROW_WORDS=layout.row_words,
                STRIDE_WORDS=stride_words,
                TILE_WORDS=tile_words,
                LANE_BLOCK=MIN_LANES,
                num_warps=config.copy_num_warps,
            )(
                ptr_table[first:end],
                tgt_loc,
                src_loc,
                scratch,
                num_lanes,
                num_slots,
                tgt_loc.stride()[0],
                src_loc.stride()[0],
            )


def _accept_locs(
    config: LaunchConfig,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    num_correct_drafts: torch.Tensor,
    accept_index: torch.Tensor,
    out_cache_loc: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    num_lanes = tgt_loc.shape[0]
    if num_lanes == 0:
        return
    pool_rows, pool_len = req_to_token.shape
    _accept_locs_launch(config, num_lanes, accept_index.shape[1])(
        req_pool_indices,
        req_to_token,
        seq_lens,
        num_correct_drafts,
        accept_index,
        out_cache_loc,
        tgt_loc,
        src_loc,
        num_lanes,
        pool_rows,
        pool_len,
        out_cache_loc.shape[0],
        req_pool_indices.stride()[0],
        req_to_token.stride()[0],
        req_to_token.stride()[1],
        seq_lens.stride()[0],
        num_correct_drafts.stride()[0],
        accept_index.stride()[0],
        accept_index.stride()[1],
        out_cache_loc.stride()[0],
        tgt_loc.stride()[0],
        src_loc.stride()[0],
    )


@functools.lru_cache(maxsize=1024)
def _accept_locs_launch(config: LaunchConfig, num_lanes: int, width: int) -> Launch:
    return _accept_locs_kernel.at(
        (min(cdiv(num_lanes, config.block), config.max_grid),),
        WIDTH=width,
        BLOCK=config.block,
        num_warps=config.num_warps,
    )


#: The family's launchers of this module: op name -> launcher(config, *provider arguments).
LAUNCHERS: dict[str, Callable[..., None]] = {
    "move_kv_cache": _move_kv_cache,
    "move_accept_tokens_to_target_kvcache": _accept_locs,
}
