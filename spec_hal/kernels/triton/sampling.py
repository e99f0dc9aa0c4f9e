"""Triton kernels of family D: the topk = 1 post-processing ops. The vocabulary-wide draft sampling
ops are in ``vocab.py``, the top-k/top-p renormalisation in ``renorm.py``.

All three take the D6 argmax of logits rows: compared in fp32, NaN as -1e30, ties to the lowest id.
The argmax is split over the vocabulary so that even one row keeps many SMs busy: a first launch,
one program per (vocabulary slice, row), reduces its slice with one vector load and one reduction
to a ``(max, first index)`` partial in a scratch ``[rows, slices]``. A slice is as small as gives
``_TARGET_PROGRAMS`` programs, within half to twice the vendor's copy tile (4-16 KiB on Hopper).
The op's kernel (one program per output row or request, one warp) reduces a row's partials and
does the bookkeeping. When a row fits one slice the op's kernel reads it itself: one launch.

Two launches, not one with the last-arriving program of a row finishing it: that needs a per-row
arrival counter that is zero when the kernel starts. The op signatures carry no scratch, a scratch
kept between calls breaks under concurrent streams and graph capture, and zeroing a fresh one is a
launch too; the second launch costs about as much and needs no atomics.

* ``draft_topk1_postprocess``: topk_p = 1, topk_index, positions += 1, draft_tokens[:, column];
* ``target_verify_topk1_postprocess``: the chain walk of the greedy verify (or the simulated
  override) and every output. A real verify writes ``predicts`` at the flat ids on each path, which
  may lie in another request's rows, and 0 everywhere else: the zero fill happens in the first launch
  (always made for a real verify, with the argmax partials of every node row), so no program's fill
  can land after another program's path write. A request loads its nodes' links, drafts and target
  tokens as vectors up front (two levels of loads); the walk itself then runs in registers;
* ``draft_extend_topk1_postprocess``: the argmax of ``logits[row_indices[b]]`` and the gathers of the
  same row of ``hidden_states`` / ``dsa_topk_indices`` (split over the first launch's programs when
  there is one); out-of-range row indices write nothing.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._constants import NAN_LOGIT, SIMULATED_TOKEN
from .config import LaunchConfig
from .launch import Launch, cdiv, kernel, next_power_of_2
from .launcher import Launcher

#: Programs the first launch aims at: several per SM of a ~100-SM device.
_TARGET_PROGRAMS = 1024
#: A NaN logit ranks as this value (D6); a constexpr: kernels read it.
_NAN_LOGIT = tl.constexpr(NAN_LOGIT)


# --------------------------------------------------------------------------------------------------
# The split argmax


@triton.jit
def _slice_argmax(row_ptr, stride_v, start, vocab, SLICE: tl.constexpr):
    """(max, lowest index of the max) of ``row[start : start + SLICE]`` clipped to ``vocab``
    (non-empty) in fp32, NaN as -1e30: one vector load and one reduction."""
    lanes = tl.arange(0, SLICE).to(tl.int64) + start
    # Masked by `vocab` itself (a multiple of 16 in practice, which Triton specialises on): the mask
    # is constant over aligned groups of lanes, so the load is made of 16-byte vector loads.
    values = tl.load(row_ptr + lanes * stride_v, mask=lanes < vocab, other=float("-inf")).to(tl.float32)
    values = tl.where(values != values, _NAN_LOGIT, values)
    # Masked lanes (-inf) follow every real lane: an all -inf slice answers its first index.
    best, offset = tl.max(values, 0, return_indices=True, return_indices_tie_break_left=True)
    return best, offset.to(tl.int64) + start


@triton.jit
def _max_then_lowest_index(value1, index1, value2, index2):
    first = (value1 > value2) | ((value1 == value2) & (index1 < index2))
    return tl.where(first, value1, value2), tl.where(first, index1, index2)


@triton.jit
def _combine_partials(partials_ptr, index_plane, slots, inside, vocab, AXIS: tl.constexpr):
    """The D6 argmax (int64) over the partials at ``slots`` along ``AXIS``: the largest max, and
    among equal maxima the lowest index (slices cover ascending ranges, each partial holds its
    slice's first maximum). One (max, index) reduction: no select between reduced and loaded
    tensors. Masked slots never win; all masked answers ``vocab``. ``partials``: float32, the
    maxima then, ``index_plane`` entries further, the int32 indices stored as their bits."""
    maxima = tl.load(partials_ptr + slots, mask=inside, other=float("-inf"))
    index_bits = tl.load(partials_ptr + index_plane + slots, mask=inside, other=0.0)
    indices = tl.where(inside, index_bits.to(tl.int32, bitcast=True), vocab)
    _, index = tl.reduce((maxima, indices), AXIS, _max_then_lowest_index)
    return index.to(tl.int64)


@triton.jit
def _row_argmax(
    logits_ptr, row, stride_row, stride_v, vocab, partials_ptr, index_plane, partial_row, num_slices,
    FROM_PARTIALS: tl.constexpr, SLICE: tl.constexpr, BLOCKS: tl.constexpr,
):  # fmt: skip
    """The D6 argmax (int64) of logits row ``row`` (``vocab <= SLICE``), or of the partials of
    ``partial_row``."""
    if FROM_PARTIALS:
        block = tl.arange(0, BLOCKS)
        index = _combine_partials(
            partials_ptr, index_plane, partial_row * num_slices + block, block < num_slices, vocab, 0
        )
    else:
        _, index = _slice_argmax(logits_ptr + row * stride_row, stride_v, 0, vocab, SLICE)
    return index


@triton.jit
def _copy_row_part(
    src_ptr, src_stride, dst_ptr, dst_stride, width, valid, part, num_parts, BLOCK: tl.constexpr
):  # fmt: skip
    """Copies blocks ``part, part + num_parts, ...`` of a row of ``width`` elements when ``valid``."""
    for start in range(part * BLOCK, width, num_parts * BLOCK):
        lanes = start + tl.arange(0, BLOCK).to(tl.int64)
        inside = valid & (lanes < width)
        tl.store(
            dst_ptr + lanes * dst_stride, tl.load(src_ptr + lanes * src_stride, mask=inside), mask=inside
        )


@kernel
@triton.jit
def _argmax_partials_kernel(
    logits_ptr, stride_row, stride_v, num_logit_rows, vocab,
    row_indices_ptr, row_indices_stride, row_step, row_offset,
    partials_ptr, index_plane, num_partial_rows,
    zero_int32_ptr, zero_int32_stride, zero_int64_ptr, zero_int64_stride, num_zero,
    hidden_ptr, hidden_stride_n, hidden_stride_h, out_hidden_ptr, out_hidden_stride_b, out_hidden_stride_h,
    hidden_size,
    dsa_ptr, dsa_stride_n, dsa_stride_t, out_dsa_ptr, out_dsa_stride_b, out_dsa_stride_t, dsa_width,
    HAS_ROW_INDICES: tl.constexpr, ZERO_FILL: tl.constexpr, HAS_HIDDEN: tl.constexpr, HAS_DSA: tl.constexpr,
    SLICE: tl.constexpr, HIDDEN_BLOCK: tl.constexpr, DSA_BLOCK: tl.constexpr,
):  # fmt: skip
    """Program (k, q): the (max, index) partial of slice k of partial rows p = q, q + grid, ...
    (the row grid is capped at ``max_grid``); partial row p reads logits row ``row_indices[p]`` or
    ``p * row_step + row_offset``, and an out-of-range row writes nothing. Slices are the fast grid
    axis: consecutive programs stream consecutive memory. ``ZERO_FILL``: programs (0, q) also zero
    entry p of the two outputs the op's kernel scatters into. ``HAS_HIDDEN`` / ``HAS_DSA``: program
    (k, q) also copies its share of row ``row_indices[p]`` of those buffers to output row p."""
    k = tl.program_id(0).to(tl.int64)
    num_slices = tl.num_programs(0).to(tl.int64)
    start = k * SLICE
    for q in range(tl.program_id(1), num_partial_rows, tl.num_programs(1)):
        p = tl.zeros((), tl.int64) + q
        if ZERO_FILL:
            fill = (k == 0) & (p < num_zero)
            tl.store(zero_int32_ptr + p * zero_int32_stride, tl.zeros((), tl.int32), mask=fill)
            tl.store(zero_int64_ptr + p * zero_int64_stride, tl.zeros((), tl.int64), mask=fill)
        if HAS_ROW_INDICES:
            row = tl.load(row_indices_ptr + p * row_indices_stride).to(tl.int64)
        else:
            row = p * row_step + row_offset
        valid = (row >= 0) & (row < num_logit_rows)
        if valid:
            best, index = _slice_argmax(logits_ptr + row * stride_row, stride_v, start, vocab, SLICE)
            tl.store(partials_ptr + p * num_slices + k, best)
            tl.store(
                partials_ptr + index_plane + p * num_slices + k,
                index.to(tl.int32).to(tl.float32, bitcast=True),
            )
        if HAS_HIDDEN:
            _copy_row_part(
                hidden_ptr + row * hidden_stride_n, hidden_stride_h,
                out_hidden_ptr + p * out_hidden_stride_b, out_hidden_stride_h,
                hidden_size, valid, k, num_slices, HIDDEN_BLOCK,
            )  # fmt: skip
        if HAS_DSA:
            _copy_row_part(
                dsa_ptr + row * dsa_stride_n, dsa_stride_t, out_dsa_ptr + p * out_dsa_stride_b, out_dsa_stride_t,
                dsa_width, valid, k, num_slices, DSA_BLOCK,
            )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _slice_elements(config: LaunchConfig, vocab: int, element: int, num_rows: int) -> int:
    """Logits per first-launch program: ``_TARGET_PROGRAMS`` programs over all rows, each slice
    from half to twice the vendor's copy tile (whole 16-byte vectors, enough bytes in flight per
    program), at most the vocabulary rounded up (a power of two). Worked out once per layout."""
    wanted = next_power_of_2(max(cdiv(num_rows * vocab * element, _TARGET_PROGRAMS), 1))
    slice_bytes = min(max(wanted, config.copy_block_bytes // 2), 2 * config.copy_block_bytes)
    return min(max(slice_bytes // element, 1), next_power_of_2(max(vocab, 1)))


@functools.lru_cache(maxsize=1024)
def _copy_block(config: LaunchConfig, element_size: int, width: int) -> int:
    """Elements per step of a gather of rows ``width`` elements wide: the vendor's bandwidth tile,
    at most the row (worked out once per layout)."""
    lanes = next_power_of_2(max(config.copy_block_bytes // element_size, 1))
    return min(lanes, next_power_of_2(max(width, 1)))


#: An optional row gather ``target[b] = source[row_indices[b]]``: (source, target) or None.
_Gather = tuple[torch.Tensor, torch.Tensor] | None


def _gathered(source: torch.Tensor | None, target: torch.Tensor | None) -> _Gather:
    return None if source is None or target is None else (source, target)


def _gather_args(gather: _Gather) -> tuple:
    """Kernel arguments of a row gather: the source and its strides, the target and its strides,
    the row width (placeholders when absent: never read)."""
    if gather is None:
        return (None, 0, 0, None, 0, 0, 0)
    source, target = gather
    return (source, *source.stride(), target, *target.stride(), source.shape[1])


def _gather_block(config: LaunchConfig, gather: _Gather) -> int:
    if gather is None:
        return 1
    source = gather[0]
    return _copy_block(config, source.element_size(), source.shape[1])


class _ArgmaxShape:
    """How an op's kernel gets its argmax over rows of one layout (worked out once per layout, see
    :func:`_argmax_shape`): the slices, whether a first launch writes partials, and the op kernel's
    constexprs."""

    __slots__ = (
        "config",
        "num_partial_rows",
        "slice",
        "num_slices",
        "from_partials",
        "index_plane",
        "blocks",
    )

    def __init__(
        self, config: LaunchConfig, vocab: int, element: int, num_partial_rows: int, always_partials: bool
    ) -> None:
        self.config = config
        self.num_partial_rows = num_partial_rows
        self.slice = _slice_elements(config, vocab, element, num_partial_rows)
        self.num_slices = cdiv(vocab, self.slice)
        self.from_partials = always_partials or self.num_slices > 1
        self.index_plane = num_partial_rows * self.num_slices
        #: Lanes over a row's partials (a power of two).
        self.blocks = next_power_of_2(max(self.num_slices, 1))

    def constexprs(self) -> dict[str, object]:
        return {"FROM_PARTIALS": self.from_partials, "SLICE": self.slice, "BLOCKS": self.blocks}

    def op_num_warps(self, lanes_per_row: int = 1) -> int:
        """Warps of the op's kernel: the vendor's latency-bound count when it reads a logits row
        itself; else enough for ``lanes_per_row`` partials lanes at ~32 per thread, from one warp
        (a row's partials are a few hundred bytes: one warp reduces them without shared memory)."""
        if not self.from_partials:
            return self.config.num_warps
        warps = lanes_per_row * self.blocks // (32 * self.config.warp_size)
        return min(max(warps, 1), self.config.num_warps)


@functools.lru_cache(maxsize=1024)
def _argmax_shape(
    config: LaunchConfig, vocab: int, element: int, num_partial_rows: int, always_partials: bool
) -> _ArgmaxShape:
    return _ArgmaxShape(config, vocab, element, num_partial_rows, always_partials)


@functools.lru_cache(maxsize=1024)
def _partials_launch(
    shape: _ArgmaxShape, has_row_indices: bool, zero_fill: bool, hidden_block: int, dsa_block: int
) -> Launch:
    """The first launch; a gather block of 0: no such gather."""
    config = shape.config
    return _argmax_partials_kernel.at(
        (shape.num_slices, min(shape.num_partial_rows, config.max_grid)),
        HAS_ROW_INDICES=has_row_indices,
        ZERO_FILL=zero_fill,
        HAS_HIDDEN=hidden_block > 0,
        HAS_DSA=dsa_block > 0,
        SLICE=shape.slice,
        HIDDEN_BLOCK=max(hidden_block, 1),
        DSA_BLOCK=max(dsa_block, 1),
        num_warps=config.copy_num_warps,
    )


class _Argmax:
    """One call's argmax: its shape, the logits, and the partials scratch of the first launch when a
    row spans several slices (or ``always_partials``)."""

    __slots__ = ("shape", "logits", "partials")

    def __init__(
        self, config: LaunchConfig, logits: torch.Tensor, num_partial_rows: int, *, always_partials=False
    ):
        self.shape = shape = _argmax_shape(
            config, logits.shape[1], logits.element_size(), num_partial_rows, always_partials
        )
        self.logits = logits
        # One allocation: the maxima, then the indices (int32 bits in float32 entries).
        self.partials = (
            torch.empty(2 * shape.index_plane, dtype=torch.float32, device=logits.device)
            if shape.from_partials
            else None
        )

    def launch_partials(
        self,
        *,
        row_indices: torch.Tensor | None = None,
        row_step: int = 1,
        row_offset: int = 0,
        zero_fill: tuple[torch.Tensor, torch.Tensor] | None = None,
        hidden: _Gather = None,
        dsa: _Gather = None,
    ) -> None:
        """First launch (only when the argmax reads partials); ``zero_fill``: 1-D int32 and int64
        outputs to zero; ``hidden`` / ``dsa``: row gathers by ``row_indices``."""
        shape = self.shape
        if not shape.from_partials or shape.num_partial_rows == 0:
            return
        zero_args: tuple = (None, 0, None, 0, 0)
        if zero_fill is not None:
            int32_out, int64_out = zero_fill
            zero_args = (
                int32_out,
                int32_out.stride()[0],
                int64_out,
                int64_out.stride()[0],
                int32_out.numel(),
            )
        hidden_block = 0 if hidden is None else _gather_block(shape.config, hidden)
        dsa_block = 0 if dsa is None else _gather_block(shape.config, dsa)
        logits = self.logits
        _partials_launch(shape, row_indices is not None, zero_fill is not None, hidden_block, dsa_block)(
            logits, *logits.stride(), logits.shape[0], logits.shape[1],
            row_indices, 0 if row_indices is None else row_indices.stride()[0], row_step, row_offset,
            self.partials, shape.index_plane, shape.num_partial_rows,
            *zero_args, *_gather_args(hidden), *_gather_args(dsa),
        )  # fmt: skip

    def kernel_args(self) -> tuple:
        """The ``_row_argmax`` arguments an op's kernel takes (logits first)."""
        logits, shape = self.logits, self.shape
        return (logits, *logits.stride(), logits.shape[1], self.partials, shape.index_plane, shape.num_slices)


# --------------------------------------------------------------------------------------------------
# draft_topk1_postprocess


@kernel
@triton.jit
def _draft_topk1_kernel(
    logits_ptr, stride_row, stride_v, vocab, partials_ptr, index_plane, num_slices,
    positions_ptr, positions_stride,
    draft_tokens_ptr, draft_stride_b, draft_stride_c, draft_column,
    topk_p_ptr, topk_p_stride, topk_index_ptr, topk_index_stride,
    HAS_DRAFT_TOKENS: tl.constexpr, FROM_PARTIALS: tl.constexpr, SLICE: tl.constexpr, BLOCKS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    token = _row_argmax(
        logits_ptr, row, stride_row, stride_v, vocab, partials_ptr, index_plane, row, num_slices,
        FROM_PARTIALS, SLICE, BLOCKS,
    )  # fmt: skip
    tl.store(topk_index_ptr + row * topk_index_stride, token)
    tl.store(topk_p_ptr + row * topk_p_stride, tl.full((), 1.0, tl.float32))
    position = positions_ptr + row * positions_stride
    tl.store(position, tl.load(position) + 1)
    if HAS_DRAFT_TOKENS:
        tl.store(draft_tokens_ptr + row * draft_stride_b + draft_column * draft_stride_c, token)


def _draft_topk1_postprocess(
    config: LaunchConfig,
    logits: torch.Tensor,
    positions: torch.Tensor,
    draft_tokens: torch.Tensor | None,
    draft_token_column: int,
    out_topk_p: torch.Tensor,
    out_topk_index: torch.Tensor,
) -> None:
    batch = logits.shape[0]
    if batch == 0:
        return
    argmax = _Argmax(config, logits, batch)
    argmax.launch_partials()
    draft_strides = (0, 0) if draft_tokens is None else draft_tokens.stride()
    _draft_topk1_launch(argmax.shape, batch, draft_tokens is not None)(
        *argmax.kernel_args(),
        positions, positions.stride()[0],
        draft_tokens, *draft_strides, draft_token_column,
        out_topk_p, out_topk_p.stride()[0], out_topk_index, out_topk_index.stride()[0],
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _draft_topk1_launch(shape: _ArgmaxShape, batch: int, has_draft_tokens: bool) -> Launch:
    return _draft_topk1_kernel.at(
        (batch,), HAS_DRAFT_TOKENS=has_draft_tokens, **shape.constexprs(), num_warps=shape.op_num_warps()
    )


# --------------------------------------------------------------------------------------------------
# target_verify_topk1_postprocess


@triton.jit
def _pick(values, node, at):
    """``values[at]`` of a per-node vector. An arithmetic one-hot, not a select: ``values`` may
    come out of a reduction in another layout than ``node`` (Triton 3.6 miscompiles such selects)."""
    return tl.sum(values * (node == at).to(values.dtype), 0)


@kernel
@triton.jit
def _target_verify_topk1_kernel(
    logits_ptr, stride_row, stride_v, vocab, partials_ptr, index_plane, num_slices,
    candidates_ptr, candidates_stride_b, candidates_stride_n,
    retrieve_index_ptr, index_stride_b, index_stride_n,
    next_token_ptr, token_stride_b, token_stride_n,
    seq_lens_ptr, seq_lens_stride,
    predicts_ptr, predicts_stride, num_correct_ptr, num_correct_stride, accept_lens_ptr, accept_lens_stride,
    accept_index_ptr, accept_stride_b, accept_stride_k, bonus_ptr, bonus_stride,
    new_seq_lens_ptr, new_seq_lens_stride, select_index_ptr, select_index_stride,
    draft_tokens_ptr, draft_tokens_stride,
    num_nodes, num_simulated,
    SIMULATED: tl.constexpr, REAL_DRAFT_TOKENS: tl.constexpr, SIMULATED_TOKEN: tl.constexpr,
    BLOCK_D: tl.constexpr, FROM_PARTIALS: tl.constexpr, SLICE: tl.constexpr, BLOCKS: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    num_flat = tl.num_programs(0).to(tl.int64) * num_nodes
    row_base = b * num_nodes
    node = tl.arange(0, BLOCK_D).to(tl.int64)
    in_row = node < num_nodes
    if SIMULATED:
        # Every request accepts n - 1 drafts; its rows are fully written here (no scatter).
        accepted = node < num_simulated
        tl.store(
            accept_index_ptr + b * accept_stride_b + node * accept_stride_k,
            tl.where(accepted, row_base + node, -1).to(tl.int32),
            mask=in_row,
        )
        num_accepted = tl.zeros((), tl.int64) + num_simulated - 1
        if REAL_DRAFT_TOKENS:
            # Only row b*D + n-1 feeds the bonus; the partials (if any) are one row per request.
            bonus = _row_argmax(
                logits_ptr, row_base + num_accepted, stride_row, stride_v, vocab,
                partials_ptr, index_plane, b, num_slices, FROM_PARTIALS, SLICE, BLOCKS,
            )  # fmt: skip
            is_draft = node < num_accepted
            drafts = tl.load(
                candidates_ptr + b * candidates_stride_b + (node + 1) * candidates_stride_n,
                mask=is_draft,
                other=0,
            )
            predicted = tl.where(is_draft, drafts.to(tl.int32), 0)
            predicted = tl.where(node == num_accepted, bonus.to(tl.int32), predicted)
        else:
            bonus = tl.zeros((), tl.int64) + SIMULATED_TOKEN
            predicted = tl.zeros([BLOCK_D], tl.int32) + SIMULATED_TOKEN
        flat = row_base + node
        tl.store(predicts_ptr + flat * predicts_stride, predicted, mask=in_row)
        tl.store(draft_tokens_ptr + flat * draft_tokens_stride, predicted.to(tl.int64), mask=in_row)
    else:
        # verify_tree_greedy's walk without siblings. The walk only ever stands on nodes of this
        # request (root, then children), so every value it needs is a per-node vector: level one
        # loads the nodes' flat ids and links, level two each node's target token (the argmax of
        # logits row flat[j], from its partials: FROM_PARTIALS always holds here) and its child's
        # draft and flat id. The walk then runs in registers. predicts / draft_tokens were zeroed
        # by the first launch.
        candidates_row = candidates_ptr + b * candidates_stride_b
        index_row = retrieve_index_ptr + b * index_stride_b
        flat = tl.load(index_row + node * index_stride_n, mask=in_row, other=-1).to(tl.int64)
        child = tl.load(
            next_token_ptr + b * token_stride_b + node * token_stride_n, mask=in_row, other=-1
        ).to(tl.int64)
        flat_ok = (flat >= 0) & (flat < num_flat)  # an out-of-range id stops the walk there
        child_ok = (child >= 0) & (child < num_nodes)
        child = tl.where(child_ok, child, 0)
        block = tl.arange(0, BLOCKS)
        target = _combine_partials(
            partials_ptr, index_plane,
            tl.where(flat_ok, flat, 0)[:, None] * num_slices + block[None, :],
            flat_ok[:, None] & (block < num_slices)[None, :], vocab, 1,
        )  # fmt: skip
        child_draft = tl.load(candidates_row + child * candidates_stride_n, mask=child_ok, other=0).to(
            tl.int64
        )
        child_flat = tl.load(index_row + child * index_stride_n, mask=child_ok, other=-1).to(tl.int64)
        # The node the walk moves to from node j, -1 where it stops at j (arithmetic: `target` may
        # have another layout, see _pick).
        moves = (child_ok & flat_ok & (child_draft == target)).to(tl.int64)
        next_node = moves * (child + 1) - 1
        tl.store(accept_index_ptr + b * accept_stride_b, _pick(flat, node, 0).to(tl.int32))
        current = tl.zeros((), tl.int64)
        num_accepted = tl.zeros((), tl.int64)
        walking = num_accepted == 0
        on_path = node == 0
        for step in range(1, num_nodes):
            following = _pick(next_node, node, current)
            accepted = walking & (following >= 0)
            tl.store(
                accept_index_ptr + b * accept_stride_b + step * accept_stride_k,
                tl.where(accepted, _pick(child_flat, node, current), -1).to(tl.int32),
            )
            current = tl.where(accepted, following, current)
            on_path = on_path | (node == current)  # unchanged when the walk stopped
            num_accepted += accepted.to(tl.int64)
            walking = accepted
        # Each node on the path holds its target token: the accepted ones the token after them,
        # the last one the bonus. Rows out of range are neither read nor written (bonus 0).
        bonus = _pick(target * flat_ok.to(tl.int64), node, current)
        written = on_path & flat_ok
        at = tl.where(flat_ok, flat, 0)
        tl.store(predicts_ptr + at * predicts_stride, target.to(tl.int32), mask=written)
        tl.store(draft_tokens_ptr + at * draft_tokens_stride, target.to(tl.int32).to(tl.int64), mask=written)

    accept_len = num_accepted + 1
    tl.store(num_correct_ptr + b * num_correct_stride, num_accepted.to(tl.int32))
    tl.store(accept_lens_ptr + b * accept_lens_stride, accept_len.to(tl.int32))
    tl.store(bonus_ptr + b * bonus_stride, bonus.to(tl.int32))
    seq_len = tl.load(seq_lens_ptr + b * seq_lens_stride).to(tl.int64)
    tl.store(new_seq_lens_ptr + b * new_seq_lens_stride, seq_len + accept_len)
    tl.store(select_index_ptr + b * select_index_stride, row_base + num_accepted)


def _target_verify_topk1_postprocess(
    config: LaunchConfig,
    logits: torch.Tensor,
    candidates: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    seq_lens: torch.Tensor,
    num_simulated_accept_tokens: int,
    use_real_draft_tokens: bool,
    out_predicts: torch.Tensor,
    out_num_correct_drafts: torch.Tensor,
    out_accept_lens: torch.Tensor,
    out_accept_index: torch.Tensor,
    out_bonus_tokens: torch.Tensor,
    out_new_seq_lens: torch.Tensor,
    out_select_index: torch.Tensor,
    out_draft_tokens: torch.Tensor,
) -> None:
    batch, num_nodes = candidates.shape
    if batch == 0:
        return
    simulated = num_simulated_accept_tokens > 0
    if simulated:
        # Partials (when a row spans several slices) of the bonus rows only: row b*D + n-1.
        argmax = _Argmax(config, logits, batch)
        if use_real_draft_tokens:
            argmax.launch_partials(row_step=num_nodes, row_offset=num_simulated_accept_tokens - 1)
    else:
        # Always two launches: the first zero-fills the scattered outputs (and takes the partials of
        # every node row) before any request writes its path.
        argmax = _Argmax(config, logits, batch * num_nodes, always_partials=True)
        argmax.launch_partials(zero_fill=(out_predicts, out_draft_tokens))
    _target_verify_topk1_launch(argmax.shape, batch, num_nodes, simulated, use_real_draft_tokens)(
        *argmax.kernel_args(),
        candidates, *candidates.stride(),
        retrieve_index, *retrieve_index.stride(),
        retrieve_next_token, *retrieve_next_token.stride(),
        seq_lens, seq_lens.stride()[0],
        out_predicts, out_predicts.stride()[0],
        out_num_correct_drafts, out_num_correct_drafts.stride()[0],
        out_accept_lens, out_accept_lens.stride()[0],
        out_accept_index, *out_accept_index.stride(),
        out_bonus_tokens, out_bonus_tokens.stride()[0],
        out_new_seq_lens, out_new_seq_lens.stride()[0],
        out_select_index, out_select_index.stride()[0],
        out_draft_tokens, out_draft_tokens.stride()[0],
        num_nodes, num_simulated_accept_tokens,
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _target_verify_topk1_launch(
    shape: _ArgmaxShape, batch: int, num_nodes: int, simulated: bool, use_real_draft_tokens: bool
) -> Launch:
    block_d = next_power_of_2(num_nodes)
    return _target_verify_topk1_kernel.at(
        (batch,),
        SIMULATED=simulated,
        REAL_DRAFT_TOKENS=use_real_draft_tokens,
        SIMULATED_TOKEN=SIMULATED_TOKEN,
        BLOCK_D=block_d,
        **shape.constexprs(),
        num_warps=shape.op_num_warps(1 if simulated else block_d),
    )


# --------------------------------------------------------------------------------------------------
# draft_extend_topk1_postprocess


@kernel
@triton.jit
def _draft_extend_topk1_kernel(
    logits_ptr, stride_row, stride_v, vocab, partials_ptr, index_plane, num_slices,
    row_indices_ptr, row_indices_stride, num_rows,
    hidden_ptr, hidden_stride_n, hidden_stride_h, out_hidden_ptr, out_hidden_stride_b, out_hidden_stride_h,
    hidden_size,
    dsa_ptr, dsa_stride_n, dsa_stride_t, out_dsa_ptr, out_dsa_stride_b, out_dsa_stride_t, dsa_width,
    topk_p_ptr, topk_p_stride, topk_index_ptr, topk_index_stride,
    HAS_HIDDEN: tl.constexpr, HAS_DSA: tl.constexpr, HIDDEN_BLOCK: tl.constexpr, DSA_BLOCK: tl.constexpr,
    FROM_PARTIALS: tl.constexpr, SLICE: tl.constexpr, BLOCKS: tl.constexpr,
):  # fmt: skip
    """``HAS_HIDDEN`` / ``HAS_DSA``: the gathers not already made by the first launch."""
    b = tl.program_id(0).to(tl.int64)
    row = tl.load(row_indices_ptr + b * row_indices_stride).to(tl.int64)
    # An out-of-range row index is a masked lane: request b's outputs keep what they held.
    valid = (row >= 0) & (row < num_rows)
    if valid:
        token = _row_argmax(
            logits_ptr, row, stride_row, stride_v, vocab, partials_ptr, index_plane, b, num_slices,
            FROM_PARTIALS, SLICE, BLOCKS,
        )  # fmt: skip
        tl.store(topk_index_ptr + b * topk_index_stride, token)
        tl.store(topk_p_ptr + b * topk_p_stride, tl.full((), 1.0, tl.float32))
    if HAS_HIDDEN:
        _copy_row_part(
            hidden_ptr + row * hidden_stride_n, hidden_stride_h, out_hidden_ptr + b * out_hidden_stride_b,
            out_hidden_stride_h, hidden_size, valid, 0, 1, HIDDEN_BLOCK,
        )  # fmt: skip
    if HAS_DSA:
        _copy_row_part(
            dsa_ptr + row * dsa_stride_n, dsa_stride_t, out_dsa_ptr + b * out_dsa_stride_b, out_dsa_stride_t,
            dsa_width, valid, 0, 1, DSA_BLOCK,
        )  # fmt: skip


def _draft_extend_topk1_postprocess(
    config: LaunchConfig,
    logits: torch.Tensor,
    row_indices: torch.Tensor,
    hidden_states: torch.Tensor | None,
    dsa_topk_indices: torch.Tensor | None,
    out_topk_p: torch.Tensor,
    out_topk_index: torch.Tensor,
    out_hidden: torch.Tensor | None,
    out_dsa_topk_indices: torch.Tensor | None,
) -> None:
    num_rows = logits.shape[0]
    batch = row_indices.shape[0]
    if num_rows == 0 or batch == 0:
        return  # no row index is in range, or no request: nothing to write
    hidden = _gathered(hidden_states, out_hidden)
    dsa = _gathered(dsa_topk_indices, out_dsa_topk_indices)
    argmax = _Argmax(config, logits, batch)
    # With a first launch, its programs (several per request) make the gathers too.
    argmax.launch_partials(row_indices=row_indices, hidden=hidden, dsa=dsa)
    gather_here = not argmax.shape.from_partials
    _draft_extend_topk1_launch(
        argmax.shape,
        batch,
        _gather_block(config, hidden) if gather_here and hidden is not None else 0,
        _gather_block(config, dsa) if gather_here and dsa is not None else 0,
    )(
        *argmax.kernel_args(),
        row_indices, row_indices.stride()[0], num_rows,
        *_gather_args(hidden), *_gather_args(dsa),
        out_topk_p, out_topk_p.stride()[0], out_topk_index, out_topk_index.stride()[0],
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _draft_extend_topk1_launch(shape: _ArgmaxShape, batch: int, hidden_block: int, dsa_block: int) -> Launch:
    """A gather block of 0: the gather is not made here (absent, or made by the first launch)."""
    return _draft_extend_topk1_kernel.at(
        (batch,),
        HAS_HIDDEN=hidden_block > 0,
        HAS_DSA=dsa_block > 0,
        HIDDEN_BLOCK=max(hidden_block, 1),
        DSA_BLOCK=max(dsa_block, 1),
        **shape.constexprs(),
        num_warps=shape.op_num_warps(),
    )


# --------------------------------------------------------------------------------------------------

#: The family's launchers of this module.
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("draft_topk1_postprocess", _draft_topk1_postprocess),
    Launcher("target_verify_topk1_postprocess", _target_verify_topk1_postprocess),
    Launcher("draft_extend_topk1_postprocess", _draft_extend_topk1_postprocess),
)
