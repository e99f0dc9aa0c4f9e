"""Triton providers of ``move_kv_cache`` (the move and staging kernels, the buffers' layout and the
launch plan) and of ``move_accept_tokens_to_target_kvcache``'s slot lists (kernel: ``accept.py``),
which its contract moves next."""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..config import LaunchConfig
from ..launch import Launch, cdiv, kernel, next_power_of_2
from ..sizing import (
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
from ._common import (
    WORDS,
    buffer_words,
    lane_slots,
    move_blocks,
    move_held_segment,
    next_chunk,
    row_word_pointers,
    run_lengths,
    segments_before,
    stage_long_segment,
    staged_words,
)
from .accept import _accept_locs_kernel


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
    lengths = run_lengths(segment_lens, segment, segment_end, seg_stride, num_lanes, LANE_BLOCK, SEGMENTED)
    lane = segments_before(segment_lens, segment, seg_stride, num_lanes, PREFIX_BLOCK, SEGMENTED)
    while segment < segment_end:
        taken, chunk, first_length = next_chunk(lengths, segment, segment_end, LANE_BLOCK)
        if taken > 0:
            chunk_end = tl.minimum(lane + chunk, num_lanes)  # lengths summing past N are unchecked
            tgt, src, moved = lane_slots(
                tgt_loc, src_loc, lane + row_lanes, chunk_end, num_slots, tgt_stride, src_stride
            )
            move_blocks(
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
                    move_held_segment(
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
                    stage_long_segment(
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
        lengths = run_lengths(
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
    base = buffer_words(ptr_table, buffer, buffer + 1, WORD, ALIGNED)
    staged_base = scratch + buffer.to(tl.int64) * num_lanes * ROW_WORDS
    step = tl.num_programs(0) * LANE_BLOCK
    for start in range(tl.program_id(0) * LANE_BLOCK, num_lanes, step):
        lanes = start + tl.arange(0, LANE_BLOCK).to(tl.int64)
        tgt, src, moved = lane_slots(tgt_loc, src_loc, lanes, num_lanes, num_slots, tgt_stride, src_stride)
        mask = moved[:, None] & col_ok
        staged = staged_words(staged_base, lanes, cols, ROW_WORDS)
        if TO_SCRATCH:
            tl.store(staged, tl.load(row_word_pointers(base, src, cols, STRIDE_WORDS), mask=mask), mask=mask)
        else:
            tl.store(row_word_pointers(base, tgt, cols, STRIDE_WORDS), tl.load(staged, mask=mask), mask=mask)


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
            WORD=WORDS[layout.word_bytes][1],
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
    word_dtype = WORDS[layout.word_bytes][0]
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
    word_dtype, word = WORDS[layout.word_bytes]
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
