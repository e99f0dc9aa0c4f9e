"""Triton kernels of family C (tree build / verify / accept): one launch per op.

* ``build_tree_kernel_efficient``: each program builds a few requests one after the other with
  ``[D, D]`` tiles (parent search, links, ancestor walk). FULL_MASK blocks start at
  ``D * sum_{j<b} seq_lens[j] + b*D*D``: a program sums the seq_lens before its first request in
  ``config.block``-wide chunks, then carries the running total over its own requests (no per-request
  O(bs) reduction).
* ``verify_tree_greedy`` / ``tree_speculative_sampling_target_only``: one program per request walks
  the tree (the sibling lists are followed link by link, as the CUDA kernels do); the sampling
  variant then draws the bonus token by inverse CDF over V in blocks.
* ``chain_speculative_sampling``: one program per request; ``fill_bonus_tokens``: one lane per request.

Every index read from memory is range-checked before it addresses anything; address arithmetic is
int64. The results equal the portable references of ``spec_hal/ops/tree.py`` lane for lane.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from ...ops.tree import FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING
from ...registry import TRITON, register_impl
from .config import LaunchConfig

#: Bitpacked mask items are ORed bitwise: unsigned items are handed to Triton as the signed type of
#: the same size (a view, not a copy), which every Triton backend addresses.
_SIGNED_ITEM = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def _requests_per_program(config: LaunchConfig) -> int:
    """Requests one build program handles: fewer programs sum the FULL_MASK prefix of seq_lens."""
    return max(1, config.block // 256)


# --------------------------------------------------------------------------------------------------
# C2 build_tree_kernel_efficient


@triton.jit
def _build_tree_kernel(
    parent_list_ptr, parent_stride_b, parent_stride_s, parent_width,
    selected_ptr, selected_stride_b, selected_stride_n,
    seq_lens_ptr, seq_stride,
    tree_mask_ptr, mask_stride, mask_numel,
    positions_ptr, positions_stride,
    retrieve_index_ptr, index_stride_b, index_stride_n,
    next_token_ptr, token_stride_b, token_stride_n,
    next_sibling_ptr, sibling_stride_b, sibling_stride_n,
    bs, topk, num_steps, num_nodes,
    MODE: tl.constexpr, BLOCK_D: tl.constexpr, REQUESTS: tl.constexpr, SCAN_BLOCK: tl.constexpr,
):  # fmt: skip
    first_request = tl.program_id(0) * REQUESTS
    # FULL_MASK: D * (sum of seq_lens before this program's first request), chunk by chunk.
    seq_before = tl.zeros((), tl.int64)
    if MODE == 0:
        for start in range(0, first_request, SCAN_BLOCK):
            lanes = start + tl.arange(0, SCAN_BLOCK)
            seq = tl.load(seq_lens_ptr + lanes.to(tl.int64) * seq_stride, mask=lanes < first_request, other=0)
            seq_before += tl.sum(seq.to(tl.int64), 0)

    node = tl.arange(0, BLOCK_D).to(tl.int64)
    in_tree = node < num_nodes
    none = BLOCK_D  # "no node" in first-match reductions: larger than every node id
    for r in range(REQUESTS):
        b = (first_request + r).to(tl.int64)
        live = b < bs
        seq_len = tl.load(seq_lens_ptr + b * seq_stride, mask=live, other=0).to(tl.int64)

        # Parent of each node: the root for score indices of step 0; else the draft whose selected
        # index equals parent_list[b, selected // K] (among the D-1 drafts); -1 when none does.
        selected_row = selected_ptr + b * selected_stride_b
        is_draft = live & (node >= 1) & in_tree
        own_selected = tl.load(selected_row + (node - 1) * selected_stride_n, mask=is_draft, other=0)
        own_selected = own_selected.to(tl.int64)
        # Negative selected indices (unchecked on accelerators) have no slot: INVALID, as torch's floor.
        slot = tl.where(own_selected >= 0, own_selected // topk, -1)
        has_slot = is_draft & (slot >= 1) & (slot < parent_width)
        wanted = tl.load(
            parent_list_ptr + b * parent_stride_b + slot * parent_stride_s, mask=has_slot, other=0
        ).to(tl.int64)
        is_candidate = live & (node < num_nodes - 1)
        candidate_selected = tl.load(selected_row + node * selected_stride_n, mask=is_candidate, other=0)
        matches = (candidate_selected.to(tl.int64)[None, :] == wanted[:, None]) & is_candidate[None, :]
        match = tl.min(tl.where(matches, node[None, :], none), 1)
        parent = tl.where(has_slot & (match < num_nodes - 1), match + 1, -1)
        parent = tl.where(is_draft & (slot == 0), 0, parent)

        # Links: children in ascending node order; INVALID nodes (parent -1) are nobody's child.
        is_child = parent[None, :] == node[:, None]  # [p, i]: node i's parent is p
        first_child = tl.min(tl.where(is_child, node[None, :], none), 1)
        later_sibling = (parent[None, :] == parent[:, None]) & (parent[:, None] >= 0)
        later_sibling = later_sibling & (node[None, :] > node[:, None])  # [i, j]: j follows i
        next_sibling = tl.min(tl.where(later_sibling, node[None, :], none), 1)
        row_mask = live & in_tree
        tl.store(
            next_token_ptr + b * token_stride_b + node * token_stride_n,
            tl.where(first_child < num_nodes, first_child, -1),
            mask=row_mask,
        )
        tl.store(
            next_sibling_ptr + b * sibling_stride_b + node * sibling_stride_n,
            tl.where(next_sibling < num_nodes, next_sibling, -1),
            mask=row_mask,
        )
        tl.store(
            retrieve_index_ptr + b * index_stride_b + node * index_stride_n,
            b * num_nodes + node,
            mask=row_mask,
        )

        # Ancestor walk of every node, at most S steps: it stops at the root and after an INVALID
        # node's own column. The parent of the current node is read off ``parent`` by a one-hot sum.
        ancestors = (node[None, :] == 0) & in_tree[:, None]
        depth = tl.zeros([BLOCK_D], tl.int64)
        current = node
        walking = (node > 0) & in_tree
        for _ in range(num_steps):
            ancestors = ancestors | (walking[:, None] & (current[:, None] == node[None, :]))
            depth += walking.to(tl.int64)
            up = tl.sum(tl.where(current[:, None] == node[None, :], parent[None, :], 0), 1)
            walking = walking & (up > 0)
            current = tl.where(walking, up, current)
        tl.store(positions_ptr + (b * num_nodes + node) * positions_stride, seq_len + depth, mask=row_mask)

        cell_mask = row_mask[:, None] & in_tree[None, :]
        if MODE == 1:  # QLEN_ONLY: row (b, i) at (b*D + i)*D
            cell = (b * num_nodes + node[:, None]) * num_nodes + node[None, :]
            tl.store(tree_mask_ptr + cell * mask_stride, ancestors, mask=cell_mask)
        elif MODE == 2:  # QLEN_ONLY_BITPACKING: bit c of item (b, i) is column c; ORed into the item
            column_bit = tl.full([1, BLOCK_D], 1, tl.int64) << node[None, :]
            bits = tl.sum(tl.where(ancestors, column_bit, 0), 1)
            item_ptr = tree_mask_ptr + (b * num_nodes + node) * mask_stride
            item = tl.load(item_ptr, mask=row_mask, other=0)
            tl.store(item_ptr, item | bits.to(item.dtype), mask=row_mask)
        else:  # FULL_MASK: rows of seq_len + D columns, tree columns after the seq_len prefix ones
            block_start = num_nodes * seq_before + b * num_nodes * num_nodes
            cell = block_start + node[:, None] * (seq_len + num_nodes) + seq_len + node[None, :]
            inside = cell_mask & (cell >= 0) & (cell < mask_numel)
            tl.store(tree_mask_ptr + cell * mask_stride, ancestors, mask=inside)
        seq_before += seq_len


def _build_tree_kernel_efficient(
    config: LaunchConfig,
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    draft_token_num: int,
    tree_mask_mode: int,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
) -> None:
    bs = seq_lens.shape[0]
    if tree_mask_mode == QLEN_ONLY_BITPACKING and tree_mask.dtype in _SIGNED_ITEM:
        tree_mask = tree_mask.view(_SIGNED_ITEM[tree_mask.dtype])
    requests = _requests_per_program(config)
    _build_tree_kernel[(triton.cdiv(bs, requests),)](
        parent_list, *parent_list.stride(), parent_list.shape[1],
        selected_index, *selected_index.stride(),
        seq_lens, seq_lens.stride(0),
        tree_mask, tree_mask.stride(0), tree_mask.numel(),
        positions, positions.stride(0),
        retrieve_index, *retrieve_index.stride(),
        retrieve_next_token, *retrieve_next_token.stride(),
        retrieve_next_sibling, *retrieve_next_sibling.stride(),
        bs, topk, num_steps, draft_token_num,
        MODE=int(tree_mask_mode),
        BLOCK_D=triton.next_power_of_2(draft_token_num),
        REQUESTS=requests,
        SCAN_BLOCK=config.block,
        num_warps=config.num_warps,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# C3 / C4 tree walks (greedy and target-only sampling share the walk and the commit)


@triton.jit
def _link(links_row, node, stride, num_nodes):
    """``links_row[node]`` as a node id, ``num_nodes`` ("none") for -1, out-of-range or none input."""
    target = tl.load(links_row + node * stride, mask=node < num_nodes, other=-1).to(tl.int64)
    return tl.where((target >= 0) & (target < num_nodes), target, num_nodes)


@triton.jit
def _residual(
    target_row, target_stride, draft_row, draft_stride, lanes, use_draft, vocab, NAN_DRAFT_IS_ZERO: tl.constexpr
):  # fmt: skip
    """The bonus distribution on ``lanes``: ``relu(target - draft)``, or the target row itself."""
    in_vocab = lanes < vocab
    target = tl.load(target_row + lanes * target_stride, mask=in_vocab, other=0.0)
    draft = tl.load(draft_row + lanes * draft_stride, mask=in_vocab & use_draft, other=0.0)
    if NAN_DRAFT_IS_ZERO:
        draft = tl.where(draft != draft, 0.0, draft)
    difference = target - draft
    # clamp(min=0) keeps NaN, as torch does.
    return tl.where(use_draft, tl.where(difference < 0, 0.0, difference), target)


@triton.jit
def _inverse_cdf_sample(
    target_row, target_stride, draft_row, draft_stride, use_draft, coin, vocab,
    NAN_DRAFT_IS_ZERO: tl.constexpr, FALLBACK_LAST_POSITIVE: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """Inverse-CDF sample of the (unnormalised) residual row: the first index whose running sum
    exceeds ``coin * sum``; else the last positive index (tree kernel) or V-1. Two passes over V."""
    total = tl.zeros((), tl.float32)
    last_positive = tl.full((), -1, tl.int64)
    for start in range(0, vocab, BLOCK_V):
        lanes = start + tl.arange(0, BLOCK_V).to(tl.int64)
        weights = _residual(
            target_row, target_stride, draft_row, draft_stride, lanes, use_draft, vocab, NAN_DRAFT_IS_ZERO
        )
        total += tl.sum(weights, 0)
        last_positive = tl.maximum(last_positive, tl.max(tl.where(weights > 0, lanes, -1), 0))
    threshold = coin * total
    first = tl.zeros((), tl.int64) + vocab
    running = tl.zeros((), tl.float32)
    for start in range(0, vocab, BLOCK_V):
        lanes = start + tl.arange(0, BLOCK_V).to(tl.int64)
        weights = _residual(
            target_row, target_stride, draft_row, draft_stride, lanes, use_draft, vocab, NAN_DRAFT_IS_ZERO
        )
        crossed = ((running + tl.cumsum(weights, 0)) > threshold) & (lanes < vocab)
        first = tl.minimum(first, tl.min(tl.where(crossed, lanes, vocab), 0))
        running += tl.sum(weights, 0)
    fallback = tl.zeros((), tl.int64) + vocab - 1
    if FALLBACK_LAST_POSITIVE:
        fallback = tl.where(last_positive >= 0, last_positive, fallback)
    return tl.where(first < vocab, first, fallback)


@triton.jit
def _token_at(table_ptr, stride_b, stride_n, flat, num_nodes, num_flat):
    """``table.flatten()[flat]`` of a [bs, D] table with the flat id clamped into range (as the
    reference reads ``target_predict``)."""
    flat = tl.minimum(tl.maximum(flat, 0), num_flat - 1)
    return tl.load(table_ptr + (flat // num_nodes) * stride_b + (flat % num_nodes) * stride_n).to(tl.int64)


@triton.jit
def _verify_tree_kernel(
    predicts_ptr, predicts_stride,
    accept_index_ptr, accept_stride_b, accept_stride_k,
    num_correct_ptr, num_correct_stride,
    candidates_ptr, candidates_stride_b, candidates_stride_n,
    retrieve_index_ptr, index_stride_b, index_stride_n,
    next_token_ptr, token_stride_b, token_stride_n,
    next_sibling_ptr, sibling_stride_b, sibling_stride_n,
    target_predict_ptr, predict_stride_b, predict_stride_n,
    coins_ptr, coins_stride_b, coins_stride_n,
    final_coins_ptr, final_coins_stride,
    target_probs_ptr, target_stride_b, target_stride_n, target_stride_v,
    draft_probs_ptr, draft_stride_b, draft_stride_n, draft_stride_v,
    threshold_single, threshold_acc,
    num_nodes, max_children, width, vocab, num_flat,
    SAMPLING: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """``max_children`` = max(D-1, 1): a longer sibling chain is a cycle and is cut there."""
    b = tl.program_id(0).to(tl.int64)
    candidates_row = candidates_ptr + b * candidates_stride_b
    index_row = retrieve_index_ptr + b * index_stride_b
    next_token_row = next_token_ptr + b * token_stride_b
    next_sibling_row = next_sibling_ptr + b * sibling_stride_b

    current = tl.zeros((), tl.int64)  # local node id of the last accepted node (the root first)
    current_flat = tl.load(index_row).to(tl.int64)
    tl.store(accept_index_ptr + b * accept_stride_b, current_flat.to(tl.int32))
    num_accepted = tl.zeros((), tl.int64)
    walking = num_accepted == 0
    for _ in range(width - 1):
        if SAMPLING:
            coin = tl.load(coins_ptr + b * coins_stride_b + current * coins_stride_n)
            probs_row = target_probs_ptr + b * target_stride_b + current * target_stride_n
            draft_row = draft_probs_ptr + b * draft_stride_b + current * draft_stride_n
            accumulated = tl.zeros((), tl.float32)
        else:
            wanted = _token_at(
                target_predict_ptr, predict_stride_b, predict_stride_n, current_flat, num_nodes, num_flat
            )
        child = _link(next_token_row, current, token_stride_n, num_nodes)
        examined = tl.zeros((), tl.int64)
        found = num_accepted < 0
        searching = walking & (child < num_nodes)
        while searching:
            token = tl.load(candidates_row + child * candidates_stride_n).to(tl.int64)
            if SAMPLING:
                usable = (token >= 0) & (token < vocab)
                prob = tl.load(probs_row + token * target_stride_v, mask=usable, other=0.0)
                accumulated += prob
                # IEEE division (``/`` is approximate on NVIDIA): the same threshold as torch's.
                ratio = tl.div_rn(accumulated, threshold_acc)
                found = usable & ((coin <= ratio) | (prob >= threshold_single))
                # A rejected sibling's target probability leaves the residual of this row.
                tl.store(draft_row + token * draft_stride_v, prob, mask=usable & ~found)
            else:
                found = token == wanted
            examined += 1
            child = tl.where(found, child, _link(next_sibling_row, child, sibling_stride_n, num_nodes))
            searching = ~found & (child < num_nodes) & (examined < max_children)
        # Commit the step: the accepted child's flat id, and the token committed after the parent.
        walking = found
        num_accepted += found.to(tl.int64)
        child_flat = tl.load(index_row + child * index_stride_n, mask=found, other=0).to(tl.int64)
        tl.store(
            accept_index_ptr + b * accept_stride_b + num_accepted * accept_stride_k,
            child_flat.to(tl.int32),
            mask=found,
        )
        if SAMPLING:
            committed = tl.load(candidates_row + child * candidates_stride_n, mask=found, other=0)
        else:
            committed = wanted
        inside = found & (current_flat >= 0) & (current_flat < num_flat)
        tl.store(predicts_ptr + current_flat * predicts_stride, committed.to(tl.int32), mask=inside)
        current = tl.where(found, child, current)
        current_flat = tl.where(found, child_flat, current_flat)

    if SAMPLING:
        # The residual reads this row's rejected siblings, stored above by other threads.
        tl.debug_barrier()
        bonus = _inverse_cdf_sample(
            target_probs_ptr + b * target_stride_b + current * target_stride_n, target_stride_v,
            draft_probs_ptr + b * draft_stride_b + current * draft_stride_n, draft_stride_v,
            num_accepted < width - 1, tl.load(final_coins_ptr + b * final_coins_stride), vocab,
            NAN_DRAFT_IS_ZERO=False, FALLBACK_LAST_POSITIVE=True, BLOCK_V=BLOCK_V,
        )  # fmt: skip
    else:
        bonus = _token_at(
            target_predict_ptr, predict_stride_b, predict_stride_n, current_flat, num_nodes, num_flat
        )
    inside = (current_flat >= 0) & (current_flat < num_flat)
    tl.store(predicts_ptr + current_flat * predicts_stride, bonus.to(tl.int32), mask=inside)
    tl.store(num_correct_ptr + b * num_correct_stride, num_accepted.to(tl.int32))


def _vocab_block(config: LaunchConfig, vocab: int) -> int:
    """fp32 lanes per step of the bonus sampling's passes over V: the vendor's bandwidth tile."""
    return min(triton.next_power_of_2(config.copy_block_bytes // 4), triton.next_power_of_2(vocab))


def _verify_tree_greedy(
    config: LaunchConfig,
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    num_correct_drafts: torch.Tensor,
    candidates: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    bs, num_nodes = candidates.shape
    _verify_tree_kernel[(bs,)](
        predicts, predicts.stride(0),
        accept_index, *accept_index.stride(),
        num_correct_drafts, num_correct_drafts.stride(0),
        candidates, *candidates.stride(),
        retrieve_index, *retrieve_index.stride(),
        retrieve_next_token, *retrieve_next_token.stride(),
        retrieve_next_sibling, *retrieve_next_sibling.stride(),
        target_predict, *target_predict.stride(),
        None, 0, 0, None, 0, None, 0, 0, 0, None, 0, 0, 0, 1.0, 1.0,
        num_nodes, max(num_nodes - 1, 1), accept_index.shape[1], 0, bs * num_nodes,
        SAMPLING=False, BLOCK_V=1,
        num_warps=config.num_warps,
    )  # fmt: skip


def _tree_speculative_sampling_target_only(
    config: LaunchConfig,
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    num_correct_drafts: torch.Tensor,
    candidates: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    threshold_single: float,
    threshold_acc: float,
) -> None:
    bs, num_nodes, vocab = target_probs.shape
    _verify_tree_kernel[(bs,)](
        predicts, predicts.stride(0),
        accept_index, *accept_index.stride(),
        num_correct_drafts, num_correct_drafts.stride(0),
        candidates, *candidates.stride(),
        retrieve_index, *retrieve_index.stride(),
        retrieve_next_token, *retrieve_next_token.stride(),
        retrieve_next_sibling, *retrieve_next_sibling.stride(),
        None, 0, 0,
        uniform_samples, *uniform_samples.stride(),
        uniform_samples_for_final_sampling, uniform_samples_for_final_sampling.stride(0),
        target_probs, *target_probs.stride(),
        draft_probs, *draft_probs.stride(),
        threshold_single, threshold_acc,
        num_nodes, max(num_nodes - 1, 1), accept_index.shape[1], vocab, bs * num_nodes,
        SAMPLING=True, BLOCK_V=_vocab_block(config, vocab),
        num_warps=config.copy_num_warps,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# C4 chain_speculative_sampling


@triton.jit
def _chain_sampling_kernel(
    predicts_ptr, predicts_stride,
    accept_index_ptr, accept_stride_b, accept_stride_k,
    num_correct_ptr, num_correct_stride,
    candidates_ptr, candidates_stride_b, candidates_stride_n,
    retrieve_index_ptr, index_stride_b, index_stride_n,
    coins_ptr, coins_stride_b, coins_stride_n,
    final_coins_ptr, final_coins_stride,
    target_probs_ptr, target_stride_b, target_stride_n, target_stride_v,
    draft_probs_ptr, draft_stride_b, draft_stride_n, draft_stride_v,
    num_nodes, vocab, num_flat,
    BLOCK_D: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    candidates_row = candidates_ptr + b * candidates_stride_b
    drafts = num_nodes - 1
    # Step c tests x = candidates[c] on row c-1: accept iff coin * q(x) < p(x) (NaN q as 0); the
    # chain stops at the first rejection.
    num_accepted = tl.zeros((), tl.int64)
    walking = num_accepted == 0
    for step in range(drafts):
        token = tl.load(candidates_row + (step + 1) * candidates_stride_n).to(tl.int64)
        usable = walking & (token >= 0) & (token < vocab)
        target = tl.load(
            target_probs_ptr + b * target_stride_b + step * target_stride_n + token * target_stride_v,
            mask=usable,
            other=0.0,
        )
        draft = tl.load(
            draft_probs_ptr + b * draft_stride_b + step * draft_stride_n + token * draft_stride_v,
            mask=usable,
            other=0.0,
        )
        draft = tl.where(draft != draft, 0.0, draft)
        coin = tl.load(coins_ptr + b * coins_stride_b + step * coins_stride_n)
        walking = usable & (coin * draft < target)
        num_accepted += walking.to(tl.int64)

    # The bonus: relu(p - q) at the rejected step's row, p after the last draft.
    use_draft = num_accepted < drafts
    draft_row = tl.minimum(num_accepted, drafts - 1)
    bonus = _inverse_cdf_sample(
        target_probs_ptr + b * target_stride_b + num_accepted * target_stride_n, target_stride_v,
        draft_probs_ptr + b * draft_stride_b + draft_row * draft_stride_n, draft_stride_v,
        use_draft, tl.load(final_coins_ptr + b * final_coins_stride), vocab,
        NAN_DRAFT_IS_ZERO=True, FALLBACK_LAST_POSITIVE=False, BLOCK_V=BLOCK_V,
    )  # fmt: skip

    # Commit nodes 0..n: accept_index[k] = retrieve_index[k]; predicts there = the next draft, or
    # the bonus after node n.
    node = tl.arange(0, BLOCK_D).to(tl.int64)
    on_path = node <= num_accepted
    flat = tl.load(retrieve_index_ptr + b * index_stride_b + node * index_stride_n, mask=on_path, other=0)
    flat = flat.to(tl.int64)
    tl.store(accept_index_ptr + b * accept_stride_b + node * accept_stride_k, flat.to(tl.int32), mask=on_path)
    next_draft = tl.load(candidates_row + (node + 1) * candidates_stride_n, mask=node < num_accepted, other=0)
    committed = tl.where(node == num_accepted, bonus, next_draft.to(tl.int64))
    inside = on_path & (flat >= 0) & (flat < num_flat)
    tl.store(predicts_ptr + flat * predicts_stride, committed.to(tl.int32), mask=inside)
    tl.store(num_correct_ptr + b * num_correct_stride, num_accepted.to(tl.int32))


def _chain_speculative_sampling(
    config: LaunchConfig,
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    num_correct_drafts: torch.Tensor,
    candidates: torch.Tensor,
    retrieve_index: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
) -> None:
    bs, num_nodes, vocab = target_probs.shape
    _chain_sampling_kernel[(bs,)](
        predicts, predicts.stride(0),
        accept_index, *accept_index.stride(),
        num_correct_drafts, num_correct_drafts.stride(0),
        candidates, *candidates.stride(),
        retrieve_index, *retrieve_index.stride(),
        uniform_samples, *uniform_samples.stride(),
        uniform_samples_for_final_sampling, uniform_samples_for_final_sampling.stride(0),
        target_probs, *target_probs.stride(),
        draft_probs, *draft_probs.stride(),
        num_nodes, vocab, bs * num_nodes,
        BLOCK_D=triton.next_power_of_2(num_nodes), BLOCK_V=_vocab_block(config, vocab),
        num_warps=config.copy_num_warps,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# C5 fill_bonus_tokens


@triton.jit
def _fill_bonus_tokens_kernel(
    tokens_ptr, tokens_stride_b, tokens_stride_w, lens_ptr, lens_stride, bonus_ptr, bonus_stride,
    bs, width, BLOCK: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = b < bs
    column = tl.load(lens_ptr + b * lens_stride, mask=live, other=0).to(tl.int64) - 1
    inside = live & (column >= 0) & (column < width)
    token = tl.load(tokens_ptr + b * tokens_stride_b + column * tokens_stride_w, mask=inside, other=0)
    tl.store(bonus_ptr + b * bonus_stride, token.to(tl.int32), mask=inside)


def _fill_bonus_tokens(
    config: LaunchConfig, accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor
) -> None:
    bs, width = accept_tokens.shape
    if width == 0:
        return  # every accept_lens is out of range: nothing is written
    _fill_bonus_tokens_kernel[(triton.cdiv(bs, config.block),)](
        accept_tokens, *accept_tokens.stride(), accept_lens, accept_lens.stride(0),
        bonus_tokens, bonus_tokens.stride(0), bs, width,
        BLOCK=config.block, num_warps=config.num_warps,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------

_PROVIDERS: dict[str, Callable[..., None]] = {
    "build_tree_kernel_efficient": _build_tree_kernel_efficient,
    "verify_tree_greedy": _verify_tree_greedy,
    "tree_speculative_sampling_target_only": _tree_speculative_sampling_target_only,
    "chain_speculative_sampling": _chain_speculative_sampling,
    "fill_bonus_tokens": _fill_bonus_tokens,
}

assert (FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING) == (0, 1, 2)  # the kernel's MODE values


def register(vendor: str, config: LaunchConfig) -> list[str]:
    """Register the family C Triton providers of ``vendor`` (every index dtype and mask mode)."""
    for op, provider in _PROVIDERS.items():
        register_impl(op, vendor, TRITON, functools.partial(provider, config))
    return list(_PROVIDERS)
