"""Family D, topk = 1 post-processing: after the draft, target-verify and draft-extend forwards of a
chain (topk = 1), one argmax per row and the bookkeeping that follows it."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ..._constants import SIMULATED_TOKEN
from ...opdef import OpDef, define_op
from ...validation import (
    ANY_SIZE,
    OutputSpec,
    check_distinct_elements,
    check_fits_int32,
    check_float_matrix,
    check_index,
    check_logits,
    check_non_negative,
    check_positive_int,
    check_range,
    check_sum_fits,
    check_tensor,
    checked_outputs,
    common_device,
    value_checks_enabled,
)
from ._common import argmax_nan_low

# --------------------------------------------------------------------------------------------------
# D6 topk = 1 postprocessing (the three share argmax_nan_low)


def _draft_topk1_postprocess_reference(
    logits: Tensor,
    positions: Tensor,
    draft_tokens: Tensor | None,
    draft_token_column: int,
    out_topk_p: Tensor,
    out_topk_index: Tensor,
) -> None:
    tokens = argmax_nan_low(logits)
    out_topk_index.copy_(tokens)
    out_topk_p.fill_(1.0)
    positions.add_(1)
    if draft_tokens is not None:
        draft_tokens[:, draft_token_column].copy_(tokens.squeeze(1))


@define_op(
    _draft_topk1_postprocess_reference,
    mutates=("positions", "draft_tokens", "out_topk_p", "out_topk_index"),
    op_class="bandwidth",
    variant=("positions",),
)
def draft_topk1_postprocess(
    op: OpDef,
    logits: Tensor,
    positions: Tensor,
    draft_tokens: Tensor | None = None,
    draft_token_column: int = 0,
    out: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """One chain (topk = 1) draft step: greedy token, advance positions, record the token.

    Used after each draft forward of MTP/NextN (topk = 1): ``topk_index = argmax(logits)`` (NaN
    ranks as -1e30, ties lowest id), ``topk_p = 1``; ``positions += 1``; and when ``draft_tokens`` is
    given, ``draft_tokens[:, draft_token_column] = topk_index`` (other columns untouched).

    Args:
        logits: ``[B, V]`` floating, unit stride along V.
        positions: ``[B]`` int32/int64, incremented in place; its entries in distinct memory (not
            an expanded tensor).
        draft_tokens: optional ``[B, C]`` int64, column ``draft_token_column`` written.
        draft_token_column: ``0 <= column < C``.
        out: optional ``(topk_p[B, 1] f32, topk_index[B, 1] i64)``.

    Returns:
        ``(topk_p, topk_index)``.
    """
    check_logits(logits)
    batch, vocab = logits.shape
    if vocab > 1 and logits.stride()[1] != 1:
        raise ValueError(f"logits: expected unit stride along V, got strides {logits.stride()}")
    check_index("positions", positions, shape=(batch,))
    check_distinct_elements("positions", positions)
    check_positive_int("draft_token_column", draft_token_column, minimum=0)
    if draft_tokens is not None:
        check_tensor("draft_tokens", draft_tokens, dtype=torch.int64, shape=(batch, ANY_SIZE))
        if draft_token_column >= draft_tokens.shape[1]:
            raise ValueError(
                f"draft_token_column: expected < draft_tokens.shape[1] = {draft_tokens.shape[1]}, "
                f"got {draft_token_column}"
            )
    device = common_device(logits=logits, positions=positions, draft_tokens=draft_tokens)
    specs: list[OutputSpec | None] = [
        ("out[0]", (batch, 1), torch.float32),
        ("out[1]", (batch, 1), torch.int64),
    ]
    topk_p, topk_index = checked_outputs(out, specs, device)
    assert topk_p is not None and topk_index is not None
    if value_checks_enabled(device):
        check_sum_fits("positions", positions, positions.dtype, constant=1, expression="positions + 1")
    if batch > 0:
        op.dispatch(device, logits, positions, draft_tokens, draft_token_column, topk_p, topk_index)
    return topk_p, topk_index


class TargetVerifyTopk1Output(NamedTuple):
    """The results of ``target_verify_topk1_postprocess`` (§P order)."""

    predicts: Tensor  # [bs*D] int32
    num_correct_drafts: Tensor  # [bs] int32
    accept_lens: Tensor  # [bs] int32
    accept_index: Tensor  # [bs, D] int32
    bonus_tokens: Tensor  # [bs] int32
    new_seq_lens: Tensor  # [bs] int64
    select_index: Tensor  # [bs] int64
    draft_tokens: Tensor  # [bs*D] int64


def _greedy_chain_walk(
    target_tokens: Tensor, candidates: Tensor, retrieve_index: Tensor, retrieve_next_token: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """C3's walk without siblings: accept while the child's draft token is the target's token.

    Returns ``(predicts[bs*D] i32, num_correct_drafts[bs] i64, accept_index[bs, D] i64,
    bonus[bs] i64)``. Out-of-range ids stop the walk and are never used as write positions.
    """
    batch, draft_token_num = candidates.shape
    num_nodes = batch * draft_token_num
    device = candidates.device
    # One scratch entry past the nodes takes the writes of lanes that must not write.
    predicts = torch.zeros(num_nodes + 1, dtype=torch.int32, device=device)
    accept_index = torch.full((batch, draft_token_num), -1, dtype=torch.int64, device=device)
    last = retrieve_index[:, 0].long()
    accept_index[:, 0] = last
    current = torch.zeros(batch, 1, dtype=torch.int64, device=device)
    num_correct = torch.zeros(batch, dtype=torch.int64, device=device)
    walking = torch.ones(batch, dtype=torch.bool, device=device)
    for step in range(1, draft_token_num):
        child = retrieve_next_token.gather(1, current).long()
        child_ok = (child >= 0) & (child < draft_token_num)
        child = torch.where(child_ok, child, 0)
        last_ok = (last >= 0) & (last < num_nodes)
        target_at_last = target_tokens[torch.where(last_ok, last, 0)]
        accepted = walking & child_ok.squeeze(1) & last_ok
        accepted &= candidates.gather(1, child).squeeze(1).long() == target_at_last
        predicts.scatter_(0, torch.where(accepted, last, num_nodes), target_at_last.int())
        child_node = retrieve_index.gather(1, child).squeeze(1).long()
        accept_index[:, step] = torch.where(accepted, child_node, -1)
        last = torch.where(accepted, child_node, last)
        current = torch.where(accepted.unsqueeze(1), child, current)
        num_correct += accepted.long()
        walking = accepted
    last_ok = (last >= 0) & (last < num_nodes)
    bonus = torch.where(last_ok, target_tokens[torch.where(last_ok, last, 0)], 0)
    predicts.scatter_(0, torch.where(last_ok, last, num_nodes), bonus.int())
    return predicts[:num_nodes], num_correct, accept_index, bonus


def _simulated_chain(
    logits: Tensor, candidates: Tensor, num_accept: int, use_real_draft_tokens: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The simulated-acceptance override (like E2): every row accepts ``num_accept - 1`` drafts."""
    batch, draft_token_num = candidates.shape
    device = candidates.device
    node = torch.arange(draft_token_num, device=device)
    row_base = torch.arange(batch, device=device).unsqueeze(1) * draft_token_num
    accept_index = torch.where(node < num_accept, row_base + node, -1)
    num_correct = torch.full((batch,), num_accept - 1, dtype=torch.int64, device=device)
    if use_real_draft_tokens:
        # Only row b*D + num_accept - 1 feeds the bonus: argmax just those rows.
        bonus = argmax_nan_low(logits[num_accept - 1 :: draft_token_num]).squeeze(1)
        predicts = torch.zeros(batch, draft_token_num, dtype=torch.int32, device=device)
        predicts[:, : num_accept - 1] = candidates[:, 1:num_accept]
        predicts[:, num_accept - 1] = bonus
        predicts = predicts.flatten()
    else:
        bonus = torch.full((batch,), SIMULATED_TOKEN, dtype=torch.int64, device=device)
        predicts = torch.full((batch * draft_token_num,), SIMULATED_TOKEN, dtype=torch.int32, device=device)
    return predicts, num_correct, accept_index, bonus


def _target_verify_topk1_postprocess_reference(
    logits: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    seq_lens: Tensor,
    num_simulated_accept_tokens: int,
    use_real_draft_tokens: bool,
    out_predicts: Tensor,
    out_num_correct_drafts: Tensor,
    out_accept_lens: Tensor,
    out_accept_index: Tensor,
    out_bonus_tokens: Tensor,
    out_new_seq_lens: Tensor,
    out_select_index: Tensor,
    out_draft_tokens: Tensor,
) -> None:
    batch, draft_token_num = candidates.shape
    if num_simulated_accept_tokens > 0:
        chain = _simulated_chain(logits, candidates, num_simulated_accept_tokens, use_real_draft_tokens)
    else:
        target_tokens = argmax_nan_low(logits).flatten()
        chain = _greedy_chain_walk(target_tokens, candidates, retrieve_index, retrieve_next_token)
    predicts, num_correct, accept_index, bonus = chain
    accept_lens = num_correct + 1
    out_predicts.copy_(predicts)
    out_draft_tokens.copy_(predicts)
    out_num_correct_drafts.copy_(num_correct)
    out_accept_lens.copy_(accept_lens)
    out_accept_index.copy_(accept_index)
    out_bonus_tokens.copy_(bonus)
    out_new_seq_lens.copy_(seq_lens.long() + accept_lens)
    out_select_index.copy_(torch.arange(batch, device=candidates.device) * draft_token_num + num_correct)


@define_op(
    _target_verify_topk1_postprocess_reference,
    mutates=(
        "out_predicts",
        "out_num_correct_drafts",
        "out_accept_lens",
        "out_accept_index",
        "out_bonus_tokens",
        "out_new_seq_lens",
        "out_select_index",
        "out_draft_tokens",
    ),
    op_class="bandwidth",
    variant=("candidates", "retrieve_index", "retrieve_next_token", "seq_lens"),
)
def target_verify_topk1_postprocess(
    op: OpDef,
    logits: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    seq_lens: Tensor,
    num_simulated_accept_tokens: int = 0,
    use_real_draft_tokens: bool = False,
    out: TargetVerifyTopk1Output | tuple | None = None,
) -> TargetVerifyTopk1Output:
    """Greedy verify of chain drafts (topk = 1) straight from the target's logits, in one op.

    Used after TARGET_VERIFY for MTP/NextN chains: the target's token at each node is the D6 argmax
    of its logits row (NaN as -1e30, ties lowest id); then ``verify_tree_greedy``'s walk without
    siblings. ``predicts`` holds the target token at each accepted node and the bonus at the last
    one (0 elsewhere); ``accept_index`` the accepted flat ids, -1 padded; ``accept_lens =
    num_correct_drafts + 1``; ``new_seq_lens = seq_lens + accept_lens``; ``select_index = b*D +
    num_correct_drafts``; ``draft_tokens`` is ``predicts`` as int64.

    Simulated acceptance (benchmarking): ``n = num_simulated_accept_tokens > 0`` accepts ``n - 1``
    drafts in every row (``accept_index`` row ``b*D + [0, n)``); with ``use_real_draft_tokens``
    ``predicts[b*D + k] = candidates[b, k+1]`` for ``k < n-1`` and the bonus is the argmax of row
    ``b*D + n-1``, else every ``predicts`` entry and the bonus are 100.

    Args:
        logits: ``[bs*D, V]`` floating, one row per draft node (after penalties/grammar masks).
        candidates, retrieve_index, retrieve_next_token: ``[bs, D]`` int32/int64.
        seq_lens: ``[bs]`` int32/int64, committed lengths before this step.
        num_simulated_accept_tokens: ``0 <= n <= D``; 0 verifies for real.
        use_real_draft_tokens: needs ``n > 0``.
        out: optional ``TargetVerifyTopk1Output`` (or 8-tuple) of outputs.

    Returns:
        ``TargetVerifyTopk1Output``.
    """
    check_index("candidates", candidates, ndim=2)
    batch, draft_token_num = candidates.shape
    if draft_token_num == 0:
        raise ValueError("candidates: expected D >= 1 columns (node 0 is the root)")
    check_float_matrix("logits", logits)
    check_tensor("logits", logits, shape=(batch * draft_token_num, ANY_SIZE))
    check_index("retrieve_index", retrieve_index, shape=(batch, draft_token_num))
    check_index("retrieve_next_token", retrieve_next_token, shape=(batch, draft_token_num))
    check_index("seq_lens", seq_lens, shape=(batch,))
    device = common_device(
        logits=logits,
        candidates=candidates,
        retrieve_index=retrieve_index,
        retrieve_next_token=retrieve_next_token,
        seq_lens=seq_lens,
    )
    check_positive_int("num_simulated_accept_tokens", num_simulated_accept_tokens, minimum=0)
    if num_simulated_accept_tokens > draft_token_num:
        raise ValueError(
            f"num_simulated_accept_tokens: expected at most D = {draft_token_num}, got {num_simulated_accept_tokens}"
        )
    if not isinstance(use_real_draft_tokens, bool):
        raise TypeError(f"use_real_draft_tokens: expected a bool, got {type(use_real_draft_tokens).__name__}")
    if use_real_draft_tokens and num_simulated_accept_tokens == 0:
        raise ValueError("use_real_draft_tokens: needs num_simulated_accept_tokens > 0")
    if logits.shape[1] == 0 and (num_simulated_accept_tokens == 0 or use_real_draft_tokens):
        raise ValueError("logits: expected a non-empty vocabulary (V >= 1)")
    if value_checks_enabled(device):
        check_range("retrieve_index", retrieve_index, 0, batch * draft_token_num)
        check_range("retrieve_next_token", retrieve_next_token, 0, draft_token_num, allow=-1)
        check_non_negative("seq_lens", seq_lens)
        check_sum_fits(
            "seq_lens",
            seq_lens,
            torch.int64,
            constant=draft_token_num,
            expression="seq_lens + accept_lens (<= D)",
        )
        if use_real_draft_tokens:
            check_fits_int32("candidates", candidates[:, 1:num_simulated_accept_tokens])
    nodes = batch * draft_token_num
    specs: list[OutputSpec | None] = [
        ("out.predicts", (nodes,), torch.int32),
        ("out.num_correct_drafts", (batch,), torch.int32),
        ("out.accept_lens", (batch,), torch.int32),
        ("out.accept_index", (batch, draft_token_num), torch.int32),
        ("out.bonus_tokens", (batch,), torch.int32),
        ("out.new_seq_lens", (batch,), torch.int64),
        ("out.select_index", (batch,), torch.int64),
        ("out.draft_tokens", (nodes,), torch.int64),
    ]
    result = TargetVerifyTopk1Output(*checked_outputs(out, specs, device))  # type: ignore[arg-type]
    if batch > 0:
        op.dispatch(
            device, logits, candidates, retrieve_index, retrieve_next_token, seq_lens,
            num_simulated_accept_tokens, use_real_draft_tokens, *result,
        )  # fmt: skip
    return result


def _draft_extend_topk1_postprocess_reference(
    logits: Tensor,
    row_indices: Tensor,
    hidden_states: Tensor | None,
    dsa_topk_indices: Tensor | None,
    out_topk_p: Tensor,
    out_topk_index: Tensor,
    out_hidden: Tensor | None,
    out_dsa_topk_indices: Tensor | None,
) -> None:
    num_rows = logits.shape[0]
    if num_rows == 0:  # every row index is out of range: nothing to write
        return
    rows = row_indices.long()
    row_ok = ((rows >= 0) & (rows < num_rows)).unsqueeze(1)
    safe_rows = torch.where(row_ok.squeeze(1), rows, 0)

    def write_valid_rows(out: Tensor, values: Tensor | float) -> None:
        # Out-of-range row indices are masked lanes: their output rows keep what they held.
        out.copy_(torch.where(row_ok, values, out))

    write_valid_rows(out_topk_index, argmax_nan_low(logits.index_select(0, safe_rows)))
    write_valid_rows(out_topk_p, 1.0)
    if hidden_states is not None and out_hidden is not None:
        write_valid_rows(out_hidden, hidden_states.index_select(0, safe_rows))
    if dsa_topk_indices is not None and out_dsa_topk_indices is not None:
        write_valid_rows(out_dsa_topk_indices, dsa_topk_indices.index_select(0, safe_rows))


def _draft_extend_bytes(
    logits: Tensor,
    row_indices: Tensor,
    hidden_states: Tensor | None,
    dsa_topk_indices: Tensor | None,
    **_: object,
) -> int:
    """Only the selected logits rows are read; the gathered rows are read and written."""
    rows = row_indices.numel()
    gathered = sum(t.shape[1] * t.element_size() for t in (hidden_states, dsa_topk_indices) if t is not None)
    return rows * logits.shape[1] * logits.element_size() + 2 * rows * gathered


@define_op(
    _draft_extend_topk1_postprocess_reference,
    mutates=("out_topk_p", "out_topk_index", "out_hidden", "out_dsa_topk_indices"),
    op_class="bandwidth",
    variant=("row_indices", "dsa_topk_indices"),
    bytes_moved=_draft_extend_bytes,
)
def draft_extend_topk1_postprocess(
    op: OpDef,
    logits: Tensor,
    row_indices: Tensor,
    hidden_states: Tensor | None = None,
    dsa_topk_indices: Tensor | None = None,
    out: tuple | None = None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """After the draft-extend forward (topk = 1): greedy token and state of each request's last row.

    Used at the end of an iteration to seed the next draft: for each request, row ``row_indices[b]``
    of the extend batch gives ``topk_index = argmax(logits[row])`` (NaN as -1e30, ties lowest id),
    ``topk_p = 1``, and the same row of ``hidden_states`` and of the DSA top-k index buffer.

    Args:
        logits: ``[N, V]`` floating.
        row_indices: ``[bs]`` int32/int64 in ``[0, N)``.
        hidden_states: optional ``[N, H]`` (any dtype).
        dsa_topk_indices: optional ``[N, T]`` int32/int64.
        out: optional ``(topk_p[bs, 1] f32, topk_index[bs, 1] i64, hidden[bs, H] or None,
            dsa[bs, T] or None)`` (None where the input is None).

    Returns:
        ``(topk_p, topk_index, hidden or None, dsa or None)``; gathered rows keep their dtype.
    """
    check_logits(logits)
    num_rows, vocab = logits.shape
    check_index("row_indices", row_indices)
    batch = row_indices.shape[0]
    hidden_spec: OutputSpec | None = None
    if hidden_states is not None:
        check_tensor("hidden_states", hidden_states, shape=(num_rows, ANY_SIZE))
        hidden_spec = ("out[2]", (batch, hidden_states.shape[1]), hidden_states.dtype)
    dsa_spec: OutputSpec | None = None
    if dsa_topk_indices is not None:
        check_index("dsa_topk_indices", dsa_topk_indices, shape=(num_rows, ANY_SIZE))
        dsa_spec = ("out[3]", (batch, dsa_topk_indices.shape[1]), dsa_topk_indices.dtype)
    device = common_device(
        logits=logits, row_indices=row_indices, hidden_states=hidden_states, dsa_topk_indices=dsa_topk_indices
    )
    if value_checks_enabled(device):
        check_range("row_indices", row_indices, 0, num_rows)
    specs = [
        ("out[0]", (batch, 1), torch.float32),
        ("out[1]", (batch, 1), torch.int64),
        hidden_spec,
        dsa_spec,
    ]
    topk_p, topk_index, hidden, dsa = checked_outputs(out, specs, device)
    assert topk_p is not None and topk_index is not None
    if batch > 0:
        op.dispatch(
            device, logits, row_indices, hidden_states, dsa_topk_indices, topk_p, topk_index, hidden, dsa
        )
    return topk_p, topk_index, hidden, dsa
