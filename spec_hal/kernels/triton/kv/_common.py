"""Device helpers of family B's move kernels: buffer words, slot lanes, segment runs and the
held and staged block moves."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

WORDS = {1: (torch.int8, tl.int8), 2: (torch.int16, tl.int16), 4: (torch.int32, tl.int32)}


@triton.jit
def buffer_words(ptr_table, buffers, buffer_end, WORD: tl.constexpr, ALIGNED: tl.constexpr):
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
        bases = buffer_words(ptr_table, block, buffer_end, WORD, ALIGNED)
    else:
        bases = buffer_words(ptr_table, block + block_rows, buffer_end, WORD, ALIGNED)[:, None]
    return bases


@triton.jit
def lane_slots(tgt_loc, src_loc, lanes, lane_end, num_slots, tgt_stride, src_stride):
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
def row_word_pointers(base, slots, cols, STRIDE_WORDS: tl.constexpr):
    """Pointers to words ``cols`` of rows ``slots`` ([lanes, cols]); ``base`` is a buffer's pointer
    or a [lanes, 1] column of per-row buffer pointers."""
    return base + slots[:, None] * STRIDE_WORDS + cols[None, :]


@triton.jit
def staged_words(scratch, rows, cols, ROW_WORDS: tl.constexpr):
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
def segments_before(
    segment_lens, first_segment, seg_stride, num_lanes, BLOCK: tl.constexpr, SEGMENTED: tl.constexpr
):
    """Lanes of the segments before ``first_segment``: the start of a program's first segment."""
    total = tl.zeros([BLOCK], dtype=tl.int64)
    for start in range(0, first_segment, BLOCK):
        ids = start + tl.arange(0, BLOCK)
        total += _segment_lengths(segment_lens, ids, ids < first_segment, seg_stride, num_lanes, SEGMENTED)
    return tl.sum(total, axis=0)


@triton.jit
def run_lengths(
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
def next_chunk(lengths, segment, segment_end, LANE_BLOCK: tl.constexpr):
    """(segments, lanes) of the chunk of whole segments from ``segment`` (before ``segment_end``,
    lengths ``lengths``) that fits in LANE_BLOCK lanes, and the length of ``segment`` (alone when
    none fits)."""
    ids = segment + tl.arange(0, LANE_BLOCK)
    fits = ((ids < segment_end) & (tl.cumsum(lengths, axis=0) <= LANE_BLOCK)).to(tl.int64)
    first_length = tl.sum(lengths * (ids == segment).to(tl.int64), axis=0)
    return tl.sum(fits, axis=0).to(tl.int32), tl.sum(lengths * fits, axis=0), first_length


@triton.jit
def move_blocks(
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
    words = tl.load(row_word_pointers(bases, src, cols, STRIDE_WORDS), mask=valid[:, None] & col_ok)
    for block in range(buffer_first, buffer_end, BUFFER_BLOCK):
        after_next = _block_bases(
            ptr_table, block + 2 * BUFFER_BLOCK, block_rows, buffer_end, WORD, ALIGNED, BUFFER_BLOCK
        )
        next_valid = moved & (block + BUFFER_BLOCK + block_rows < buffer_end)
        next_words = tl.load(
            row_word_pointers(next_bases, src, cols, STRIDE_WORDS), mask=next_valid[:, None] & col_ok
        )
        written = _once_every_row_is_read(valid[:, None] & col_ok, words, ordering_zero)
        tl.store(row_word_pointers(bases, tgt, cols, STRIDE_WORDS), words, mask=written)
        bases, next_bases, valid, words = next_bases, after_next, next_valid, next_words


@triton.jit
def move_held_segment(
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
    tgt, src, moved = lane_slots(tgt_loc, src_loc, lanes, end, num_slots, tgt_stride, src_stride)
    for buffer in range(buffer_first, buffer_end):
        base = buffer_words(ptr_table, buffer, buffer_end, WORD, ALIGNED)
        for offset in range(0, TILE_WORDS, HELD_WORDS):
            cols = tile_first + offset + tl.arange(0, HELD_WORDS)
            mask = moved[:, None] & (cols < ROW_WORDS)[None, :]
            rows = tl.load(row_word_pointers(base, src, cols, STRIDE_WORDS), mask=mask)
            written = _once_every_row_is_read(mask, rows, ordering_zero)
            tl.store(row_word_pointers(base, tgt, cols, STRIDE_WORDS), rows, mask=written)


@triton.jit
def stage_long_segment(
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
        base = buffer_words(ptr_table, buffer, num_buffers, WORD, ALIGNED)
        for start in range(lane, end, LANE_BLOCK):
            lanes = start + tl.arange(0, LANE_BLOCK).to(tl.int64)
            _, src, moved = lane_slots(tgt_loc, src_loc, lanes, end, num_slots, tgt_stride, src_stride)
            mask = moved[:, None] & col_ok
            rows = tl.load(row_word_pointers(base, src, cols, STRIDE_WORDS), mask=mask)
            tl.store(staged_words(scratch, lanes, cols, ROW_WORDS), rows, mask=mask)
        # Each thread's scratch stores needed its loads' data, so once every thread is past this
        # barrier every source row is read: no target is written earlier.
        tl.debug_barrier()
        for start in range(lane, end, LANE_BLOCK):
            lanes = start + tl.arange(0, LANE_BLOCK).to(tl.int64)
            tgt, _, moved = lane_slots(tgt_loc, src_loc, lanes, end, num_slots, tgt_stride, src_stride)
            mask = moved[:, None] & col_ok
            rows = tl.load(staged_words(scratch, lanes, cols, ROW_WORDS), mask=mask)
            tl.store(row_word_pointers(base, tgt, cols, STRIDE_WORDS), rows, mask=mask)
        tl.debug_barrier()  # the next buffer reuses the same scratch rows (read above, written below)
