"""Triton provider of A4 ``generate_draft_decode_kv_indices``: the draft decode attention indices."""

from __future__ import annotations

import functools

import triton
import triton.language as tl
from torch import Tensor

from ..config import LaunchConfig
from ..launch import Launch, cdiv, kernel
from ..sizing import copy_warps, pow2, scan_args, scan_shape, scanning_warps
from ._common import VALUE, draft_column, exclusive_offsets, load_rows, sum_before


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
    column = draft_column(seq, branch, step, PAGE_SIZE, STEPS)
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
        lengths, prefix = exclusive_offsets(
            first,
            num_branches,
            positions_ptr,
            positions_stride,
            positions_ptr,
            positions_stride,
            0,
            VALUE,
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
    row, row_ok = load_rows(rpi_ptr, rpi_stride, request, request < bs, num_rows)
    before = sum_before(
        request, seq_lens_ptr, seq_stride, seq_lens_ptr, seq_stride, 0, VALUE, SCAN_BLOCK, SCAN_CHUNKS
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
