"""Triton kernels of family D: the topk = 1 post-processing ops (D6). The other family D ops stay
portable (torch runs them in one or two launches).

All three take the D6 argmax of logits rows: compared in fp32, NaN as -1e30, ties to the lowest id.
A row is split in 8192-wide vocabulary blocks (the spec's split); when V > 8192 a first launch
writes one ``(max, first index)`` partial per (row, block) into a scratch ``[rows, blocks]`` and the
op's kernel reduces a row's partials; when V <= 8192 the op's kernel reads the row itself and the
op is one launch. The op's kernel (one program per output row or request) does the bookkeeping:

* ``draft_topk1_postprocess``: topk_p = 1, topk_index, positions += 1, draft_tokens[:, column];
* ``target_verify_topk1_postprocess``: the chain walk of the greedy verify (or the simulated
  override) and every output. A real verify writes ``predicts`` at the flat ids on each path, which
  may lie in another request's rows, and 0 everywhere else: the zero fill happens in the first launch
  (always made for a real verify, with the argmax partials of every node row), so no program's fill
  can land after another program's path write;
* ``draft_extend_topk1_postprocess``: the argmax of ``logits[row_indices[b]]`` and the gathers of the
  same row of ``hidden_states`` / ``dsa_topk_indices``; out-of-range row indices write nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from ...ops.sampling import SIMULATED_TOKEN
from ...registry import TRITON, register_impl
from .config import LaunchConfig

#: The vocabulary split of the D6 argmax (spec ops.md D6).
ARGMAX_SPLIT = 8192
#: Lanes one program compares at a time inside a split block (registers, not semantics).
_ARGMAX_CHUNK = 2048
#: A NaN logit ranks as this value (D6); a constexpr: kernels read it.
_NAN_LOGIT = tl.constexpr(-1e30)


# --------------------------------------------------------------------------------------------------
# The split argmax


@triton.jit
def _argmax_of_range(row_ptr, stride_v, start, stop, CHUNK: tl.constexpr):
    """(max, lowest index of the max) of ``row[start:stop]`` (non-empty) in fp32, NaN as -1e30."""
    best = tl.full((), float("-inf"), tl.float32)
    best_index = tl.zeros((), tl.int64) + start  # an all -inf range answers its first index
    for chunk in range(start, stop, CHUNK):
        lanes = chunk + tl.arange(0, CHUNK).to(tl.int64)
        inside = lanes < stop
        values = tl.load(row_ptr + lanes * stride_v, mask=inside, other=float("-inf")).to(tl.float32)
        values = tl.where(values != values, _NAN_LOGIT, values)
        chunk_max = tl.max(values, 0)
        chunk_index = tl.min(tl.where(inside & (values == chunk_max), lanes, stop), 0)
        better = chunk_max > best  # strictly: an equal later chunk keeps the lower index
        best_index = tl.where(better, chunk_index, best_index)
        best = tl.where(better, chunk_max, best)
    return best, best_index


@triton.jit
def _row_argmax(
    logits_ptr, row, stride_row, stride_v, vocab, partial_max_ptr, partial_index_ptr, partial_row, num_blocks,
    FROM_PARTIALS: tl.constexpr, CHUNK: tl.constexpr, BLOCKS: tl.constexpr,
):  # fmt: skip
    """The D6 argmax (int64) of logits row ``row``, or of the partials of ``partial_row``."""
    if FROM_PARTIALS:
        block = tl.arange(0, BLOCKS)
        inside = block < num_blocks
        at = partial_row * num_blocks + block
        maxima = tl.load(partial_max_ptr + at, mask=inside, other=float("-inf"))
        indices = tl.load(partial_index_ptr + at, mask=inside, other=0).to(tl.int64)
        best = tl.max(maxima, 0)
        # Blocks cover ascending index ranges: the lowest index among the tied blocks wins.
        index = tl.min(tl.where(inside & (maxima == best), indices, vocab), 0)
    else:
        _, index = _argmax_of_range(logits_ptr + row * stride_row, stride_v, 0, vocab, CHUNK)
    return index


@triton.jit
def _argmax_partials_kernel(
    logits_ptr, stride_row, stride_v, num_logit_rows, vocab,
    row_indices_ptr, row_indices_stride, row_step, row_offset,
    partial_max_ptr, partial_index_ptr, num_partial_rows, num_blocks,
    zero_int32_ptr, zero_int32_stride, zero_int64_ptr, zero_int64_stride, num_zero,
    HAS_ROW_INDICES: tl.constexpr, ZERO_FILL: tl.constexpr, SPLIT: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """Program (q, k): the (max, index) partials of block k of partial rows p = q, q + grid, ... (the
    grid is capped at ``max_grid``); partial row p reads logits row ``row_indices[p]`` or
    ``p * row_step + row_offset``, and an out-of-range row writes nothing. ``ZERO_FILL``: programs
    (q, 0) also zero entry p of the two outputs the op's kernel scatters into."""
    k = tl.program_id(1).to(tl.int64)
    start = k * SPLIT
    stop = tl.minimum(start + SPLIT, vocab)
    for q in range(tl.program_id(0), num_partial_rows, tl.num_programs(0)):
        p = tl.zeros((), tl.int64) + q
        if ZERO_FILL:
            fill = (k == 0) & (p < num_zero)
            tl.store(zero_int32_ptr + p * zero_int32_stride, tl.zeros((), tl.int32), mask=fill)
            tl.store(zero_int64_ptr + p * zero_int64_stride, tl.zeros((), tl.int64), mask=fill)
        if HAS_ROW_INDICES:
            row = tl.load(row_indices_ptr + p * row_indices_stride).to(tl.int64)
        else:
            row = p * row_step + row_offset
        if (row >= 0) & (row < num_logit_rows):
            best, index = _argmax_of_range(logits_ptr + row * stride_row, stride_v, start, stop, CHUNK)
            tl.store(partial_max_ptr + p * num_blocks + k, best)
            tl.store(partial_index_ptr + p * num_blocks + k, index.to(tl.int32))


class _Argmax:
    """How an op's kernel gets its argmax: the launch parameters, and the partials when V > 8192."""

    def __init__(
        self, config: LaunchConfig, logits: torch.Tensor, num_partial_rows: int, *, always_partials=False
    ):
        self.logits = logits
        self.vocab = logits.shape[1]
        self.num_blocks = triton.cdiv(self.vocab, ARGMAX_SPLIT)
        self.from_partials = always_partials or self.num_blocks > 1
        self.config = config
        self.num_partial_rows = num_partial_rows
        self.partial_max = self.partial_index = None
        if self.from_partials:
            shape = (num_partial_rows, self.num_blocks)
            self.partial_max = torch.empty(shape, dtype=torch.float32, device=logits.device)
            self.partial_index = torch.empty(shape, dtype=torch.int32, device=logits.device)

    def launch_partials(
        self, *, row_indices=None, row_step=1, row_offset=0, zero_int32=None, zero_int64=None
    ) -> None:
        """First launch (only when the argmax reads partials); ``zero_*``: 1-D outputs to zero-fill."""
        if not self.from_partials:
            return
        zero_fill = zero_int32 is not None
        grid = (min(self.num_partial_rows, self.config.max_grid), self.num_blocks)
        _argmax_partials_kernel[grid](
            self.logits, *self.logits.stride(), self.logits.shape[0], self.vocab,
            row_indices, 0 if row_indices is None else row_indices.stride(0), row_step, row_offset,
            self.partial_max, self.partial_index, self.num_partial_rows, self.num_blocks,
            zero_int32, zero_int32.stride(0) if zero_fill else 0,
            zero_int64, zero_int64.stride(0) if zero_fill else 0, zero_int32.numel() if zero_fill else 0,
            HAS_ROW_INDICES=row_indices is not None, ZERO_FILL=zero_fill,
            SPLIT=ARGMAX_SPLIT, CHUNK=self.chunk, num_warps=self.config.copy_num_warps,
        )  # fmt: skip

    @property
    def chunk(self) -> int:
        return min(_ARGMAX_CHUNK, triton.next_power_of_2(max(min(self.vocab, ARGMAX_SPLIT), 1)))

    def kernel_args(self) -> tuple:
        """The ``_row_argmax`` arguments an op's kernel takes (logits first)."""
        return (
            self.logits,
            *self.logits.stride(),
            self.vocab,
            self.partial_max,
            self.partial_index,
            self.num_blocks,
        )

    def constexprs(self) -> dict[str, object]:
        return {
            "FROM_PARTIALS": self.from_partials,
            "CHUNK": self.chunk,
            "BLOCKS": triton.next_power_of_2(max(self.num_blocks, 1)),
        }


# --------------------------------------------------------------------------------------------------
# draft_topk1_postprocess


@triton.jit
def _draft_topk1_kernel(
    logits_ptr, stride_row, stride_v, vocab, partial_max_ptr, partial_index_ptr, num_blocks,
    positions_ptr, positions_stride,
    draft_tokens_ptr, draft_stride_b, draft_stride_c, draft_column,
    topk_p_ptr, topk_p_stride, topk_index_ptr, topk_index_stride,
    HAS_DRAFT_TOKENS: tl.constexpr, FROM_PARTIALS: tl.constexpr, CHUNK: tl.constexpr, BLOCKS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    token = _row_argmax(
        logits_ptr, row, stride_row, stride_v, vocab, partial_max_ptr, partial_index_ptr, row, num_blocks,
        FROM_PARTIALS, CHUNK, BLOCKS,
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
    argmax = _Argmax(config, logits, batch)
    argmax.launch_partials()
    draft_strides = (0, 0) if draft_tokens is None else draft_tokens.stride()
    _draft_topk1_kernel[(batch,)](
        *argmax.kernel_args(),
        positions, positions.stride(0),
        draft_tokens, *draft_strides, draft_token_column,
        out_topk_p, out_topk_p.stride(0), out_topk_index, out_topk_index.stride(0),
        HAS_DRAFT_TOKENS=draft_tokens is not None, **argmax.constexprs(), num_warps=config.num_warps,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# target_verify_topk1_postprocess


@triton.jit
def _target_verify_topk1_kernel(
    logits_ptr, stride_row, stride_v, vocab, partial_max_ptr, partial_index_ptr, num_blocks,
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
    BLOCK_D: tl.constexpr, FROM_PARTIALS: tl.constexpr, CHUNK: tl.constexpr, BLOCKS: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    num_flat = tl.num_programs(0).to(tl.int64) * num_nodes
    row_base = b * num_nodes
    if SIMULATED:
        # Every request accepts n - 1 drafts; its rows are fully written here (no scatter).
        node = tl.arange(0, BLOCK_D).to(tl.int64)
        in_row = node < num_nodes
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
                partial_max_ptr, partial_index_ptr, b, num_blocks, FROM_PARTIALS, CHUNK, BLOCKS,
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
        # verify_tree_greedy's walk without siblings; the target's token at flat id g is the argmax
        # of logits row g (its partials). predicts / draft_tokens were zeroed by the first launch.
        candidates_row = candidates_ptr + b * candidates_stride_b
        index_row = retrieve_index_ptr + b * index_stride_b
        last = tl.load(index_row).to(tl.int64)
        tl.store(accept_index_ptr + b * accept_stride_b, last.to(tl.int32))
        current = tl.zeros((), tl.int64)
        num_accepted = tl.zeros((), tl.int64)
        walking = num_accepted == 0
        for step in range(1, num_nodes):
            child = tl.load(next_token_ptr + b * token_stride_b + current * token_stride_n).to(tl.int64)
            child_ok = (child >= 0) & (child < num_nodes)
            child = tl.where(child_ok, child, 0)
            last_ok = (last >= 0) & (last < num_flat)
            read = tl.where(last_ok, last, 0)  # an out-of-range id stops the walk; read a valid row
            target = _row_argmax(
                logits_ptr, read, stride_row, stride_v, vocab,
                partial_max_ptr, partial_index_ptr, read, num_blocks, FROM_PARTIALS, CHUNK, BLOCKS,
            )  # fmt: skip
            draft = tl.load(candidates_row + child * candidates_stride_n).to(tl.int64)
            accepted = walking & child_ok & last_ok & (draft == target)
            tl.store(predicts_ptr + last * predicts_stride, target.to(tl.int32), mask=accepted)
            tl.store(
                draft_tokens_ptr + last * draft_tokens_stride, target.to(tl.int32).to(tl.int64), mask=accepted
            )
            child_flat = tl.load(index_row + child * index_stride_n).to(tl.int64)
            tl.store(
                accept_index_ptr + b * accept_stride_b + step * accept_stride_k,
                tl.where(accepted, child_flat, -1).to(tl.int32),
            )
            last = tl.where(accepted, child_flat, last)
            current = tl.where(accepted, child, current)
            num_accepted += accepted.to(tl.int64)
            walking = accepted
        last_ok = (last >= 0) & (last < num_flat)
        read = tl.where(last_ok, last, 0)
        bonus = _row_argmax(
            logits_ptr, read, stride_row, stride_v, vocab,
            partial_max_ptr, partial_index_ptr, read, num_blocks, FROM_PARTIALS, CHUNK, BLOCKS,
        )  # fmt: skip
        bonus = tl.where(last_ok, bonus, 0)
        tl.store(predicts_ptr + last * predicts_stride, bonus.to(tl.int32), mask=last_ok)
        tl.store(draft_tokens_ptr + last * draft_tokens_stride, bonus.to(tl.int32).to(tl.int64), mask=last_ok)

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
    simulated = num_simulated_accept_tokens > 0
    if simulated:
        # Partials (V > 8192) of the bonus rows only: row b*D + n-1 for request b.
        argmax = _Argmax(config, logits, batch)
        if use_real_draft_tokens:
            argmax.launch_partials(row_step=num_nodes, row_offset=num_simulated_accept_tokens - 1)
    else:
        # Always two launches: the first zero-fills the scattered outputs (and takes the partials of
        # every node row) before any request writes its path.
        argmax = _Argmax(config, logits, batch * num_nodes, always_partials=True)
        argmax.launch_partials(zero_int32=out_predicts, zero_int64=out_draft_tokens)
    _target_verify_topk1_kernel[(batch,)](
        *argmax.kernel_args(),
        candidates, *candidates.stride(),
        retrieve_index, *retrieve_index.stride(),
        retrieve_next_token, *retrieve_next_token.stride(),
        seq_lens, seq_lens.stride(0),
        out_predicts, out_predicts.stride(0),
        out_num_correct_drafts, out_num_correct_drafts.stride(0),
        out_accept_lens, out_accept_lens.stride(0),
        out_accept_index, *out_accept_index.stride(),
        out_bonus_tokens, out_bonus_tokens.stride(0),
        out_new_seq_lens, out_new_seq_lens.stride(0),
        out_select_index, out_select_index.stride(0),
        out_draft_tokens, out_draft_tokens.stride(0),
        num_nodes, num_simulated_accept_tokens,
        SIMULATED=simulated, REAL_DRAFT_TOKENS=use_real_draft_tokens, SIMULATED_TOKEN=SIMULATED_TOKEN,
        BLOCK_D=triton.next_power_of_2(num_nodes), **argmax.constexprs(), num_warps=config.num_warps,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# draft_extend_topk1_postprocess


@triton.jit
def _copy_row(src_ptr, dst_ptr, src_stride, dst_stride, length, valid, BLOCK: tl.constexpr):
    for start in range(0, length, BLOCK):
        lanes = start + tl.arange(0, BLOCK).to(tl.int64)
        inside = valid & (lanes < length)
        tl.store(
            dst_ptr + lanes * dst_stride, tl.load(src_ptr + lanes * src_stride, mask=inside), mask=inside
        )


@triton.jit
def _draft_extend_topk1_kernel(
    logits_ptr, stride_row, stride_v, vocab, partial_max_ptr, partial_index_ptr, num_blocks,
    row_indices_ptr, row_indices_stride, num_rows,
    hidden_ptr, hidden_stride_n, hidden_stride_h, hidden_size,
    dsa_ptr, dsa_stride_n, dsa_stride_t, dsa_width,
    topk_p_ptr, topk_p_stride, topk_index_ptr, topk_index_stride,
    out_hidden_ptr, out_hidden_stride_b, out_hidden_stride_h,
    out_dsa_ptr, out_dsa_stride_b, out_dsa_stride_t,
    HAS_HIDDEN: tl.constexpr, HAS_DSA: tl.constexpr, HIDDEN_BLOCK: tl.constexpr, DSA_BLOCK: tl.constexpr,
    FROM_PARTIALS: tl.constexpr, CHUNK: tl.constexpr, BLOCKS: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    row = tl.load(row_indices_ptr + b * row_indices_stride).to(tl.int64)
    # An out-of-range row index is a masked lane: request b's outputs keep what they held.
    if (row >= 0) & (row < num_rows):
        token = _row_argmax(
            logits_ptr, row, stride_row, stride_v, vocab, partial_max_ptr, partial_index_ptr, b, num_blocks,
            FROM_PARTIALS, CHUNK, BLOCKS,
        )  # fmt: skip
        tl.store(topk_index_ptr + b * topk_index_stride, token)
        tl.store(topk_p_ptr + b * topk_p_stride, tl.full((), 1.0, tl.float32))
    valid = (row >= 0) & (row < num_rows)
    if HAS_HIDDEN:
        _copy_row(
            hidden_ptr + row * hidden_stride_n, out_hidden_ptr + b * out_hidden_stride_b,
            hidden_stride_h, out_hidden_stride_h, hidden_size, valid, HIDDEN_BLOCK,
        )  # fmt: skip
    if HAS_DSA:
        _copy_row(
            dsa_ptr + row * dsa_stride_n, out_dsa_ptr + b * out_dsa_stride_b,
            dsa_stride_t, out_dsa_stride_t, dsa_width, valid, DSA_BLOCK,
        )  # fmt: skip


def _copy_block(config: LaunchConfig, rows: torch.Tensor | None) -> int:
    """Elements per step of a row gather: the vendor's bandwidth tile, at most the row."""
    if rows is None:
        return 1
    lanes = triton.next_power_of_2(max(config.copy_block_bytes // rows.element_size(), 1))
    return min(lanes, triton.next_power_of_2(max(rows.shape[1], 1)))


def _strides_2d(tensor: torch.Tensor | None) -> tuple[int, int]:
    """Strides of an optional [rows, cols] tensor ((0, 0) when absent: the kernel never reads it)."""
    return (tensor.stride(0), tensor.stride(1)) if tensor is not None else (0, 0)


def _width(tensor: torch.Tensor | None) -> int:
    return tensor.shape[1] if tensor is not None else 0


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
    if num_rows == 0:
        return  # every row index is out of range: nothing to write
    batch = row_indices.shape[0]
    has_hidden = hidden_states is not None and out_hidden is not None
    has_dsa = dsa_topk_indices is not None and out_dsa_topk_indices is not None
    argmax = _Argmax(config, logits, batch)
    argmax.launch_partials(row_indices=row_indices)
    _draft_extend_topk1_kernel[(batch,)](
        *argmax.kernel_args(),
        row_indices, row_indices.stride(0), num_rows,
        hidden_states, *_strides_2d(hidden_states),
        _width(hidden_states),
        dsa_topk_indices, *_strides_2d(dsa_topk_indices),
        _width(dsa_topk_indices),
        out_topk_p, out_topk_p.stride(0), out_topk_index, out_topk_index.stride(0),
        out_hidden, *_strides_2d(out_hidden),
        out_dsa_topk_indices, *_strides_2d(out_dsa_topk_indices),
        HAS_HIDDEN=has_hidden, HAS_DSA=has_dsa,
        HIDDEN_BLOCK=_copy_block(config, hidden_states), DSA_BLOCK=_copy_block(config, dsa_topk_indices),
        **argmax.constexprs(), num_warps=config.num_warps,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------

_PROVIDERS: dict[str, Callable[..., None]] = {
    "draft_topk1_postprocess": _draft_topk1_postprocess,
    "target_verify_topk1_postprocess": _target_verify_topk1_postprocess,
    "draft_extend_topk1_postprocess": _draft_extend_topk1_postprocess,
}


def register(vendor: str, config: LaunchConfig) -> list[str]:
    """Register the D6 Triton providers of ``vendor`` (every index dtype and float logits dtype)."""
    for op, provider in _PROVIDERS.items():
        register_impl(op, vendor, TRITON, functools.partial(provider, config))
    return list(_PROVIDERS)
