"""Family C, verify and accept: greedy and sampling verify of a draft tree (or chain), and the bonus
token fill."""

from __future__ import annotations

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    check_fits_int32,
    check_index,
    check_output,
    check_range,
    check_tensor,
    common_device,
    new_output,
    value_checks_enabled,
)
from ..rowwise import first_true, running_row_sums
from ._common import (
    MIN_THRESHOLD,
    commit_path,
    padded_tokens,
    sample_inverse_cdf,
    walk_tree,
)

# --------------------------------------------------------------------------------------------------
# C3 verify_tree_greedy


def _verify_tree_greedy_reference(
    predicts: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
    target_predict: Tensor,
) -> None:
    bs, num_nodes = candidates.shape
    width = accept_index.shape[1]
    target_flat = target_predict.reshape(-1).long()
    flat_ids = retrieve_index.long()
    batch = torch.arange(bs, device=candidates.device)

    def target_at(nodes: Tensor) -> Tensor:  # target_predict at the flat id of local nodes (clamped read)
        return target_flat[flat_ids.gather(1, nodes).clamp(0, bs * num_nodes - 1)]

    tokens = padded_tokens(candidates)

    def first_matching_child(current: Tensor, kids: Tensor, walking: Tensor) -> Tensor:
        wanted = target_flat[flat_ids[batch, current].clamp(0, bs * num_nodes - 1)]
        return first_true((tokens.gather(1, kids) == wanted[:, None]) & (kids < num_nodes))

    path, num_accepted = walk_tree(
        retrieve_next_token, retrieve_next_sibling, width - 1, first_matching_child
    )
    # Greedy commits the target's token after every path node (it equals the next accepted draft).
    commit_path(
        predicts, accept_index, num_correct_drafts, retrieve_index, path, num_accepted, target_at(path)
    )


def _check_verify_args(
    predicts: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    links: dict[str, Tensor],
) -> tuple[torch.device, int, int]:
    """Checks shared by the three verify ops; returns (device, bs, D)."""
    check_index("candidates", candidates, ndim=2)
    bs, num_nodes = candidates.shape
    check_index("retrieve_index", retrieve_index, shape=(bs, num_nodes))
    for name, tensor in links.items():
        check_index(name, tensor, shape=(bs, num_nodes))
    check_tensor("predicts", predicts, dtype=torch.int32, shape=(bs * num_nodes,))
    check_tensor("accept_index", accept_index, dtype=torch.int32, ndim=2)
    if accept_index.shape[0] != bs or accept_index.shape[1] < 1:
        raise ValueError(
            f"accept_index: expected shape ({bs}, W) with W >= 1, got {tuple(accept_index.shape)}"
        )
    check_tensor("num_correct_drafts", num_correct_drafts, dtype=torch.int32, shape=(bs,))
    device = common_device(
        predicts=predicts,
        accept_index=accept_index,
        num_correct_drafts=num_correct_drafts,
        candidates=candidates,
        retrieve_index=retrieve_index,
        **links,
    )
    if value_checks_enabled(device):
        check_range("retrieve_index", retrieve_index, 0, max(bs * num_nodes, 1))
        for name, tensor in links.items():
            check_range(name, tensor, 0, num_nodes, allow=-1)
    return device, bs, num_nodes


@define_op(
    _verify_tree_greedy_reference,
    mutates=("predicts", "accept_index", "num_correct_drafts"),
    op_class="latency",
    variant=(
        "candidates",
        "retrieve_index",
        "retrieve_next_token",
        "retrieve_next_sibling",
        "target_predict",
    ),
)
def verify_tree_greedy(
    op: OpDef,
    predicts: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
    target_predict: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Greedy verify: accept the longest root path whose draft tokens equal the target's argmax.

    After the TARGET_VERIFY forward of a greedy batch. From the root, each of the W-1 steps moves to
    the first child (in sibling order) whose candidate equals ``target_predict`` at the current node's
    flat id; the walk stops at the first step without one. For every path node (flat id g)
    ``predicts[g] = target_predict.flatten()[g]`` (the accepted token, then the bonus token) and
    ``accept_index[b, k]`` = the k-th path node's flat id. Other entries keep the caller's values
    (sglang: predicts 0, accept_index -1). A sibling list longer than D-1 (a cycle) is cut there.

    Args:
        predicts: inout ``[bs*D]`` int32.
        accept_index: inout ``[bs, W]`` int32 (W = S+1).
        num_correct_drafts: out ``[bs]`` int32, accepted drafts (bonus excluded).
        candidates: ``[bs, D]`` idx, node tokens (node 0 = the root's token).
        retrieve_index: ``[bs, D]`` idx, flat id of each node (``b*D + i``).
        retrieve_next_token / retrieve_next_sibling: ``[bs, D]`` idx, -1 = none.
        target_predict: ``[bs, D]`` idx, the target's argmax at each flat id.
    """
    links = {"retrieve_next_token": retrieve_next_token, "retrieve_next_sibling": retrieve_next_sibling}
    device, bs, num_nodes = _check_verify_args(
        predicts, accept_index, num_correct_drafts, candidates, retrieve_index, links
    )
    check_index("target_predict", target_predict, shape=(bs, num_nodes))
    common_device(candidates=candidates, target_predict=target_predict)
    if value_checks_enabled(device):
        check_fits_int32("target_predict", target_predict)
    if bs > 0:
        op.dispatch(
            device,
            predicts,
            accept_index,
            num_correct_drafts,
            candidates,
            retrieve_index,
            retrieve_next_token,
            retrieve_next_sibling,
            target_predict,
        )
    return predicts, accept_index, num_correct_drafts


# --------------------------------------------------------------------------------------------------
# C4 tree_speculative_sampling_target_only


def _tree_speculative_sampling_target_only_reference(
    predicts: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
    uniform_samples: Tensor,
    uniform_samples_for_final_sampling: Tensor,
    target_probs: Tensor,
    draft_probs: Tensor,
    threshold_single: float,
    threshold_acc: float,
) -> None:
    bs, num_nodes, vocab = target_probs.shape
    width = accept_index.shape[1]
    batch = torch.arange(bs, device=target_probs.device)[:, None]
    node_tokens = padded_tokens(candidates)

    def first_accepted_child(current: Tensor, kids: Tensor, walking: Tensor) -> Tensor:
        tokens = node_tokens.gather(1, kids)
        usable = (kids < num_nodes) & (tokens >= 0) & (tokens < vocab)
        tokens = torch.where(usable, tokens, 0)
        row = current[:, None]
        prob = torch.where(usable, target_probs[batch, row, tokens], 0.0)
        # Each sibling is accepted with its target probability: the coin's position in the running
        # sum of the siblings' probabilities picks it.
        coin = uniform_samples[batch, row]
        accepted = usable & ((coin <= running_row_sums(prob) / threshold_acc) | (prob >= threshold_single))
        position = first_true(accepted)
        # Rejected siblings leave the residual: draft_probs[row, t] = p (requests that stopped walking
        # re-examine their last node: they write nothing). Every other lane repeats the first lane
        # (same element, same value), so all writes to one element agree even with duplicate tokens.
        rejected = (
            usable & walking[:, None] & (torch.arange(kids.shape[1], device=kids.device) < position[:, None])
        )
        first_value = torch.where(rejected[:, :1], prob[:, :1], draft_probs[batch, row, tokens[:, :1]])
        value = torch.where(rejected, prob, first_value)
        tokens = torch.where(rejected, tokens, tokens[:, :1])
        draft_probs[batch.expand_as(tokens), row.expand_as(tokens), tokens] = value
        return position

    path, num_accepted = walk_tree(
        retrieve_next_token, retrieve_next_sibling, width - 1, first_accepted_child
    )
    last = path.gather(1, num_accepted[:, None]).squeeze(1)
    target_row = target_probs[batch.squeeze(1), last]
    # Below the accept width the rejected children are removed from the target row (target-only:
    # draft_probs holds zeros plus the rejected siblings' target probabilities).
    residual = torch.where(
        (num_accepted == width - 1)[:, None],
        target_row,
        (target_row - draft_probs[batch.squeeze(1), last]).clamp(min=0),
    )
    bonus = sample_inverse_cdf(residual, uniform_samples_for_final_sampling, fallback_last_positive=True)
    # The token committed after path node k is node k+1's candidate; after the last, the bonus.
    next_nodes = torch.cat([path[:, 1:], path[:, -1:]], 1)
    tokens = node_tokens.gather(1, next_nodes)
    on_bonus = torch.arange(width, device=path.device) == num_accepted[:, None]
    tokens = torch.where(on_bonus, bonus[:, None], tokens)
    commit_path(predicts, accept_index, num_correct_drafts, retrieve_index, path, num_accepted, tokens)


def _check_probs(
    candidates: Tensor, uniform_samples: Tensor, final_samples: Tensor, target_probs: Tensor
) -> int:
    """Checks shared by the two sampling verifies; returns V."""
    bs, num_nodes = candidates.shape
    check_tensor("uniform_samples", uniform_samples, dtype=torch.float32, shape=(bs, num_nodes))
    check_tensor("uniform_samples_for_final_sampling", final_samples, dtype=torch.float32, shape=(bs,))
    check_tensor("target_probs", target_probs, dtype=torch.float32, ndim=3)
    vocab = target_probs.shape[2]
    if target_probs.shape[:2] != (bs, num_nodes) or vocab < 1:
        raise ValueError(
            f"target_probs: expected shape ({bs}, {num_nodes}, V) with V >= 1, got {tuple(target_probs.shape)}"
        )
    common_device(
        candidates=candidates,
        uniform_samples=uniform_samples,
        uniform_samples_for_final_sampling=final_samples,
        target_probs=target_probs,
    )
    return vocab


def _sampling_bytes(target_probs: Tensor, **_: object) -> int:
    """One target and one draft row of V float32 per request: the residual distribution of the last
    accepted node is read whole; the single probabilities along the path are left out (§P counts
    the tree and chain sampling this way; every tensor whole would count all D rows)."""
    return 8 * target_probs.shape[0] * target_probs.shape[2]


@define_op(
    _tree_speculative_sampling_target_only_reference,
    mutates=("predicts", "accept_index", "num_correct_drafts", "draft_probs"),
    op_class="bandwidth",
    variant=("candidates", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling"),
    bytes_moved=_sampling_bytes,
)
def tree_speculative_sampling_target_only(
    op: OpDef,
    predicts: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
    uniform_samples: Tensor,
    uniform_samples_for_final_sampling: Tensor,
    target_probs: Tensor,
    draft_probs: Tensor,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """Sampling verify of a draft tree against the target's probabilities (target-only drafts).

    The walk of :func:`verify_tree_greedy`, but a child is accepted by the coin of its parent row
    (``uniform_samples[b, row]``): sibling c is accepted iff ``coin <= acc / threshold_acc`` (acc = the
    running sum of the target probabilities of the siblings examined so far) or
    ``p >= threshold_single``. A rejected sibling's target probability is written into
    ``draft_probs[b, row, token]``. The bonus token is sampled with
    ``uniform_samples_for_final_sampling`` from the target row of the last accepted node (all W-1
    accepted) or from ``relu(target_row - draft_row)``: the first index whose running sum exceeds
    coin * sum, else the last positive index, else V-1. With thresholds (1, 1) the committed tokens
    are exact target samples.

    Args:
        predicts, accept_index, num_correct_drafts, candidates, retrieve_index, retrieve_next_token,
            retrieve_next_sibling: as :func:`verify_tree_greedy` (``predicts[g]`` is the token
            committed after node g).
        uniform_samples: ``[bs, D]`` float32 coins, column = the node whose children are tested.
        uniform_samples_for_final_sampling: ``[bs]`` float32.
        target_probs: ``[bs, D, V]`` float32, the target's distribution after each node.
        draft_probs: inout scratch ``[bs, D, V]`` float32, zeros for target-only verification.
        threshold_single: accept a child whose target probability is at least this (used as given:
            0 accepts the first usable child); 1.0 is lossless.
        threshold_acc: the running sum is divided by this (clamped to >= 1e-9); 1.0 is lossless.
        deterministic: ignored (the result is always deterministic).
    """
    links = {"retrieve_next_token": retrieve_next_token, "retrieve_next_sibling": retrieve_next_sibling}
    device, bs, num_nodes = _check_verify_args(
        predicts, accept_index, num_correct_drafts, candidates, retrieve_index, links
    )
    vocab = _check_probs(candidates, uniform_samples, uniform_samples_for_final_sampling, target_probs)
    check_tensor("draft_probs", draft_probs, dtype=torch.float32, shape=(bs, num_nodes, vocab))
    common_device(candidates=candidates, draft_probs=draft_probs)
    # As sglang: threshold_acc is clamped (it divides); threshold_single is used as given, so 0
    # accepts the first usable child (p >= 0).
    threshold_single = check_float("threshold_single", threshold_single)
    threshold_acc = max(check_float("threshold_acc", threshold_acc), MIN_THRESHOLD)
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic: expected a bool, got {type(deterministic).__name__}")
    if value_checks_enabled(device):
        check_range("candidates", candidates, 0, vocab)
    if bs > 0:
        op.dispatch(
            device,
            predicts,
            accept_index,
            num_correct_drafts,
            candidates,
            retrieve_index,
            retrieve_next_token,
            retrieve_next_sibling,
            uniform_samples,
            uniform_samples_for_final_sampling,
            target_probs,
            draft_probs,
            threshold_single,
            threshold_acc,
        )
    return predicts, accept_index, num_correct_drafts


# --------------------------------------------------------------------------------------------------
# C4 chain_speculative_sampling


def _chain_speculative_sampling_reference(
    predicts: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    uniform_samples: Tensor,
    uniform_samples_for_final_sampling: Tensor,
    target_probs: Tensor,
    draft_probs: Tensor,
) -> None:
    bs, num_nodes, vocab = target_probs.shape
    drafts = num_nodes - 1
    device = target_probs.device
    batch = torch.arange(bs, device=device)
    # Step c (node c, c >= 1) tests token x = candidates[c] on row c-1: accept iff coin * q(x) < p(x).
    tokens = candidates[:, 1:].long()
    usable = (tokens >= 0) & (tokens < vocab)
    tokens = torch.where(usable, tokens, 0)[:, :, None]
    target_p = target_probs[:, :drafts].gather(2, tokens).squeeze(2)
    draft_q = draft_probs[:, :drafts].gather(2, tokens).squeeze(2)
    draft_q = torch.where(torch.isnan(draft_q), 0.0, draft_q)
    accepted = usable & (uniform_samples[:, :drafts] * draft_q < target_p)
    num_accepted = accepted.long().cumprod(1).sum(1)  # leading run of accepted steps

    # The bonus row: relu(p - q) at the first rejected step's row, p after the last draft.
    target_row = target_probs[batch, num_accepted]
    if drafts > 0:
        draft_row = draft_probs[batch, num_accepted.clamp(max=drafts - 1)]
        draft_row = torch.where(torch.isnan(draft_row), 0.0, draft_row)
        rejected_row = (target_row - draft_row).clamp(min=0)
        residual = torch.where((num_accepted == drafts)[:, None], target_row, rejected_row)
    else:
        residual = target_row
    bonus = sample_inverse_cdf(residual, uniform_samples_for_final_sampling, fallback_last_positive=False)

    path = torch.arange(num_nodes, device=device).expand(bs, num_nodes)
    next_tokens = torch.cat([candidates[:, 1:].long(), candidates.new_zeros(bs, 1).long()], 1)
    path_tokens = torch.where(path == num_accepted[:, None], bonus[:, None], next_tokens)
    commit_path(predicts, accept_index, num_correct_drafts, retrieve_index, path, num_accepted, path_tokens)


@define_op(
    _chain_speculative_sampling_reference,
    mutates=("predicts", "accept_index", "num_correct_drafts"),
    op_class="bandwidth",
    variant=("candidates", "retrieve_index"),
    bytes_moved=_sampling_bytes,
)
def chain_speculative_sampling(
    op: OpDef,
    predicts: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    candidates: Tensor,
    retrieve_index: Tensor,
    uniform_samples: Tensor,
    uniform_samples_for_final_sampling: Tensor,
    target_probs: Tensor,
    draft_probs: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Rejection-sampling verify of a chain (topk = 1) with real draft probabilities (lossless).

    Node c (c = 1..D-1) holds draft token x = ``candidates[b, c]``, drawn from ``draft_probs[b, c-1]``
    (q); the target's distribution at that position is ``target_probs[b, c-1]`` (p). Step c accepts
    iff ``uniform_samples[b, c-1] * q(x) < p(x)`` (NaN q counts as 0), and the chain stops at the first
    rejection. The bonus token is sampled with ``uniform_samples_for_final_sampling`` from
    ``relu(p - q)`` of the rejected step's row, or from ``target_probs[b, D-1]`` when all D-1 drafts
    are accepted (inverse CDF; V-1 when no running sum exceeds coin * sum).

    Args:
        predicts: inout ``[bs*D]`` int32; ``predicts[retrieve_index[b, k]]`` = the token committed
            after node k (k <= n).
        accept_index: inout ``[bs, D]`` int32; ``[b, k] = retrieve_index[b, k]`` for k <= n.
        num_correct_drafts: out ``[bs]`` int32, n.
        candidates: ``[bs, D]`` idx tokens (node 0 = the root's token, not tested).
        retrieve_index: ``[bs, D]`` idx flat ids.
        uniform_samples: ``[bs, D]`` float32; step c reads column c-1 (the last column is unread).
        uniform_samples_for_final_sampling: ``[bs]`` float32.
        target_probs: ``[bs, D, V]`` float32.
        draft_probs: ``[bs, D-1, V]`` float32, or ``[bs, D, V]`` whose last row is not read.
    """
    device, bs, num_nodes = _check_verify_args(
        predicts, accept_index, num_correct_drafts, candidates, retrieve_index, {}
    )
    if accept_index.shape[1] != num_nodes:
        raise ValueError(
            f"accept_index: expected shape ({bs}, {num_nodes}) (W = D for a chain), got {tuple(accept_index.shape)}"
        )
    vocab = _check_probs(candidates, uniform_samples, uniform_samples_for_final_sampling, target_probs)
    check_tensor("draft_probs", draft_probs, dtype=torch.float32, ndim=3)
    if draft_probs.shape not in ((bs, num_nodes - 1, vocab), (bs, num_nodes, vocab)):
        raise ValueError(
            f"draft_probs: expected shape ({bs}, {num_nodes - 1}, {vocab}) or ({bs}, {num_nodes}, {vocab}), "
            f"got {tuple(draft_probs.shape)}"
        )
    common_device(candidates=candidates, draft_probs=draft_probs)
    if value_checks_enabled(device):
        check_range("candidates", candidates, 0, vocab)
    if bs > 0:
        op.dispatch(
            device,
            predicts,
            accept_index,
            num_correct_drafts,
            candidates,
            retrieve_index,
            uniform_samples,
            uniform_samples_for_final_sampling,
            target_probs,
            draft_probs,
        )
    return predicts, accept_index, num_correct_drafts


# --------------------------------------------------------------------------------------------------
# C5 fill_bonus_tokens


def _fill_bonus_tokens_reference(accept_tokens: Tensor, accept_lens: Tensor, bonus_tokens: Tensor) -> None:
    width = accept_tokens.shape[1]
    if width == 0:
        return  # every accept_lens is out of range: nothing is written
    column = accept_lens.long() - 1
    inside = (column >= 0) & (column < width)
    picked = accept_tokens.gather(1, column.clamp(0, width - 1)[:, None]).squeeze(1)
    bonus_tokens.copy_(torch.where(inside, picked.to(torch.int32), bonus_tokens))


@define_op(
    _fill_bonus_tokens_reference,
    mutates=("bonus_tokens",),
    op_class="latency",
    variant=("accept_tokens", "accept_lens"),
)
def fill_bonus_tokens(
    op: OpDef, accept_tokens: Tensor, accept_lens: Tensor, bonus_tokens: Tensor | None = None
) -> Tensor:
    """The bonus token of each request: its last committed token, ``accept_tokens[b, accept_lens[b]-1]``.

    After verify, to seed the next draft step. ``accept_lens`` counts the bonus token (ncd + 1), so it
    must lie in [1, W]; a lane outside it is not written (checked on CPU tensors).

    Args:
        accept_tokens: ``[bs, W]`` idx (any strides; the row stride of sglang's flat form is implied).
        accept_lens: ``[bs]`` idx.
        bonus_tokens: out ``[bs]`` int32, allocated when None.
    """
    check_index("accept_tokens", accept_tokens, ndim=2)
    bs, width = accept_tokens.shape
    check_index("accept_lens", accept_lens, shape=(bs,))
    device = common_device(accept_tokens=accept_tokens, accept_lens=accept_lens)
    if bonus_tokens is None:
        bonus_tokens = new_output((bs,), torch.int32, device)
    check_output("bonus_tokens", bonus_tokens, dtype=torch.int32, device=device, shape=(bs,))
    if value_checks_enabled(device) and bs > 0:
        check_range("accept_lens", accept_lens, 1, width + 1)
        check_fits_int32("accept_tokens", accept_tokens.gather(1, accept_lens.long()[:, None] - 1))
    if bs > 0:
        op.dispatch(device, accept_tokens, accept_lens, bonus_tokens)
    return bonus_tokens


def check_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
    if value != value:
        raise ValueError(f"{name}: expected a number, got nan")
    return float(value)
