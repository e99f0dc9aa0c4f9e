"""Family G (mamba state commit) in Triton: ``verify_commit_step_indices`` (G1),
``scatter_mamba_states_after_mtp_verify`` (G2) and ``commit_mamba_states_after_verify`` (G3, the
device op of G3 computing its own steps).

G1 is one elementwise launch over the batch. G2 is one launch for the SSM state and up to
:data:`_MAX_PARTS` - 1 conv states (more conv states take further launches of the same kernel): grid
(entry tiles, lanes, layers), lane r < bs commits row r into ``state_indices[r]``, lane bs + r tracks
it into ``mamba_track_indices[r]``. Every state tensor is a *part* with its own pointer, strides and
tile shape; the tile axis enumerates the tiles of all parts one after the other, so every program
copies one tile of one entry and the parts share the grid without idle programs. An entry is seen
as a 2-D ``[rows, cols]`` block (its source dims coalesced: a contiguous SSM entry is one row, a
strided conv window ``[channels, Kc-1]`` keeps its row stride), copied with 2-D tiles: no division
or other per-element index math, and contiguous rows vectorise. The destination entry is contiguous
(contract). A source entry that does not coalesce to two dims is read through a contiguous copy of
its buffer (for that part only; no layout in use needs it).

G3 is G2's launch with the steps computed inline (``STEPS_FROM_ACCEPT``): every program computes
its lane's step with G1's helpers (one more dependent load than reading a step: accept_lens, then
the accept_index entry), and the lane's program of tile 0 and layer 0 stores it. With more parts
than one launch takes, later launches read the stored steps; with no part the kernel copies (empty
entries, or none a 2-D block), G1's launch then G2's.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from .config import LaunchConfig
from .device_math import floor_div
from .launch import Launch, cdiv, kernel, next_power_of_2
from .launcher import Launcher

__all__ = ["LAUNCHERS"]

#: State tensors (SSM + conv) one G2 launch copies: pointer and strides are passed per part.
_MAX_PARTS = 4


# --------------------------------------------------------------------------------------------------
# G1 verify_commit_step_indices


@triton.jit
def _step_at(accept_index, request, column, in_range, width, draft_token_num, row_stride, col_stride):
    """Tree step of the accepted node in ``column`` of each request's row; -1 where there is none
    (or where ``in_range`` is false: nothing is read there)."""
    inside = in_range & (column >= 0) & (column < width)
    node = tl.load(accept_index + request * row_stride + column * col_stride, mask=inside, other=-1)
    node = node.to(tl.int64)
    return tl.where(inside & (node >= 0), node - request * draft_token_num, -1)


@triton.jit
def _tracked_column(before, accepted, interval):
    """(column, crosses): the column of the last accepted token before the last ``interval``
    boundary the request crossed (its state is the boundary's state), and whether it crossed one."""
    boundary = floor_div(before + accepted, interval)
    crosses = floor_div(before, interval) != boundary
    return tl.maximum(boundary * interval - before - 1, 0), crosses


@kernel
@triton.jit
def _commit_steps_kernel(
    accept_index,
    accept_lens,
    seq_lens,
    last_steps,
    track_steps,
    bs,
    width,
    draft_token_num,
    interval,
    accept_row_stride,
    accept_col_stride,
    lens_stride,
    seq_stride,
    last_stride,
    track_stride,
    TRACKING: tl.constexpr,
    BLOCK: tl.constexpr,
):
    for start in range(tl.program_id(0) * BLOCK, bs, tl.num_programs(0) * BLOCK):
        request = start + tl.arange(0, BLOCK).to(tl.int64)
        in_range = request < bs
        accepted = tl.load(accept_lens + request * lens_stride, mask=in_range, other=0).to(tl.int64)
        last = _step_at(
            accept_index,
            request,
            accepted - 1,
            in_range,
            width,
            draft_token_num,
            accept_row_stride,
            accept_col_stride,
        )
        tl.store(last_steps + request * last_stride, last, mask=in_range)
        if TRACKING:
            before = tl.load(seq_lens + request * seq_stride, mask=in_range, other=0).to(tl.int64)
            column, crosses = _tracked_column(before, accepted, interval)
            tracked = _step_at(
                accept_index,
                request,
                column,
                in_range & crosses,
                width,
                draft_token_num,
                accept_row_stride,
                accept_col_stride,
            )
            tl.store(track_steps + request * track_stride, tracked, mask=in_range)


def _verify_commit_step_indices(
    config: LaunchConfig,
    accept_index: torch.Tensor,
    accept_lens: torch.Tensor,
    draft_token_num: int,
    seq_lens: torch.Tensor | None,
    mamba_track_interval: int,
    last_correct_step_indices: torch.Tensor,
    mamba_steps_to_track: torch.Tensor | None,
) -> None:
    bs, width = accept_index.shape
    if bs == 0:
        return
    tracking = mamba_steps_to_track is not None
    assert not tracking or seq_lens is not None
    # Absent tensors are never read (TRACKING is a constexpr): any tensor stands in for them.
    track = (
        mamba_steps_to_track if mamba_steps_to_track is not None and tracking else last_correct_step_indices
    )
    lengths = seq_lens if seq_lens is not None and tracking else accept_lens
    _commit_steps_launch(config, bs, tracking)(
        accept_index,
        accept_lens,
        lengths,
        last_correct_step_indices,
        track,
        bs,
        width,
        draft_token_num,
        mamba_track_interval if tracking else 1,
        accept_index.stride()[0],
        accept_index.stride()[1],
        accept_lens.stride()[0],
        lengths.stride()[0],
        last_correct_step_indices.stride()[0],
        track.stride()[0],
    )


@functools.lru_cache(maxsize=1024)
def _commit_steps_launch(config: LaunchConfig, bs: int, tracking: bool) -> Launch:
    return _commit_steps_kernel.at(
        (min(cdiv(bs, config.block), config.max_grid),),
        TRACKING=tracking,
        BLOCK=config.block,
        num_warps=config.num_warps,
    )


# --------------------------------------------------------------------------------------------------
# G2 scatter_mamba_states_after_mtp_verify and G3 commit_mamba_states_after_verify


@triton.jit
def _part_tiles(rows, cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    return tl.cdiv(rows, ROWS) * tl.cdiv(cols, COLS)


@triton.jit
def _copy_entry_tile(
    tile,
    layer,
    line,
    row,
    step,
    dst,
    src,
    dst_layer_stride,
    dst_line_stride,
    src_layer_stride,
    src_row_stride,
    src_step_stride,
    rows,
    cols,
    src_entry_row_stride,
    src_entry_col_stride,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """Copy tile ``tile`` of entry ``src[layer, row, step]`` to ``dst[layer, line]`` if the tile is
    one of this part's (a tile index outside [0, tiles) belongs to another part)."""
    col_tiles = tl.cdiv(cols, COLS)
    if (tile >= 0) & (tile < tl.cdiv(rows, ROWS) * col_tiles):
        # int64 offsets within the entry too: a strided source entry may span 2**31 elements.
        r = (tile // col_tiles).to(tl.int64) * ROWS + tl.arange(0, ROWS)
        c = (tile % col_tiles).to(tl.int64) * COLS + tl.arange(0, COLS)
        mask = (r < rows)[:, None] & (c < cols)[None, :]
        src_entry = src + layer * src_layer_stride + row * src_row_stride + step * src_step_stride
        dst_entry = dst + layer * dst_layer_stride + line * dst_line_stride
        values = tl.load(
            src_entry + r[:, None] * src_entry_row_stride + c[None, :] * src_entry_col_stride, mask=mask
        )
        tl.store(dst_entry + r[:, None] * cols + c[None, :], values, mask=mask)


@triton.jit
def _computed_lane_step(
    accept_index,
    accept_lens,
    seq_lens,
    row,
    commit,
    width,
    draft_token_num,
    interval,
    accept_row_stride,
    accept_col_stride,
    lens_stride,
    seq_stride,
    TRACKING: tl.constexpr,
):
    """G1 for one lane: batch row ``row``'s commit step, or where ``commit`` is false its tracking step."""
    accepted = tl.load(accept_lens + row * lens_stride).to(tl.int64)
    column = accepted - 1
    wanted = commit
    if TRACKING:
        before = tl.load(seq_lens + row * seq_stride, mask=~commit, other=0).to(tl.int64)
        tracked_column, crosses = _tracked_column(before, accepted, interval)
        column = tl.where(commit, column, tracked_column)
        wanted = commit | crosses
    return _step_at(
        accept_index, row, column, wanted, width, draft_token_num, accept_row_stride, accept_col_stride
    )


@kernel
@triton.jit
def _scatter_states_kernel(
    state_indices,
    last_steps,
    track_indices,
    track_steps,
    bs,
    num_lanes,
    num_layers,
    num_lines,
    num_steps,
    total_tiles,
    state_stride,
    last_stride,
    track_index_stride,
    track_step_stride,
    # G1's inputs (read with STEPS_FROM_ACCEPT only).
    accept_index,
    accept_lens,
    seq_lens,
    width,
    draft_token_num,
    interval,
    accept_row_stride,
    accept_col_stride,
    lens_stride,
    seq_stride,
    # Part 0 (the SSM state in the first launch).
    dst0,
    src0,
    dst_layer_stride0,
    dst_line_stride0,
    src_layer_stride0,
    src_row_stride0,
    src_step_stride0,
    rows0,
    cols0,
    src_entry_row_stride0,
    src_entry_col_stride0,
    # Part 1.
    dst1,
    src1,
    dst_layer_stride1,
    dst_line_stride1,
    src_layer_stride1,
    src_row_stride1,
    src_step_stride1,
    rows1,
    cols1,
    src_entry_row_stride1,
    src_entry_col_stride1,
    # Part 2.
    dst2,
    src2,
    dst_layer_stride2,
    dst_line_stride2,
    src_layer_stride2,
    src_row_stride2,
    src_step_stride2,
    rows2,
    cols2,
    src_entry_row_stride2,
    src_entry_col_stride2,
    # Part 3.
    dst3,
    src3,
    dst_layer_stride3,
    dst_line_stride3,
    src_layer_stride3,
    src_row_stride3,
    src_step_stride3,
    rows3,
    cols3,
    src_entry_row_stride3,
    src_entry_col_stride3,
    NUM_PARTS: tl.constexpr,
    TRACKING: tl.constexpr,
    STEPS_FROM_ACCEPT: tl.constexpr,
    ROWS0: tl.constexpr,
    COLS0: tl.constexpr,
    ROWS1: tl.constexpr,
    COLS1: tl.constexpr,
    ROWS2: tl.constexpr,
    COLS2: tl.constexpr,
    ROWS3: tl.constexpr,
    COLS3: tl.constexpr,
):
    # Grid (tiles of all parts, lanes, layers); each axis loops past the device's grid limit.
    for lane in range(tl.program_id(1), num_lanes, tl.num_programs(1)):
        commit = lane < bs
        row = tl.cast(tl.where(commit, lane, lane - bs), tl.int64)
        line = tl.load(state_indices + row * state_stride).to(tl.int64)
        if TRACKING:
            tracked_line = tl.load(track_indices + row * track_index_stride).to(tl.int64)
            line = tl.where(commit, line, tracked_line)
        if STEPS_FROM_ACCEPT:
            # G3: every program of the lane computes its step (no dependent launch); the lane's
            # program of tile 0 and layer 0 also stores it (G3 returns the steps).
            step = _computed_lane_step(
                accept_index,
                accept_lens,
                seq_lens,
                row,
                commit,
                width,
                draft_token_num,
                interval,
                accept_row_stride,
                accept_col_stride,
                lens_stride,
                seq_stride,
                TRACKING,
            )
            if (tl.program_id(0) == 0) & (tl.program_id(2) == 0):
                tl.store(last_steps + row * last_stride, step, mask=commit)
                if TRACKING:
                    tl.store(track_steps + row * track_step_stride, step, mask=~commit)
        else:
            step = tl.load(last_steps + row * last_stride).to(tl.int64)
            if TRACKING:
                tracked_step = tl.load(track_steps + row * track_step_stride).to(tl.int64)
                step = tl.where(commit, step, tracked_step)
        # Padding rows (step outside [0, D) or line outside [0, C)) are skipped.
        if (step >= 0) & (step < num_steps) & (line >= 0) & (line < num_lines):
            for layer_id in range(tl.program_id(2), num_layers, tl.num_programs(2)):
                layer = tl.cast(layer_id, tl.int64)
                for first_tile in range(tl.program_id(0), total_tiles, tl.num_programs(0)):
                    tile = first_tile  # made relative to each part in turn
                    _copy_entry_tile(
                        tile,
                        layer,
                        line,
                        row,
                        step,
                        dst0,
                        src0,
                        dst_layer_stride0,
                        dst_line_stride0,
                        src_layer_stride0,
                        src_row_stride0,
                        src_step_stride0,
                        rows0,
                        cols0,
                        src_entry_row_stride0,
                        src_entry_col_stride0,
                        ROWS0,
                        COLS0,
                    )
                    if NUM_PARTS > 1:
                        tile -= _part_tiles(rows0, cols0, ROWS0, COLS0)
                        _copy_entry_tile(
                            tile,
                            layer,
                            line,
                            row,
                            step,
                            dst1,
                            src1,
                            dst_layer_stride1,
                            dst_line_stride1,
                            src_layer_stride1,
                            src_row_stride1,
                            src_step_stride1,
                            rows1,
                            cols1,
                            src_entry_row_stride1,
                            src_entry_col_stride1,
                            ROWS1,
                            COLS1,
                        )
                    if NUM_PARTS > 2:
                        tile -= _part_tiles(rows1, cols1, ROWS1, COLS1)
                        _copy_entry_tile(
                            tile,
                            layer,
                            line,
                            row,
                            step,
                            dst2,
                            src2,
                            dst_layer_stride2,
                            dst_line_stride2,
                            src_layer_stride2,
                            src_row_stride2,
                            src_step_stride2,
                            rows2,
                            cols2,
                            src_entry_row_stride2,
                            src_entry_col_stride2,
                            ROWS2,
                            COLS2,
                        )
                    if NUM_PARTS > 3:
                        tile -= _part_tiles(rows2, cols2, ROWS2, COLS2)
                        _copy_entry_tile(
                            tile,
                            layer,
                            line,
                            row,
                            step,
                            dst3,
                            src3,
                            dst_layer_stride3,
                            dst_line_stride3,
                            src_layer_stride3,
                            src_row_stride3,
                            src_step_stride3,
                            rows3,
                            cols3,
                            src_entry_row_stride3,
                            src_entry_col_stride3,
                            ROWS3,
                            COLS3,
                        )


def _entry_as_2d(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int, int, int] | None:
    """(rows, cols, row stride, col stride) of the entries of a step buffer ``[L, M, D, *entry]`` of
    this shape and these strides seen as a 2-D block in row-major order, or None when its dims do
    not coalesce to two."""
    dims: list[list[int]] = []  # [size, stride], outermost first, size-1 dims dropped
    for size, stride in zip(shape[3:], strides[3:], strict=True):
        if size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = [dims[-1][0] * size, stride]
        else:
            dims.append([size, stride])
    if len(dims) > 2:
        return None
    while len(dims) < 2:
        dims.insert(0, [1, 0])
    (rows, row_stride), (cols, col_stride) = dims
    return rows, cols, row_stride, col_stride


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _tile_shape(config: LaunchConfig, rows: int, cols: int, element_size: int) -> tuple[int, int]:
    """(ROWS, COLS) of a part's tiles: copy_block_bytes per tile, whole rows where they fit."""
    elements = max(config.copy_block_bytes // element_size, 1)
    col_block = min(next_power_of_2(cols), elements)
    row_block = min(max(elements // col_block, 1), next_power_of_2(rows))
    return row_block, col_block


#: A state pair's layout: (states shape, states strides, element size, steps shape, steps strides).
_PairLayout = tuple[tuple[int, ...], tuple[int, ...], int, tuple[int, ...], tuple[int, ...]]


#: Launches one parts plan keeps by (launch, lanes, modes) (emptied when full).
_MAX_PLAN_LAUNCHES = 64


class _PartsPlan:
    """How a layout of state pairs is copied, worked out once per layout (:func:`_parts_plan`):
    which pairs are parts (non-empty entries), which of their step buffers are read through a
    contiguous copy, and per launch of at most :data:`_MAX_PARTS` parts the kernel's scalar
    arguments of each part slot, the tile constexprs and the number of tiles."""

    __slots__ = ("config", "num_layers", "pairs", "copied", "launches", "_bound")

    def __init__(
        self,
        config: LaunchConfig,
        num_layers: int,
        pairs: tuple[int, ...],
        copied: frozenset[int],
        launches: tuple[tuple[tuple[tuple[int, ...], ...], dict[str, int], int], ...],
    ) -> None:
        self.config = config
        self.num_layers = num_layers
        self.pairs = pairs
        self.copied = copied
        self.launches = launches
        self._bound: dict[tuple[int, int, bool, bool], Launch] = {}

    def launch(self, index: int, num_lanes: int, tracking: bool, steps_from_accept: bool) -> Launch:
        """Launch ``index`` of the plan over ``num_lanes`` lanes: built once per lanes and modes."""
        key = (index, num_lanes, tracking, steps_from_accept)
        found = self._bound.get(key)
        if found is None:
            if len(self._bound) >= _MAX_PLAN_LAUNCHES:
                self._bound.clear()
            slot_scalars, tile_shapes, total_tiles = self.launches[index]
            config = self.config
            grid = (
                min(total_tiles, config.max_grid),
                min(num_lanes, config.max_grid),
                min(self.num_layers, config.max_grid),
            )
            found = self._bound[key] = _scatter_states_kernel.at(
                grid,
                NUM_PARTS=len(slot_scalars),
                TRACKING=tracking,
                STEPS_FROM_ACCEPT=steps_from_accept,
                **tile_shapes,
                num_warps=config.copy_num_warps,
            )
        return found


@functools.lru_cache(maxsize=256)
def _parts_plan(config: LaunchConfig, layouts: tuple[_PairLayout, ...]) -> _PartsPlan:
    """Pairs with empty entries are skipped. Step buffers whose entries are no 2-D block are read
    through a contiguous copy: rare layouts pay a copy rather than a second code path."""
    pairs, copied, slots = [], set(), []
    for index, (states_shape, states_strides, element_size, steps_shape, steps_strides) in enumerate(layouts):
        if math.prod(states_shape[2:]) == 0:
            continue
        entry = _entry_as_2d(steps_shape, steps_strides)
        if entry is None:
            copied.add(index)
            steps_strides = _contiguous_strides(steps_shape)
            entry = _entry_as_2d(steps_shape, steps_strides)
            assert entry is not None  # a contiguous entry coalesces to one dimension
        pairs.append(index)
        rows, cols = entry[:2]
        scalars = (*states_strides[:2], *steps_strides[:3], *entry)
        slots.append((scalars, _tile_shape(config, rows, cols, element_size), rows, cols))
    launches = []
    for first in range(0, len(slots), _MAX_PARTS):
        launch_slots = slots[first : first + _MAX_PARTS]
        tile_shapes: dict[str, int] = {}
        for k in range(_MAX_PARTS):
            # Missing parts repeat the last one (never read: NUM_PARTS is a constexpr).
            _, (row_block, col_block), _, _ = launch_slots[min(k, len(launch_slots) - 1)]
            tile_shapes |= {f"ROWS{k}": row_block, f"COLS{k}": col_block}
        total_tiles = sum(
            cdiv(rows, row_block) * cdiv(cols, col_block)
            for _, (row_block, col_block), rows, cols in launch_slots
        )
        launches.append((tuple(scalars for scalars, _, _, _ in launch_slots), tile_shapes, total_tiles))
    num_layers = layouts[0][0][0] if layouts else 0
    return _PartsPlan(config, num_layers, tuple(pairs), frozenset(copied), tuple(launches))


#: A state tensor the kernel copies, with its per-step states.
_Part = tuple[torch.Tensor, torch.Tensor]


def _copy_parts(
    config: LaunchConfig,
    ssm_states: torch.Tensor,
    intermediate_ssm: torch.Tensor,
    conv_states: list[torch.Tensor],
    intermediate_conv_windows: list[torch.Tensor],
) -> tuple[list[_Part], _PartsPlan]:
    """The state pairs the kernel copies and their plan (the layout read once per call: shapes,
    strides and element sizes, no per-dimension walk)."""
    pairs = list(zip((ssm_states, *conv_states), (intermediate_ssm, *intermediate_conv_windows), strict=True))
    plan = _parts_plan(
        config,
        tuple((s.shape, s.stride(), s.element_size(), t.shape, t.stride()) for s, t in pairs),
    )
    return [
        (pairs[i][0], pairs[i][1].contiguous() if i in plan.copied else pairs[i][1]) for i in plan.pairs
    ], plan


def _launch_scatter(
    parts: list[_Part],
    plan: _PartsPlan,
    state_indices: torch.Tensor,
    last_correct_step_indices: torch.Tensor,
    mamba_track_indices: torch.Tensor | None,
    mamba_steps_to_track: torch.Tensor | None,
    accept: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int, int] | None = None,
) -> None:
    """The kernel over ``parts``, :data:`_MAX_PARTS` per launch. With ``accept`` (accept_index,
    accept_lens, seq_lens, draft_token_num, interval) the first launch computes the steps (G1) and
    stores them into the step tensors; later launches read them."""
    bs = state_indices.shape[0]
    num_lines = parts[0][0].shape[1]
    num_steps = parts[0][1].shape[2]
    tracking = mamba_track_indices is not None and mamba_steps_to_track is not None
    # Absent tensors are never read (TRACKING / STEPS_FROM_ACCEPT are constexprs): any tensor stands in.
    track_indices = mamba_track_indices if mamba_track_indices is not None and tracking else state_indices
    track_steps = (
        mamba_steps_to_track if mamba_steps_to_track is not None and tracking else last_correct_step_indices
    )
    num_lanes = 2 * bs if tracking else bs
    for launch_index, (slot_scalars, _, total_tiles) in enumerate(plan.launches):
        first = launch_index * _MAX_PARTS
        launch_parts = parts[first : first + _MAX_PARTS]
        part_args: list[object] = []
        for k in range(_MAX_PARTS):
            last = min(k, len(launch_parts) - 1)  # missing parts repeat the last one (never read)
            part_args += [*launch_parts[last], *slot_scalars[last]]
        steps_from_accept = accept is not None and first == 0
        if accept is not None and first == 0:
            accept_index, accept_lens, seq_lens, draft_token_num, interval = accept
            lengths = seq_lens if seq_lens is not None and tracking else accept_lens
            accept_args = [
                accept_index,
                accept_lens,
                lengths,
                accept_index.shape[1],
                draft_token_num,
                interval if tracking else 1,
                accept_index.stride()[0],
                accept_index.stride()[1],
                accept_lens.stride()[0],
                lengths.stride()[0],
            ]
        else:
            accept_args = [state_indices, state_indices, state_indices, 0, 1, 1, 0, 0, 0, 0]
        plan.launch(launch_index, num_lanes, tracking, steps_from_accept)(
            state_indices,
            last_correct_step_indices,
            track_indices,
            track_steps,
            bs,
            num_lanes,
            plan.num_layers,
            num_lines,
            num_steps,
            total_tiles,
            state_indices.stride()[0],
            last_correct_step_indices.stride()[0],
            track_indices.stride()[0],
            track_steps.stride()[0],
            *accept_args,
            *part_args,
        )


def _scatter_mamba_states(
    config: LaunchConfig,
    ssm_states: torch.Tensor,
    intermediate_ssm: torch.Tensor,
    conv_states: list[torch.Tensor],
    intermediate_conv_windows: list[torch.Tensor],
    state_indices: torch.Tensor,
    last_correct_step_indices: torch.Tensor,
    mamba_track_indices: torch.Tensor | None,
    mamba_steps_to_track: torch.Tensor | None,
) -> None:
    num_layers, num_lines = ssm_states.shape[:2]
    if state_indices.shape[0] == 0 or num_lines == 0 or num_layers == 0 or intermediate_ssm.shape[2] == 0:
        return
    parts, plan = _copy_parts(config, ssm_states, intermediate_ssm, conv_states, intermediate_conv_windows)
    if parts:
        _launch_scatter(
            parts,
            plan,
            state_indices,
            last_correct_step_indices,
            mamba_track_indices,
            mamba_steps_to_track,
        )


def _commit_mamba_states(
    config: LaunchConfig,
    ssm_states: torch.Tensor,
    intermediate_ssm: torch.Tensor,
    conv_states: list[torch.Tensor],
    intermediate_conv_windows: list[torch.Tensor],
    state_indices: torch.Tensor,
    mamba_track_indices: torch.Tensor | None,
    accept_index: torch.Tensor,
    accept_lens: torch.Tensor,
    draft_token_num: int,
    seq_lens: torch.Tensor | None,
    mamba_track_interval: int,
    last_correct_step_indices: torch.Tensor,
    mamba_steps_to_track: torch.Tensor | None,
) -> None:
    if accept_index.shape[0] == 0:
        return
    parts, plan = _copy_parts(config, ssm_states, intermediate_ssm, conv_states, intermediate_conv_windows)
    if (
        not parts
        or ssm_states.shape[0] == 0
        or (mamba_steps_to_track is None) != (mamba_track_indices is None)
    ):
        # No launch of the kernel to compute the steps in (nothing it copies), or steps to track
        # without tracking lines: G1's launch, then G2's.
        _verify_commit_step_indices(
            config,
            accept_index,
            accept_lens,
            draft_token_num,
            seq_lens,
            mamba_track_interval,
            last_correct_step_indices,
            mamba_steps_to_track,
        )
        _scatter_mamba_states(
            config,
            ssm_states,
            intermediate_ssm,
            conv_states,
            intermediate_conv_windows,
            state_indices,
            last_correct_step_indices,
            mamba_track_indices,
            mamba_steps_to_track,
        )
        return
    _launch_scatter(
        parts,
        plan,
        state_indices,
        last_correct_step_indices,
        mamba_track_indices,
        mamba_steps_to_track,
        (accept_index, accept_lens, seq_lens, draft_token_num, mamba_track_interval),
    )


#: The family's launchers of this module.
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("verify_commit_step_indices", _verify_commit_step_indices),
    Launcher("scatter_mamba_states_after_mtp_verify", _scatter_mamba_states, tile="copy"),
    Launcher("commit_mamba_states_after_verify", _commit_mamba_states, tile="copy"),
)
