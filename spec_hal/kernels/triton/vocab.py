"""The Triton providers of the four walks over a vocabulary row (the references:
``spec_hal/ops/sampling``): ``fast_topk`` and ``fast_sample`` with their kernels, and
``renorm_draft_probs`` and ``sample_draft_proposal``, whose softmax kernels are in ``softmax.py``.
Their launches are planned here, so that a warm call of any of the four passes one kernel module;
the keys, best sets and race noise the kernels share are ``device_math.py``'s.

One program per row (programs take several rows beyond ``config.max_grid``; few long rows are split
into chunks, below), streaming the row in blocks of the vendor's vocabulary tile
(``config.vocab_block_bytes``; its copy tile where it sets none, and from
``config.copy_tile_programs`` programs on).

The k largest *keys* of a row, where a key is an integer that orders like the float it comes from
(NaN above +inf, -0 equal to +0) and ties go to the lowest index. ``fast_sample`` ranks the
exponential race's scores ``float32(p) / max(E, tiny)`` (the reference's IEEE division), so a
provider given the same noise draws the same ids; keyed calls compute ``E = -log(u)`` from each
row's key in the kernel (``device_math.race_noise``), four lanes per Philox evaluation. For k = 1 each lane keeps its
best key (a strict comparison keeps its earliest index) and one reduction ends the row. For k > 1 a
register set of the k best entries is updated per block: the block's best key replaces the set's
worst entry while it beats it, a reduction each time, at most k per block and usually none once the
set has settled; the set is then written in order (its ranks from a ``[k, k]`` comparison). Above
``_MAX_TOP`` (registers) the launchers decline the call (their records' ``supports``): the registry
then serves it with another provider and records the fallback. Where the rows are too few to fill the device
(``config.row_programs`` programs) and long (``config.split_row_lanes``), each row is split into
chunks of whole tiles: a program per (chunk, row) keeps its chunk's best set and stores it, and a
second launch folds each row's sets in chunk order (index order, as blocks come) by the same steps,
then writes them. The k best of a row are the k best of its chunks' best, and keys are exact, so
every tile and split gives the same ids.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from .config import LaunchConfig
from .device_math import (
    FLOAT32_TINY,
    KEY32_MAX,
    KEY32_MIN,
    KEY64_MAX,
    KEY64_MIN,
    NO_INDEX,
    chunk_lanes,
    ordered_key,
    race_noise,
    row_key,
    single_best,
)
from .launch import Launch, cdiv, kernel, next_power_of_2
from .launcher import Launcher
from .sizing import walk_tile
from .softmax import _softmax_chunk_kernel, _softmax_kernel, _softmax_stats_kernel

#: Largest k (``fast_topk``) and num_samples (``fast_sample``) of the kernel: its set of the k best
#: entries lives in registers, and their ranks come from a [k, k] comparison.
_MAX_TOP = 64


def _declines_past_max_top(variant: tuple[Any, ...] | None) -> str | None:
    """More than 64 entries a row (the kernel's register set): served by the next provider.

    The launchers' ``supports``: the variant is the entries asked a row (``fast_topk``'s ``(k,)``,
    ``fast_sample``'s ``(num_samples,)``); None (no call's variant: ``spec-hal info``) is served."""
    if variant is None or variant[0] <= _MAX_TOP:
        return None
    (count,) = variant
    return f"the kernel keeps at most {_MAX_TOP} best entries a row in registers; {count} asked"


# --------------------------------------------------------------------------------------------------
# Keys and the best entries of a row


@triton.jit
def _key_bounds(WIDE: tl.constexpr):
    """(below every key, the largest key) in the key type."""
    if WIDE:
        lowest = tl.full((), KEY64_MIN, tl.int64)
        highest = tl.full((), KEY64_MAX, tl.int64)
    else:
        lowest = tl.full((), KEY32_MIN, tl.int32)
        highest = tl.full((), KEY32_MAX, tl.int32)
    return lowest, highest


@triton.jit
def _lane_best(best_key, best_index, keys, offsets):
    """Per lane, the larger key; a tie keeps the lane's earlier (lower) index."""
    better = keys > best_key
    return tl.where(better, keys, best_key), tl.where(better, offsets, best_index)


@triton.jit
def _worst(top_keys, top_index, valid, key_max):
    """The entry of the best set a better one replaces: its smallest key, and among equal keys the
    highest index (the lower ones came first: they win the tie)."""
    worst_key = tl.min(tl.where(valid, top_keys, key_max), 0)
    worst_index = tl.max(tl.where(valid & (top_keys == worst_key), top_index, -NO_INDEX), 0)
    return worst_key, worst_index


@triton.jit
def _insert_block(keys, offsets, top_keys, top_index, valid, worst_key, worst_index, key_min, key_max):
    """Move the block's entries that beat the set's worst into the best set, best first. Blocks come
    in index order, so an entry tied with the worst has a higher index than it and stays out."""
    best = tl.max(keys, 0)
    while best > worst_key:
        at = tl.min(tl.where(keys == best, offsets, NO_INDEX), 0)
        replaced = valid & (top_keys == worst_key) & (top_index == worst_index)
        top_keys = tl.where(replaced, best, top_keys)
        top_index = tl.where(replaced, at, top_index)
        keys = tl.where(offsets == at, key_min, keys)
        worst_key, worst_index = _worst(top_keys, top_index, valid, key_max)
        best = tl.max(keys, 0)
    return top_keys, top_index, worst_key, worst_index


@triton.jit
def _block_keys(
    src_row, stride_n, noise_row, noise_stride, key, start, n, key_min, RACE: tl.constexpr, KEYED: tl.constexpr,
    WIDE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """(indices, keys) of lanes ``start + [0, BLOCK)``: keys of the values, or of the race scores
    ``float32(p) / max(E, tiny)`` when ``RACE``; lanes past ``n`` get ``key_min``."""
    offsets = start + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(src_row + offsets.to(tl.int64) * stride_n, mask=inside, other=0)
    if RACE:
        noise = race_noise(noise_row, 0, noise_stride, key, offsets, inside, start, KEYED, BLOCK)
        x = tl.div_rn(x.to(tl.float32), tl.maximum(noise, FLOAT32_TINY))
    elif not WIDE:
        x = x.to(tl.float32)
    return offsets, tl.where(inside, ordered_key(x, WIDE), key_min)


@triton.jit
def _row_start(ptr, stride_outer, stride_inner, row, inner):
    """The first element of row ``row`` of a tensor seen as ``[outer, inner, n]``."""
    outer = row // inner
    return ptr + outer * stride_outer + (row - outer * inner) * stride_inner


@triton.jit
def _empty_set(k, key_min, key_max, TOP: tl.constexpr):
    """A best set before any entry: (its slots below k, keys, ids, worst key, worst id);
    placeholders hold distinct negative ids below every key (a worst entry is one slot)."""
    slots = tl.arange(0, TOP)
    valid = slots < k
    top_keys = tl.zeros([TOP], key_min.dtype) + key_min
    top_index = -1 - slots
    worst_key, worst_index = _worst(top_keys, top_index, valid, key_max)
    return valid, top_keys, top_index, worst_key, worst_index


@triton.jit
def _best_of_range(
    src_row, stride_n, noise_ptr, noise_stride_o, noise_stride, seeds_ptr, positions_ptr, step, row, begin, end,
    k, RACE: tl.constexpr, KEYED: tl.constexpr, WIDE: tl.constexpr, TOP: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """The k best entries of lanes ``[begin, end)`` of row ``row`` (``src_row``), as (keys, ids),
    ``[TOP]`` each: for ``TOP == 1`` the best key and its lowest index; else the set in no order,
    slots past k (and those a range of fewer than k lanes leaves) holding placeholders: distinct
    negative ids below every key."""
    key_min, key_max = _key_bounds(WIDE)
    noise_row = noise_ptr
    if RACE and not KEYED:  # [B, V] noise rows: inner == 1
        noise_row = noise_ptr + row * noise_stride_o
    key = row_key(seeds_ptr, positions_ptr, row, step, KEYED)
    if TOP == 1:
        best_key = tl.zeros([BLOCK], key_min.dtype) + key_min
        best_index = tl.zeros([BLOCK], tl.int32) - 1
        for start in range(begin, end, BLOCK):
            offsets, keys = _block_keys(
                src_row, stride_n, noise_row, noise_stride, key, start, end, key_min, RACE, KEYED, WIDE, BLOCK
            )
            best_key, best_index = _lane_best(best_key, best_index, keys, offsets)
        top_keys, top_index = single_best(best_key, best_index, TOP)
    else:
        valid, top_keys, top_index, worst_key, worst_index = _empty_set(k, key_min, key_max, TOP)
        for start in range(begin, end, BLOCK):
            offsets, keys = _block_keys(
                src_row, stride_n, noise_row, noise_stride, key, start, end, key_min, RACE, KEYED, WIDE, BLOCK
            )
            top_keys, top_index, worst_key, worst_index = _insert_block(
                keys, offsets, top_keys, top_index, valid, worst_key, worst_index, key_min, key_max
            )
    return top_keys, top_index


@triton.jit
def _write_top(
    src_row, stride_n, values_ptr, values_stride_o, values_stride_i, values_stride_k,
    index_ptr, index_stride_o, index_stride_i, index_stride_k, row, inner, top_keys, top_index, k,
    TOP: tl.constexpr,
):  # fmt: skip
    """A row's k best (:func:`_best_of_range`'s set) written in order: their values and ids."""
    slots = tl.arange(0, TOP)
    valid = slots < k
    if TOP == 1:
        rank = slots
    else:
        # rank of entry i: the entries before it (larger key, or equal key and lower index)
        before = (top_keys[None, :] > top_keys[:, None]) | (
            (top_keys[None, :] == top_keys[:, None]) & (top_index[None, :] < top_index[:, None])
        )
        rank = tl.sum((valid[None, :] & before).to(tl.int32), 1)
    value = tl.load(src_row + top_index.to(tl.int64) * stride_n, mask=valid)
    values_row = _row_start(values_ptr, values_stride_o, values_stride_i, row, inner)
    tl.store(values_row + rank * values_stride_k, value, mask=valid)
    index_row = _row_start(index_ptr, index_stride_o, index_stride_i, row, inner)
    tl.store(index_row + rank * index_stride_k, top_index.to(tl.int64), mask=valid)


@kernel
@triton.jit
def _top_kernel(
    src_ptr, src_stride_o, src_stride_i, src_stride_n,
    noise_ptr, noise_stride_o, noise_stride_n, seeds_ptr, positions_ptr, step,
    values_ptr, values_stride_o, values_stride_i, values_stride_k,
    index_ptr, index_stride_o, index_stride_i, index_stride_k,
    rows, inner, n, k,
    RACE: tl.constexpr, KEYED: tl.constexpr, WIDE: tl.constexpr, TOP: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Row r = (r // inner, r % inner) of ``src`` viewed as ``[outer, inner, n]``: its k best ids
    (``TOP`` = next power of two of k) and their values, in order, into ``[outer, inner, k]``."""
    for program_row in range(tl.program_id(0), rows, tl.num_programs(0)):
        row = tl.zeros((), tl.int64) + program_row
        src_row = _row_start(src_ptr, src_stride_o, src_stride_i, row, inner)
        top_keys, top_index = _best_of_range(
            src_row, src_stride_n, noise_ptr, noise_stride_o, noise_stride_n, seeds_ptr, positions_ptr, step, row,
            0, n, k, RACE, KEYED, WIDE, TOP, BLOCK,
        )  # fmt: skip
        _write_top(
            src_row, src_stride_n, values_ptr, values_stride_o, values_stride_i, values_stride_k, index_ptr,
            index_stride_o, index_stride_i, index_stride_k, row, inner, top_keys, top_index, k, TOP,
        )  # fmt: skip


@kernel
@triton.jit
def _top_chunk_kernel(
    src_ptr, src_stride_o, src_stride_i, src_stride_n,
    noise_ptr, noise_stride_o, noise_stride_n, seeds_ptr, positions_ptr, step,
    sets_ptr, sets_stride, rows, inner, n, k, chunk,
    RACE: tl.constexpr, KEYED: tl.constexpr, WIDE: tl.constexpr, TOP: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Program (c, q): the k best of chunk c (lanes ``[c * chunk, (c + 1) * chunk)``) of rows q,
    q + grid, ..., stored in the row's sets: ``[2, chunks, TOP]`` int64, the keys then the ids."""
    chunk_id = tl.program_id(0)
    num_chunks = tl.num_programs(0)
    begin, end = chunk_lanes(chunk_id, chunk, n)
    slots = tl.arange(0, TOP)
    for program_row in range(tl.program_id(1), rows, tl.num_programs(1)):
        row = tl.zeros((), tl.int64) + program_row
        src_row = _row_start(src_ptr, src_stride_o, src_stride_i, row, inner)
        top_keys, top_index = _best_of_range(
            src_row, src_stride_n, noise_ptr, noise_stride_o, noise_stride_n, seeds_ptr, positions_ptr, step, row,
            begin, end, k, RACE, KEYED, WIDE, TOP, BLOCK,
        )  # fmt: skip
        sets_row = sets_ptr + row * sets_stride + chunk_id * TOP + slots
        tl.store(sets_row, top_keys.to(tl.int64))
        tl.store(sets_row + num_chunks * TOP, top_index.to(tl.int64))


@kernel
@triton.jit
def _top_merge_kernel(
    src_ptr, src_stride_o, src_stride_i, src_stride_n,
    values_ptr, values_stride_o, values_stride_i, values_stride_k,
    index_ptr, index_stride_o, index_stride_i, index_stride_k,
    sets_ptr, sets_stride, rows, inner, num_chunks, k,
    WIDE: tl.constexpr, TOP: tl.constexpr, CHUNKS: tl.constexpr,
):  # fmt: skip
    """Each row's k best from its chunks' sets (``CHUNKS``: a power of two >= the chunks), written as
    :func:`_top_kernel` writes them, their values read from ``src``. The sets: ``[2, chunks, TOP]``
    int64 of :func:`_top_chunk_kernel`, or (``TOP == 1``) the int32 race entries of
    :func:`_softmax_chunk_kernel`, whose values are the written q. Chunks come in index order, as a
    row's blocks do, so the sets fold into one by the same steps that fold blocks."""
    key_min, key_max = _key_bounds(WIDE)
    slots = tl.arange(0, TOP)
    for program_row in range(tl.program_id(0), rows, tl.num_programs(0)):
        row = tl.zeros((), tl.int64) + program_row
        sets_row = sets_ptr + row * sets_stride
        if TOP == 1:
            chunks = tl.arange(0, CHUNKS)
            inside = chunks < num_chunks
            keys = tl.load(sets_row + chunks, mask=inside, other=key_min).to(key_min.dtype)
            ids = tl.load(sets_row + num_chunks + chunks, mask=inside, other=-1).to(tl.int32)
            top_keys, top_index = single_best(keys, ids, TOP)
        else:
            valid, top_keys, top_index, worst_key, worst_index = _empty_set(k, key_min, key_max, TOP)
            for chunk_id in range(num_chunks):
                keys = tl.load(sets_row + chunk_id * TOP + slots).to(key_min.dtype)
                ids = tl.load(sets_row + (num_chunks + chunk_id) * TOP + slots).to(tl.int32)
                top_keys, top_index, worst_key, worst_index = _insert_block(
                    keys, ids, top_keys, top_index, valid, worst_key, worst_index, key_min, key_max
                )
        src_row = _row_start(src_ptr, src_stride_o, src_stride_i, row, inner)
        _write_top(
            src_row, src_stride_n, values_ptr, values_stride_o, values_stride_i, values_stride_k, index_ptr,
            index_stride_o, index_stride_i, index_stride_k, row, inner, top_keys, top_index, k, TOP,
        )  # fmt: skip


#: ``(outer, inner, (stride outer, stride inner, stride along dim))`` of a tensor seen as rows.
_Rows = tuple[int, int, tuple[int, int, int]]


def _rows(tensor: torch.Tensor, dim: int) -> _Rows | None:
    """``tensor`` seen as ``[outer, inner, size of dim]`` rows along ``dim``, or None where its
    strides allow no such view. Matrices along their last dimension (the usual call) are read off
    the strides; other layouts try a view."""
    dim %= tensor.dim()
    if tensor.dim() <= 2 and dim == tensor.dim() - 1:
        return (tensor.shape[0] if dim else 1), 1, (tensor.stride()[0] if dim else 0, 0, tensor.stride(dim))
    outer = math.prod(tensor.shape[:dim])
    inner = math.prod(tensor.shape[dim + 1 :])
    try:
        view = tensor.movedim(dim, -1).view(outer, inner, tensor.shape[dim])
    except RuntimeError:
        return None
    stride_outer, stride_inner, stride_along = view.stride()
    return outer, inner, (stride_outer, stride_inner, stride_along)


def _launch_top(
    config: LaunchConfig,
    src: torch.Tensor,
    src_rows: _Rows,
    n: int,
    race: Race | None,
    k: int,
    out_values: torch.Tensor,
    out_indices: torch.Tensor,
    out_rows: tuple[_Rows, _Rows],
) -> None:
    """The k best of each of ``src``'s rows of ``n``, or of their race (``[outer, n]`` rows)."""
    outer, inner, src_strides = src_rows
    rows = outer * inner
    if rows == 0:
        return
    keyed = race is not None and race.noise is None
    top = next_power_of_2(k)
    launches = _top_launches(
        config, rows, n, race is not None, keyed, src.dtype == torch.float64 and not race, top
    )
    source = (src, *src_strides)
    noise_args = race_arguments(race)
    outputs = (out_values, *out_rows[0][2], out_indices, *out_rows[1][2])
    if len(launches.launches) == 1:
        launches.launches[0](*source, *noise_args, *outputs, rows, inner, n, k)
        return
    split, merge = launches.launches
    columns = 2 * launches.num_chunks * top
    sets = torch.empty(rows, columns, dtype=torch.int64, device=src.device)
    split(*source, *noise_args, sets, columns, rows, inner, n, k, launches.chunk)
    merge(*source, *outputs, sets, columns, rows, inner, launches.num_chunks, k)


#: Fewest vocabulary blocks in a chunk of a split row: a chunk's program also keeps and stores a
#: best set, and the merge reads one set per chunk.
MIN_CHUNK_BLOCKS = 2


class WalkLaunches(NamedTuple):
    """The launches of a walk over rows (:func:`_top_launches`, :func:`_softmax_launches`): one (a
    program per row), or those of split rows (a launch per chunk and row, then the folds)."""

    launches: tuple[Launch, ...]
    #: Lanes of a chunk and chunks per row (split rows; else the row, one).
    chunk: int
    num_chunks: int


class Race(NamedTuple):
    """The exponential race's noise: drawn (``noise``, ``[B, V]``), or keyed (``noise`` None): each
    row's contiguous seed and position, and the step."""

    noise: torch.Tensor | None
    seeds: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    step: int = 0


def make_race(
    noise: torch.Tensor | None, seeds: torch.Tensor | None, positions: torch.Tensor | None, step: int
) -> Race:
    if noise is not None:
        return Race(noise)
    assert seeds is not None and positions is not None  # the contract passes one or the other
    return Race(None, seeds.contiguous(), positions.contiguous(), step)


def race_arguments(race: Race | None) -> tuple[object, ...]:
    """The noise arguments of the race kernels: (noise, its two strides, seeds, positions, step)."""
    if race is None:
        return (None, 0, 0, None, None, 0)
    strides = race.noise.stride() if race.noise is not None else (0, 0)
    return (race.noise, *strides, race.seeds, race.positions, race.step)


@functools.lru_cache(maxsize=1024)
def _top_launches(
    config: LaunchConfig, rows: int, n: int, race: bool, keyed: bool, wide: bool, top: int
) -> WalkLaunches:
    """A program per row walking it whole, where the rows fill the device (``config.row_programs``
    programs) or are shorter than ``config.split_row_lanes``; else each row split into chunks of
    whole blocks, one program per (chunk, row) storing its chunk's best set, and a launch merging
    each row's sets: few rows would leave most of the device idle, each program reading a whole
    row. Blocks of the vocabulary tile, or of the copy tile from ``config.copy_tile_programs``
    programs on (counted in the copy tile)."""
    grid_rows = min(rows, config.max_grid)
    block, num_warps = walk_tile(config, n, copy_tile=True)
    chunk, num_chunks = _walk_chunks(config, rows, n, block)
    if num_chunks * grid_rows < config.copy_tile_programs:
        block, num_warps = walk_tile(config, n)
        chunk, num_chunks = _walk_chunks(config, rows, n, block)
    constexprs = {
        "RACE": race,
        "KEYED": keyed,
        "WIDE": wide,
        "TOP": top,
        "BLOCK": block,
        "num_warps": num_warps,
    }
    if num_chunks == 1:
        return WalkLaunches((_top_kernel.at((grid_rows,), **constexprs),), n, 1)
    split = _top_chunk_kernel.at((num_chunks, grid_rows), **constexprs)
    return WalkLaunches((split, merge_launch(grid_rows, wide, top, num_chunks)), chunk, num_chunks)


def merge_launch(grid_rows: int, wide: bool, top: int, num_chunks: int) -> Launch:
    """The launch of :func:`_top_merge_kernel` folding each row's ``num_chunks`` sets, a warp a row."""
    return _top_merge_kernel.at(
        (grid_rows,), WIDE=wide, TOP=top, CHUNKS=next_power_of_2(num_chunks), num_warps=1
    )


def _walk_chunks(config: LaunchConfig, rows: int, n: int, block: int, fewest: int = 2) -> tuple[int, int]:
    """(lanes of a chunk, chunks per row) of a split walk in blocks of ``block`` lanes, at least
    ``fewest`` chunks a row (``(n, 1)``: rows whole)."""
    chunks_per_row = min(cdiv(config.row_programs, rows), n // (MIN_CHUNK_BLOCKS * block))
    if chunks_per_row < fewest or n < config.split_row_lanes:
        return n, 1
    chunk = cdiv(cdiv(n, chunks_per_row), block) * block
    return chunk, cdiv(n, chunk)


def _fast_topk(
    config: LaunchConfig,
    values: torch.Tensor,
    k: int,
    dim: int,
    out_values: torch.Tensor,
    out_indices: torch.Tensor,
) -> None:
    src_rows = _rows(values, dim)
    if src_rows is None:
        values = values.contiguous()
        src_rows = _rows(values, dim)
        assert src_rows is not None
    values_rows, index_rows = _rows(out_values, dim), _rows(out_indices, dim)
    if values_rows is None or index_rows is None:  # outputs with unusual strides: through a copy
        staged_values, staged_indices = torch.empty_like(out_values), torch.empty_like(out_indices)
        _fast_topk(config, values, k, dim, staged_values, staged_indices)
        out_values.copy_(staged_values)
        out_indices.copy_(staged_indices)
        return
    n = values.shape[dim]
    _launch_top(config, values, src_rows, n, None, k, out_values, out_indices, (values_rows, index_rows))


def _fast_sample(
    config: LaunchConfig,
    probs: torch.Tensor,
    exp_noise: torch.Tensor | None,
    seeds: torch.Tensor | None,
    positions: torch.Tensor | None,
    step: int,
    num_samples: int,
    out_probs: torch.Tensor,
    out_indices: torch.Tensor,
) -> None:
    rows = (_rows(probs, 1), _rows(out_probs, 1), _rows(out_indices, 1))  # matrices: never None
    assert rows[0] is not None and rows[1] is not None and rows[2] is not None
    _launch_top(
        config,
        probs,
        rows[0],
        probs.shape[1],
        make_race(exp_noise, seeds, positions, step),
        num_samples,
        out_probs,
        out_indices,
        (rows[1], rows[2]),
    )


# --------------------------------------------------------------------------------------------------
# The softmax walks of renorm_draft_probs and sample_draft_proposal (their kernels: softmax.py)


#: The softmax splits rows only where each takes this many chunks or more, without and with sampling.
#: Without, rows fewer than about one a multiprocessor (with the vendors' row_programs): with more
#: rows, the device gained nothing for the launch and the scratch the split adds of host time. With
#: sampling, the race's work per lane makes one program's walk slow enough that 2 chunks a row gained
#: too. From an H200 A/B at 128k (docs/bench/history/ab-split-softmax-h200-9639135.json).
_SOFTMAX_FEWEST_CHUNKS = (8, 2)


def _softmax_chunks(config: LaunchConfig, vocab: int, block: int) -> tuple[int, int]:
    """(lanes, count) of the chunks over which a row's softmax sum is taken: rows shorter than
    ``config.split_row_lanes`` in one, longer ones in chunks of ``MIN_CHUNK_BLOCKS`` tiles. A
    function of the row's length alone: whether a launch splits the rows (which depends on the batch)
    changes who sums a chunk, never the sum."""
    chunk = MIN_CHUNK_BLOCKS * block
    if vocab < config.split_row_lanes or vocab < 2 * chunk:
        return vocab, 1
    return chunk, cdiv(vocab, chunk)


@functools.lru_cache(maxsize=1024)
def _softmax_launches(
    config: LaunchConfig,
    rows: int,
    vocab: int,
    has_temperatures: bool,
    sample: bool,
    has_top_ks: bool,
    keyed: bool,
) -> WalkLaunches:
    """A program per row walking it twice in the vocabulary tile; where few long rows would leave the
    device idle (fewer than ``_SOFTMAX_FEWEST_CHUNKS`` programs per row in ``config.row_programs``),
    each row in its chunks (:func:`_softmax_chunks`): a launch storing each chunk's max and sum, one
    folding those and writing q (and each chunk's best race entry), and for sampling the merge of
    ``fast_sample``'s split, which reads ``q[x]`` from the written q."""
    block, num_warps = walk_tile(config, vocab)
    chunk, num_chunks = _softmax_chunks(config, vocab, block)
    fewest = _SOFTMAX_FEWEST_CHUNKS[sample]
    flags = {"HAS_TEMPERATURES": has_temperatures, "BLOCK": block, "num_warps": num_warps}
    grid_rows = min(rows, config.max_grid)
    race = {"SAMPLE": sample, "KEYED": keyed, "HAS_TOP_KS": has_top_ks, "CHUNKS": next_power_of_2(num_chunks)}
    if vocab // chunk < fewest or cdiv(config.row_programs, rows) < fewest:
        return WalkLaunches((_softmax_kernel.at((grid_rows,), **race, **flags),), chunk, num_chunks)
    stats = _softmax_stats_kernel.at((num_chunks, grid_rows), **flags)
    chunks = _softmax_chunk_kernel.at((num_chunks, grid_rows), **race, **flags)
    merge = merge_launch(grid_rows, False, 1, num_chunks)
    return WalkLaunches((stats, chunks, merge) if sample else (stats, chunks), chunk, num_chunks)


def _launch_softmax(
    config: LaunchConfig,
    logits: torch.Tensor,
    temperatures: torch.Tensor | None,
    q: torch.Tensor,
    sample: tuple[torch.Tensor | None, Race, torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """``sample``: (top_ks, the race's noise, q_x, x) of ``sample_draft_proposal``."""
    batch, vocab = logits.shape
    if batch == 0:
        return
    top_ks, race, q_x, x = sample if sample is not None else (None, None, None, None)
    keyed = race is not None and race.noise is None
    launches, chunk, num_chunks = _softmax_launches(
        config, batch, vocab, temperatures is not None, sample is not None, top_ks is not None, keyed
    )
    source = (
        logits, *logits.stride(), temperatures, 0 if temperatures is None else temperatures.stride()[0],
    )  # fmt: skip
    race_args = (top_ks, 0 if top_ks is None else top_ks.stride()[0], *race_arguments(race))
    if len(launches) == 1:
        launches[0](
            *source, *race_args, q, *q.stride(), q_x, 0 if q_x is None else q_x.stride()[0], x,
            0 if x is None else x.stride()[0], batch, vocab, chunk, num_chunks,
        )  # fmt: skip
        return
    # One int32 scratch a row: for sampling, the chunks' race entries in columns [0, 2 * chunks)
    # (their keys, then their ids: the merge's sets), then the chunks' stats in the next 2 * chunks
    # (their maxima, then their sums, as float32 bits).
    stats_column = 2 * num_chunks if sample is not None else 0
    columns = stats_column + 2 * num_chunks
    scratch = torch.empty(batch, columns, dtype=torch.int32, device=logits.device)
    launches[0](*source, scratch, columns, stats_column, batch, vocab, chunk)
    launches[1](*source, *race_args, q, *q.stride(), scratch, columns, stats_column, batch, vocab, chunk)
    if sample is not None:
        assert q_x is not None and x is not None
        # q read back at x: [B, V] rows (inner 1); q_x and x as [B, 1].
        launches[2](
            q, q.stride()[0], 0, q.stride()[1], q_x, q_x.stride()[0], 0, 0, x, x.stride()[0], 0, 0,
            scratch, columns, batch, 1, num_chunks, 1,
        )  # fmt: skip


def _renorm_draft_probs(
    config: LaunchConfig, logits: torch.Tensor, temperatures: torch.Tensor | None, probs: torch.Tensor
) -> None:
    _launch_softmax(config, logits, temperatures, probs)


def _sample_draft_proposal(
    config: LaunchConfig,
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    top_ks: torch.Tensor | None,
    exp_noise: torch.Tensor | None,
    seeds: torch.Tensor | None,
    positions: torch.Tensor | None,
    step: int,
    out_q: torch.Tensor,
    out_q_x: torch.Tensor,
    out_x: torch.Tensor,
) -> None:
    race = make_race(exp_noise, seeds, positions, step)
    _launch_softmax(config, logits, temperatures, out_q, (top_ks, race, out_q_x, out_x))


#: ``renorm_draft_probs``'s launcher; ``sample_draft_proposal``'s has the same facts. Coverage: one
#: long row, which the softmax splits into chunks on every vendor (the bench's 64 rows of 128k take
#: 8 chunks a row only with hopper's row_programs).
_RENORM_DRAFT_PROBS = Launcher(
    "renorm_draft_probs",
    _renorm_draft_probs,
    tile="vocabulary",
    wants_vocabulary_tile=True,
    coverage_sizes=({"vocab": 131072, "bs": 1},),
)


# --------------------------------------------------------------------------------------------------

#: The family's launchers of this module.
LAUNCHERS: tuple[Launcher, ...] = (
    # Rows enough to fill the device: one program walks each, where the bench's batches split them;
    # one long row: too few programs for the copy tile, split into chunks of the vocabulary tile.
    Launcher(
        "fast_topk",
        _fast_topk,
        tile="vocabulary",
        supports=_declines_past_max_top,
        coverage_sizes=({"topk": 4, "vocab": 32768, "bs": 2048}, {"topk": 4, "vocab": 131072, "bs": 1}),
    ),
    Launcher(
        "fast_sample",
        _fast_sample,
        tile="vocabulary",
        supports=_declines_past_max_top,
        wants_vocabulary_tile=True,
        coverage_sizes=({"vocab": 131072, "bs": 1},),
    ),
    _RENORM_DRAFT_PROBS,
    dataclasses.replace(_RENORM_DRAFT_PROBS, op="sample_draft_proposal", launch=_sample_draft_proposal),
)
