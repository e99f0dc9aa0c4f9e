"""Family B (KV movement) in Triton: ``move_kv_cache`` and the slot lists of
``move_accept_tokens_to_target_kvcache``.

``move_kv_cache`` moves every buffer of a :class:`~spec_hal.ops.KVBuffers` in one launch: a program
reads its buffer's base address from the KVBuffers' pointer table, so the launch does not depend on
how many buffers (layers) there are. Rows are moved as integer *words* (int32 when the KVBuffers is
vectorizable, with a 16-byte alignment hint so loads and stores are 128-bit; otherwise the widest
word every row, slot stride and buffer start is a multiple of), whatever the buffers' dtype.

Read-before-write (the contract's per-segment gather-then-scatter): a program owns one byte tile of
one buffer and a run of whole segments. It walks its segments in *chunks* of whole segments holding
at most ``LANE_BLOCK`` lanes, loads every source row of a chunk into registers and only then stores
the targets: the stores are predicated on a reduction over every loaded word (the rows of one chunk
are spread over the program's threads, and a barrier does not wait for loads in flight on every
vendor). Rows of different segments never overlap (contract), so neither the order of chunks inside
a program nor the order of programs matters. Segment starts are prefix sums of ``segment_lens``: a program sums
the lengths before its first segment once (chunked vector sums), and the number of programs per
buffer tile is capped, so the total prefix work stays linear in the number of segments per tile.

Segments longer than ``LANE_BLOCK`` (never in spec use, where segments are W lanes) do not fit in
registers: the program of the launch's first buffer stages them through a scratch buffer
``[N, row]`` (sized from shapes), one buffer after the other with a barrier between its gather and
its scatter. With ``segment_lens=None`` and more than :data:`_MAX_LANES` lanes (one large segment)
the move is two launches instead: gather every source row into a scratch buffer, then scatter it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch.utils.weak import WeakIdKeyDictionary

from ...registry import TRITON, register_impl
from .config import LaunchConfig

__all__ = ["register"]

#: Lanes a program holds in registers at once; a segment longer than this is staged.
_MIN_LANES = 16
_MAX_LANES = 64
#: Programs per launch worth splitting the segments for (several waves of resident programs keep
#: enough bytes in flight; more only adds prefix-sum work).
_TARGET_PROGRAMS = 8192
#: Largest scratch buffer of the two-launch move of one large segment (buffers are moved in groups).
_MAX_STAGE_BYTES = 256 << 20

_WORDS = {1: (torch.int8, tl.int8), 2: (torch.int16, tl.int16), 4: (torch.int32, tl.int32)}


# --------------------------------------------------------------------------------------------------
# Device helpers shared by the move kernels


@triton.jit
def _buffer_words(ptr_table, buffer, WORD: tl.constexpr, ALIGNED: tl.constexpr):
    """Buffer ``buffer``'s data pointer, read from the pointer table, as a pointer to words."""
    base = tl.load(ptr_table + buffer).to(tl.pointer_type(WORD))
    if ALIGNED:
        base = tl.multiple_of(base, 16)  # vectorizable KVBuffers: 16-byte aligned buffers
    return base


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
    """Pointers to words ``cols`` of rows ``slots`` ([lanes, cols])."""
    return base + slots[:, None] * STRIDE_WORDS + cols[None, :]


@triton.jit
def _staged_words(scratch, rows, cols, ROW_WORDS: tl.constexpr):
    """Pointers to words ``cols`` of scratch rows ``rows`` (int64) of ``ROW_WORDS`` words each."""
    return scratch + rows[:, None] * ROW_WORDS + cols[None, :]


@triton.jit
def _once_every_row_is_read(mask, rows, ordering_zero):
    """``mask``, made to depend on every word of ``rows`` that any thread of the program loaded.

    The rows of a chunk are spread over the program's threads, and one thread's target may be
    another thread's source. A barrier alone does not order them everywhere (an AMD ``s_barrier``
    does not wait for loads in flight), so the stores are predicated on a reduction over all the
    loaded words: no thread can store before every thread's loads have returned. ``ordering_zero``
    is 0 at run time, unknown to the compiler, so the dependency cannot be folded away.
    """
    everything = tl.max(tl.max(rows, axis=1), axis=0)
    return mask & ((everything & ordering_zero) == 0)


@triton.jit
def _segments_before(segment_lens, first_segment, seg_stride, BLOCK: tl.constexpr):
    """Lanes of the segments before ``first_segment``: the start of a program's first segment."""
    total = tl.zeros([BLOCK], dtype=tl.int64)
    for start in range(0, first_segment, BLOCK):
        ids = start + tl.arange(0, BLOCK)
        total += tl.load(segment_lens + ids * seg_stride, mask=ids < first_segment, other=0).to(tl.int64)
    return tl.sum(total, axis=0)


@triton.jit
def _move_long_segment(
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
    """Move lanes [lane, end), one segment longer than LANE_BLOCK, in every buffer of the launch
    (tile ``cols``) through the scratch rows of its lanes: all sources of a buffer are staged before
    any target is written. A scratch word is stored and loaded back through the same pointer
    expression, hence by the same thread (no cross-thread visibility needed between the passes)."""
    col_ok = (cols < ROW_WORDS)[None, :]
    for buffer in range(0, num_buffers):
        base = _buffer_words(ptr_table, buffer, WORD, ALIGNED)
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
    PREFIX_BLOCK: tl.constexpr,
    LONG_SEGMENTS: tl.constexpr,
):
    # Grid (segment runs, buffers, tiles): program (p, b, t) moves tile t of buffer b for segments
    # [p * segments_per_program, ...) in chunks of whole segments of at most LANE_BLOCK lanes.
    buffer = tl.program_id(1)
    cols = tl.program_id(2) * TILE_WORDS + tl.arange(0, TILE_WORDS)
    col_ok = (cols < ROW_WORDS)[None, :]
    base = _buffer_words(ptr_table, buffer, WORD, ALIGNED)
    segment = tl.program_id(0) * segments_per_program
    segment_end = tl.minimum(segment + segments_per_program, num_segments)
    lane = _segments_before(segment_lens, segment, seg_stride, PREFIX_BLOCK)
    while segment < segment_end:
        ids = segment + tl.arange(0, LANE_BLOCK)
        in_run = ids < segment_end
        lengths = tl.load(segment_lens + ids * seg_stride, mask=in_run, other=0).to(tl.int64)
        ends = tl.cumsum(lengths, axis=0)
        fits = in_run & (ends <= LANE_BLOCK)
        taken = tl.sum(fits.to(tl.int32), axis=0)
        chunk = tl.max(tl.where(fits, ends, 0), axis=0)
        first_length = tl.sum(tl.where(ids == segment, lengths, 0), axis=0)
        if taken > 0:
            lanes = lane + tl.arange(0, LANE_BLOCK).to(tl.int64)
            chunk_end = tl.minimum(lane + chunk, num_lanes)  # lengths summing past N are unchecked
            tgt, src, moved = _lane_slots(
                tgt_loc, src_loc, lanes, chunk_end, num_slots, tgt_stride, src_stride
            )
            mask = moved[:, None] & col_ok
            rows = tl.load(_row_words(base, src, cols, STRIDE_WORDS), mask=mask)
            written = _once_every_row_is_read(mask, rows, ordering_zero)
            tl.store(_row_words(base, tgt, cols, STRIDE_WORDS), rows, mask=written)
            lane += chunk
            segment += taken
        else:
            if LONG_SEGMENTS:  # noqa: SIM102 (a constexpr test: the branch compiles away)
                if buffer == 0:  # one program stages the segment for every buffer of the launch
                    _move_long_segment(
                        ptr_table,
                        tgt_loc,
                        src_loc,
                        scratch,
                        lane,
                        tl.minimum(lane + first_length, num_lanes),
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
    base = _buffer_words(ptr_table, buffer, WORD, ALIGNED)
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
    width,
    num_requests,
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
    BLOCK: tl.constexpr,
):
    # Lane b*W + j: accepted node j of request b moves from its draft slot to committed position
    # seq_lens[b] + j. Every index is bound-checked before it is used; a lane failing any check is -1.
    for start in range(tl.program_id(0) * BLOCK, num_lanes, tl.num_programs(0) * BLOCK):
        lanes = start + tl.arange(0, BLOCK).to(tl.int64)
        in_range = lanes < num_lanes
        request = lanes // width
        j = lanes % width
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
            & (row < num_requests)
            & (column >= 0)
            & (column < pool_len)
        )
        target = tl.load(
            req_to_token + row * pool_row_stride + column * pool_col_stride, mask=accepted, other=-1
        )
        source = tl.load(out_cache_loc + node * loc_stride, mask=accepted, other=-1)
        tl.store(tgt_loc + lanes * tgt_stride, tl.where(accepted, target.to(tl.int64), -1), mask=in_range)
        tl.store(src_loc + lanes * src_stride, tl.where(accepted, source.to(tl.int64), -1), mask=in_range)


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


# Keyed by the identity of the KVBuffers' pointer table (built once per KVBuffers, never reallocated
# while in use): the layout is computed on the first move only.
_layouts: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _layout(buffers: list[torch.Tensor], ptr_table: torch.Tensor, vectorizable: bool) -> _Layout:
    layout = _layouts.get(ptr_table)
    if layout is not None:
        return layout
    element = buffers[0].element_size()
    row_bytes = buffers[0].shape[1:].numel() * element
    num_slots = buffers[0].shape[0]
    stride_bytes = [b.stride(0) * element if num_slots > 1 else row_bytes for b in buffers]
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
    _layouts[ptr_table] = layout
    return layout


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def _tile_words(config: LaunchConfig, lanes: int, layout: _Layout) -> int:
    """Words per row tile: a program holds ``lanes`` rows of it, copy_block_bytes in all."""
    budget = _pow2_floor(config.copy_block_bytes // (lanes * layout.word_bytes))
    tile = min(budget, triton.next_power_of_2(layout.row_words))
    if layout.aligned:
        tile = max(tile, 4)  # one 16-byte vector
    return max(tile, triton.next_power_of_2(triton.cdiv(layout.row_words, config.max_grid)))


def _buffer_groups(layout: _Layout, group: int):
    """(pointer-table slice, slot stride in words) per launch: runs split into groups of ``group``."""
    for first, end, stride_words in layout.runs:
        for start in range(first, end, group):
            yield start, min(start + group, end), stride_words


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
    if segment_lens is None and num_lanes > _MAX_LANES:
        _move_one_large_segment(config, layout, ptr_table, num_slots, tgt_loc, src_loc)
        return
    if segment_lens is None:
        segment_lens = tgt_loc.new_full((1,), num_lanes)  # one short segment (shape-sized, graph-safe)
    num_segments = segment_lens.shape[0]
    if num_segments == 0:
        return
    typical = triton.next_power_of_2(triton.cdiv(num_lanes, num_segments))
    lane_block = min(max(typical, _MIN_LANES), _MAX_LANES)
    tile_words = _tile_words(config, lane_block, layout)
    num_tiles = triton.cdiv(layout.row_words, tile_words)
    long_segments = num_lanes > lane_block
    word_dtype, word = _WORDS[layout.word_bytes]
    # Scratch rows of the lanes of segments longer than lane_block (sized from shapes; rarely used).
    scratch = (
        torch.empty((num_lanes, layout.row_words), dtype=word_dtype, device=tgt_loc.device)
        if long_segments
        else ptr_table
    )
    for first, end, stride_words in _buffer_groups(layout, config.max_grid):
        num_buffers = end - first
        per_segment = num_buffers * num_tiles
        runs = min(max(triton.cdiv(_TARGET_PROGRAMS, per_segment), 1), num_segments, config.max_grid)
        segments_per_program = triton.cdiv(num_segments, runs)
        _move_kv_kernel[(triton.cdiv(num_segments, segments_per_program), num_buffers, num_tiles)](
            ptr_table[first:end],
            tgt_loc,
            src_loc,
            segment_lens,
            scratch,
            0,  # ordering_zero
            num_lanes,
            num_segments,
            segments_per_program,
            num_buffers,
            num_slots,
            tgt_loc.stride(0),
            src_loc.stride(0),
            segment_lens.stride(0),
            WORD=word,
            ALIGNED=layout.aligned,
            ROW_WORDS=layout.row_words,
            STRIDE_WORDS=stride_words,
            TILE_WORDS=tile_words,
            LANE_BLOCK=lane_block,
            PREFIX_BLOCK=config.block,
            LONG_SEGMENTS=long_segments,
            num_warps=config.copy_num_warps,
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
    group = max(1, min(_MAX_STAGE_BYTES // (num_lanes * row_bytes), config.max_grid))
    tile_words = _tile_words(config, _MIN_LANES, layout)
    num_tiles = triton.cdiv(layout.row_words, tile_words)
    lane_blocks = min(triton.cdiv(num_lanes, _MIN_LANES), config.max_grid)
    scratch = torch.empty(
        (min(group, len(ptr_table)), num_lanes, layout.row_words), dtype=word_dtype, device=tgt_loc.device
    )
    for first, end, stride_words in _buffer_groups(layout, group):
        for to_scratch in (True, False):
            _stage_rows_kernel[(lane_blocks, end - first, num_tiles)](
                ptr_table[first:end],
                tgt_loc,
                src_loc,
                scratch,
                num_lanes,
                num_slots,
                tgt_loc.stride(0),
                src_loc.stride(0),
                TO_SCRATCH=to_scratch,
                WORD=word,
                ALIGNED=layout.aligned,
                ROW_WORDS=layout.row_words,
                STRIDE_WORDS=stride_words,
                TILE_WORDS=tile_words,
                LANE_BLOCK=_MIN_LANES,
                num_warps=config.copy_num_warps,
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
    num_requests, pool_len = req_to_token.shape
    grid = (min(triton.cdiv(num_lanes, config.block), config.max_grid),)
    _accept_locs_kernel[grid](
        req_pool_indices,
        req_to_token,
        seq_lens,
        num_correct_drafts,
        accept_index,
        out_cache_loc,
        tgt_loc,
        src_loc,
        num_lanes,
        accept_index.shape[1],
        num_requests,
        pool_len,
        out_cache_loc.shape[0],
        req_pool_indices.stride(0),
        req_to_token.stride(0),
        req_to_token.stride(1),
        seq_lens.stride(0),
        num_correct_drafts.stride(0),
        accept_index.stride(0),
        accept_index.stride(1),
        out_cache_loc.stride(0),
        tgt_loc.stride(0),
        src_loc.stride(0),
        BLOCK=config.block,
        num_warps=config.num_warps,
    )


_PROVIDERS: dict[str, Callable[..., None]] = {
    "move_kv_cache": _move_kv_cache,
    "move_accept_tokens_to_target_kvcache": _accept_locs,
}


def register(vendor: str, config: LaunchConfig) -> list[str]:
    """Register the family B Triton providers of ``vendor``: every index dtype, every row layout
    (rows that are not 16-byte vectorizable move as narrower words), so nothing is declined."""
    for op, provider in _PROVIDERS.items():
        register_impl(op, vendor, TRITON, functools.partial(provider, config))
    return list(_PROVIDERS)
