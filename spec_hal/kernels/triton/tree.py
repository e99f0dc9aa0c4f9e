"""Triton kernels of family C (tree build / verify / accept): one launch per op.

Apart from the passes over V these ops are latency-bound: one program per request (a few warps at
most), every row a request needs read with one vector load issued up front, and trees walked in
registers (a node's entry of a row is a one-hot sum, ``_lane``), so that no load waits for another
where the data allows it.

* ``build_tree_kernel_efficient``: one program per request with ``[D, D]`` tiles (parent search
  against the parent_list row held in registers, links, an ancestor walk unrolled over S). FULL_MASK
  blocks start at ``D * sum_{j<b} seq_lens[j] + b*D*D``: the program sums the seq_lens before its
  request in one vector load (``config.block``-wide chunks beyond that).
* ``verify_tree_greedy`` / ``tree_speculative_sampling_target_only``: one program per request
  follows the sibling lists link by link, as the CUDA kernels do, but in registers. Sampling reads
  the target probabilities of (row, sibling token) pairs: all at once for trees of at most 16 nodes,
  else one row per step; it then draws the bonus token by inverse CDF over V in blocks.
* ``chain_speculative_sampling``: one program per request tests every step at once;
  ``fill_bonus_tokens``: one lane per request, reading narrow rows whole.

Every index read from memory is range-checked before it addresses anything; address arithmetic is
int64. The results equal the portable references of ``spec_hal/ops/tree.py`` lane for lane.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._constants import FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING, SIGNED_OF
from .config import LaunchConfig
from .launch import Launch, cdiv, kernel, next_power_of_2
from .launcher import Launcher
from .sizing import request_warps, walk_tile

#: Bitpacked mask items are ORed bitwise: unsigned items are handed to Triton as the signed type of
#: the same size (a view, not a copy), which every Triton backend addresses.


@triton.jit
def _lane(vector, lanes, index):
    """``vector[index]`` of a register vector whose lane ids are ``lanes``: a one-hot sum, so reading
    it costs no memory access (0 where no lane is ``index``)."""
    return tl.sum(tl.where(lanes == index, vector, 0), 0)


# --------------------------------------------------------------------------------------------------
# C2 build_tree_kernel_efficient


@triton.jit
def _masked_sum(values_ptr, stride, start, end, BLOCK: tl.constexpr):
    """The int64 sum of ``values[start : min(end, start + BLOCK)]`` (one vector load)."""
    lanes = start + tl.arange(0, BLOCK).to(tl.int64)
    return tl.sum(tl.load(values_ptr + lanes * stride, mask=lanes < end, other=0).to(tl.int64), 0)


@kernel
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
    verified_ptr, verified_stride, draft_tokens_ptr, draft_tokens_stride_b, draft_tokens_stride_n,
    flat_tokens_ptr,
    num_nodes,
    MODE: tl.constexpr, TOPK: tl.constexpr, NUM_STEPS: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_P: tl.constexpr, SCAN_BLOCK: tl.constexpr, HAS_TOKENS: tl.constexpr,
):  # fmt: skip
    """``HAS_TOKENS``: also the verify input ids, node 0 the verified token and node i the draft
    token i - 1 (``flat_tokens`` contiguous int64)."""
    b = tl.program_id(0).to(tl.int64)
    node = tl.arange(0, BLOCK_D).to(tl.int64)
    in_tree = node < num_nodes
    none = BLOCK_D  # "no node" in first-match reductions: larger than every node id
    if HAS_TOKENS:
        verified = tl.load(verified_ptr + b * verified_stride).to(tl.int64)
        draft_token = tl.load(
            draft_tokens_ptr + b * draft_tokens_stride_b + (node - 1) * draft_tokens_stride_n,
            mask=(node >= 1) & in_tree,
            other=0,
        ).to(tl.int64)
        tl.store(
            flat_tokens_ptr + b * num_nodes + node, tl.where(node == 0, verified, draft_token), mask=in_tree
        )

    # Every load is issued up front: no address depends on loaded data (the parent_list row is
    # read whole and indexed in registers).
    seq_len = tl.load(seq_lens_ptr + b * seq_stride).to(tl.int64)
    selected_row = selected_ptr + b * selected_stride_b
    is_draft = (node >= 1) & in_tree
    own_selected = tl.load(selected_row + (node - 1) * selected_stride_n, mask=is_draft, other=0)
    own_selected = own_selected.to(tl.int64)
    is_candidate = node < num_nodes - 1
    candidate_selected = tl.load(selected_row + node * selected_stride_n, mask=is_candidate, other=0)
    candidate_selected = candidate_selected.to(tl.int64)
    slot_lane = tl.arange(0, BLOCK_P).to(tl.int64)
    parent_row = tl.load(
        parent_list_ptr + b * parent_stride_b + slot_lane * parent_stride_s,
        mask=slot_lane < parent_width,
        other=0,
    ).to(tl.int64)
    seq_before = tl.zeros((), tl.int64)  # FULL_MASK: sum of the seq_lens of requests before b
    if MODE == 0:
        seq_before = _masked_sum(seq_lens_ptr, seq_stride, 0, b, SCAN_BLOCK)
    if MODE == 2:
        item_ptr = tree_mask_ptr + (b * num_nodes + node) * mask_stride
        item = tl.load(item_ptr, mask=in_tree, other=0)
    if MODE == 0:  # more chunks only when bs exceeds SCAN_BLOCK
        for start in range(SCAN_BLOCK, b, SCAN_BLOCK):
            seq_before += _masked_sum(seq_lens_ptr, seq_stride, start, b, SCAN_BLOCK)

    # Parent of each node: the root for score indices of step 0; else the draft whose selected
    # index equals parent_list[b, selected // K] (among the D-1 drafts); -1 when none does.
    # Negative selected indices (unchecked on accelerators) have no slot: INVALID, as torch's floor.
    slot = tl.where(own_selected >= 0, own_selected // TOPK, -1)
    has_slot = is_draft & (slot >= 1) & (slot < parent_width)
    wanted = tl.sum(tl.where(slot[:, None] == slot_lane[None, :], parent_row[None, :], 0), 1)
    matches = (candidate_selected[None, :] == wanted[:, None]) & is_candidate[None, :]
    match = tl.min(tl.where(matches, node[None, :], none), 1)
    parent = tl.where(has_slot & (match < num_nodes - 1), match + 1, -1)
    parent = tl.where(is_draft & (slot == 0), 0, parent)

    # Links: children in ascending node order; INVALID nodes (parent -1) are nobody's child.
    is_child = parent[None, :] == node[:, None]  # [p, i]: node i's parent is p
    first_child = tl.min(tl.where(is_child, node[None, :], none), 1)
    later_sibling = (parent[None, :] == parent[:, None]) & (parent[:, None] >= 0)
    later_sibling = later_sibling & (node[None, :] > node[:, None])  # [i, j]: j follows i
    next_sibling = tl.min(tl.where(later_sibling, node[None, :], none), 1)
    tl.store(
        next_token_ptr + b * token_stride_b + node * token_stride_n,
        tl.where(first_child < num_nodes, first_child, -1),
        mask=in_tree,
    )
    tl.store(
        next_sibling_ptr + b * sibling_stride_b + node * sibling_stride_n,
        tl.where(next_sibling < num_nodes, next_sibling, -1),
        mask=in_tree,
    )
    tl.store(
        retrieve_index_ptr + b * index_stride_b + node * index_stride_n, b * num_nodes + node, mask=in_tree
    )

    # Ancestor walk of every node, at most S steps (unrolled): it stops at the root and after an
    # INVALID node's own column. The parent of the current node is read off ``parent`` in registers.
    ancestors = (node[None, :] == 0) & in_tree[:, None]
    depth = tl.zeros([BLOCK_D], tl.int64)
    current = node
    walking = (node > 0) & in_tree
    for _ in tl.static_range(NUM_STEPS):
        ancestors = ancestors | (walking[:, None] & (current[:, None] == node[None, :]))
        depth += walking.to(tl.int64)
        up = tl.sum(tl.where(current[:, None] == node[None, :], parent[None, :], 0), 1)
        walking = walking & (up > 0)
        current = tl.where(walking, up, current)
    tl.store(positions_ptr + (b * num_nodes + node) * positions_stride, seq_len + depth, mask=in_tree)

    cell_mask = in_tree[:, None] & in_tree[None, :]
    if MODE == 1:  # QLEN_ONLY: row (b, i) at (b*D + i)*D
        cell = (b * num_nodes + node[:, None]) * num_nodes + node[None, :]
        tl.store(tree_mask_ptr + cell * mask_stride, ancestors, mask=cell_mask)
    elif MODE == 2:  # QLEN_ONLY_BITPACKING: bit c of item (b, i) is column c; ORed into the item
        column_bit = tl.full([1, BLOCK_D], 1, tl.int64) << node[None, :]
        bits = tl.sum(tl.where(ancestors, column_bit, 0), 1)
        tl.store(item_ptr, item | bits.to(item.dtype), mask=in_tree)
    else:  # FULL_MASK: rows of seq_len + D columns, tree columns after the seq_len prefix ones
        block_start = num_nodes * seq_before + b * num_nodes * num_nodes
        cell = block_start + node[:, None] * (seq_len + num_nodes) + seq_len + node[None, :]
        inside = cell_mask & (cell >= 0) & (cell < mask_numel)
        tl.store(tree_mask_ptr + cell * mask_stride, ancestors, mask=inside)


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
    verified_id: torch.Tensor | None,
    draft_tokens: torch.Tensor | None,
    flat_tokens: torch.Tensor | None,
) -> None:
    bs = seq_lens.shape[0]
    if tree_mask_mode == QLEN_ONLY_BITPACKING and tree_mask.dtype in SIGNED_OF:
        tree_mask = tree_mask.view(SIGNED_OF[tree_mask.dtype])
    _build_tree_launch(
        config, bs, parent_list.shape[1], topk, num_steps, draft_token_num, int(tree_mask_mode),
        flat_tokens is not None,
    )(
        parent_list, *parent_list.stride(), parent_list.shape[1],
        selected_index, *selected_index.stride(),
        seq_lens, seq_lens.stride()[0],
        tree_mask, tree_mask.stride()[0], tree_mask.numel(),
        positions, positions.stride()[0],
        retrieve_index, *retrieve_index.stride(),
        retrieve_next_token, *retrieve_next_token.stride(),
        retrieve_next_sibling, *retrieve_next_sibling.stride(),
        verified_id, 0 if verified_id is None else verified_id.stride()[0],
        draft_tokens, *((0, 0) if draft_tokens is None else draft_tokens.stride()),
        flat_tokens,
        draft_token_num,
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _build_tree_launch(
    config: LaunchConfig, bs: int, parents: int, topk: int, num_steps: int, draft_token_num: int, mode: int,
    has_tokens: bool,
) -> Launch:  # fmt: skip
    block_d = next_power_of_2(draft_token_num)
    block_p = next_power_of_2(max(parents, 1))
    # The FULL_MASK prefix of seq_lens: one vector load when bs fits a launch block.
    scan_block = min(config.block, next_power_of_2(max(bs, 1))) if mode == FULL_MASK else 1
    return _build_tree_kernel.at(
        (bs,),
        MODE=mode,
        # K and S as constants: the slot division becomes a multiply, the ancestor walk unrolls.
        TOPK=topk,
        NUM_STEPS=num_steps,
        BLOCK_D=block_d,
        BLOCK_P=block_p,
        SCAN_BLOCK=scan_block,
        HAS_TOKENS=has_tokens,
        num_warps=request_warps(config, block_d * max(block_d, block_p)),
    )


# --------------------------------------------------------------------------------------------------
# C3 / C4 tree walks (greedy and target-only sampling share the walk and the commit)


@triton.jit
def _row_links(links_row, stride, node, num_nodes):
    """A request's link row as node ids: ``num_nodes`` ("none") for -1 and out-of-range links."""
    links = tl.load(links_row + node * stride, mask=node < num_nodes, other=-1).to(tl.int64)
    return tl.where((links >= 0) & (links < num_nodes), links, num_nodes)


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
    exceeds ``coin * sum``; else the last positive index (tree kernel) or V-1. The first pass over V
    sums the row; the second stops at the block where the running sum crosses."""
    total = tl.zeros((), tl.float32)
    last_positive = tl.full((), -1, tl.int64)
    for start in range(0, vocab, BLOCK_V):
        lanes = start + tl.arange(0, BLOCK_V).to(tl.int64)
        weights = _residual(
            target_row, target_stride, draft_row, draft_stride, lanes, use_draft, vocab, NAN_DRAFT_IS_ZERO
        )
        total += tl.sum(weights, 0)
        if FALLBACK_LAST_POSITIVE:
            last_positive = tl.maximum(last_positive, tl.max(tl.where(weights > 0, lanes, -1), 0))
    threshold = coin * total
    first = tl.zeros((), tl.int64) + vocab
    running = tl.zeros((), tl.float32)
    start = tl.zeros((), tl.int64)
    while start < vocab:
        lanes = start + tl.arange(0, BLOCK_V).to(tl.int64)
        weights = _residual(
            target_row, target_stride, draft_row, draft_stride, lanes, use_draft, vocab, NAN_DRAFT_IS_ZERO
        )
        crossed = ((running + tl.cumsum(weights, 0)) > threshold) & (lanes < vocab)
        first = tl.min(tl.where(crossed, lanes, vocab), 0)
        running += tl.sum(weights, 0)
        # Later blocks hold larger indices: the first crossing block decides.
        start = tl.where(first < vocab, vocab, start + BLOCK_V)
    fallback = tl.zeros((), tl.int64) + vocab - 1
    if FALLBACK_LAST_POSITIVE:
        fallback = tl.where(last_positive >= 0, last_positive, fallback)
    return tl.where(first < vocab, first, fallback)


@triton.jit
def _target_at_nodes(table_ptr, stride_b, stride_n, own_row, b, flat, node, in_tree, num_nodes, num_flat):
    """``table.flatten()[flat]`` of a [bs, D] table for every node's flat id, clamped into range (as
    the reference reads ``target_predict``). Flat ids of request b (all of them in well-formed input)
    are read off its row ``own_row``, already in registers; others (malformed input) are loaded."""
    flat = tl.minimum(tl.maximum(flat, 0), num_flat - 1)
    column = flat - b * num_nodes
    own = in_tree & (column >= 0) & (column < num_nodes)
    wanted = tl.sum(tl.where((column[:, None] == node[None, :]) & own[:, None], own_row[None, :], 0), 1)
    foreign = in_tree & ~own
    if tl.max(foreign.to(tl.int32), 0) > 0:  # the 64-bit divisions only when some flat id needs them
        row = flat // num_nodes
        foreign_row = table_ptr + row * stride_b + (flat - row * num_nodes) * stride_n
        wanted += tl.load(foreign_row, mask=foreign, other=0).to(tl.int64)  # 0 on the other lanes
    return wanted


@kernel
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
    SAMPLING: tl.constexpr, PAIR_PROBS: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """``max_children`` = max(D-1, 1): a longer sibling chain is a cycle and is cut there.

    The request's rows (tokens, flat ids, links, coins or target tokens) are loaded once and the
    walk reads them in registers: following a link costs no memory access. Sampling reads the
    target probability of (row, sibling token) pairs: with ``PAIR_PROBS`` (small trees) every pair
    of a node with children is loaded up front, else the current row's pairs at each step."""
    b = tl.program_id(0).to(tl.int64)
    node = tl.arange(0, BLOCK_D).to(tl.int64)
    in_tree = node < num_nodes
    flat = tl.load(retrieve_index_ptr + b * index_stride_b + node * index_stride_n, mask=in_tree, other=0)
    flat = flat.to(tl.int64)
    tokens = tl.load(
        candidates_ptr + b * candidates_stride_b + node * candidates_stride_n, mask=in_tree, other=0
    )
    tokens = tokens.to(tl.int64)
    first_child = _row_links(next_token_ptr + b * token_stride_b, token_stride_n, node, num_nodes)
    next_sibling = _row_links(next_sibling_ptr + b * sibling_stride_b, sibling_stride_n, node, num_nodes)
    if SAMPLING:
        coins = tl.load(coins_ptr + b * coins_stride_b + node * coins_stride_n, mask=in_tree, other=0.0)
        usable = in_tree & (tokens >= 0) & (tokens < vocab)  # tokens outside V are never accepted
        probs_base = target_probs_ptr + b * target_stride_b
        draft_base = draft_probs_ptr + b * draft_stride_b
        final_coin = tl.load(final_coins_ptr + b * final_coins_stride)
        if PAIR_PROBS:  # [row, sibling]: rows without children are never read
            pair = node[:, None] * BLOCK_D + node[None, :]
            pair_probs = tl.load(
                probs_base + node[:, None] * target_stride_n + tokens[None, :] * target_stride_v,
                mask=(first_child < num_nodes)[:, None] & usable[None, :],
                other=0.0,
            )
    else:
        target_row = target_predict_ptr + b * predict_stride_b + node * predict_stride_n
        target_row = tl.load(target_row, mask=in_tree, other=0).to(tl.int64)
        wanted_at = _target_at_nodes(
            target_predict_ptr, predict_stride_b, predict_stride_n, target_row, b, flat, node, in_tree,
            num_nodes, num_flat,
        )  # fmt: skip

    current = tl.zeros((), tl.int64)  # local node id of the last accepted node (the root first)
    current_flat = _lane(flat, node, 0)
    tl.store(accept_index_ptr + b * accept_stride_b, current_flat.to(tl.int32))
    num_accepted = tl.zeros((), tl.int64)
    steps_left = num_accepted + width - 1
    walking = steps_left > 0
    while walking:
        if SAMPLING:
            coin = _lane(coins, node, current)
            if not PAIR_PROBS:
                step_probs = tl.load(
                    probs_base + current * target_stride_n + tokens * target_stride_v, mask=usable, other=0.0
                )
            accumulated = tl.zeros((), tl.float32)
        else:
            wanted = _lane(wanted_at, node, current)
        child = _lane(first_child, node, current)
        examined = tl.zeros((), tl.int64)
        found = num_accepted < 0
        searching = child < num_nodes
        while searching:
            token = _lane(tokens, node, child)
            if SAMPLING:
                if PAIR_PROBS:
                    prob = tl.sum(tl.sum(tl.where(pair == current * BLOCK_D + child, pair_probs, 0.0), 1), 0)
                else:
                    prob = _lane(step_probs, node, child)
                accumulated += prob
                # IEEE division (``/`` is approximate on NVIDIA): the same threshold as torch's.
                ratio = tl.div_rn(accumulated, threshold_acc)
                token_usable = (token >= 0) & (token < vocab)
                found = token_usable & ((coin <= ratio) | (prob >= threshold_single))
                # A rejected sibling's target probability leaves the residual of this row.
                row_draft = draft_base + current * draft_stride_n
                tl.store(row_draft + token * draft_stride_v, prob, mask=token_usable & ~found)
            else:
                found = token == wanted
            examined += 1
            child = tl.where(found, child, _lane(next_sibling, node, child))
            searching = ~found & (child < num_nodes) & (examined < max_children)
        # Commit the step: the accepted child's flat id, and the token committed after the parent.
        num_accepted += found.to(tl.int64)
        child_flat = _lane(flat, node, child)
        tl.store(
            accept_index_ptr + b * accept_stride_b + num_accepted * accept_stride_k,
            child_flat.to(tl.int32),
            mask=found,
        )
        if SAMPLING:
            committed = _lane(tokens, node, child)
        else:
            committed = wanted
        inside = found & (current_flat >= 0) & (current_flat < num_flat)
        tl.store(predicts_ptr + current_flat * predicts_stride, committed.to(tl.int32), mask=inside)
        current = tl.where(found, child, current)
        current_flat = tl.where(found, child_flat, current_flat)
        steps_left -= 1
        walking = found & (steps_left > 0)

    if SAMPLING:
        # The residual reads this row's rejected siblings, stored above by other threads.
        tl.debug_barrier()
        bonus = _inverse_cdf_sample(
            probs_base + current * target_stride_n, target_stride_v,
            draft_base + current * draft_stride_n, draft_stride_v,
            num_accepted < width - 1, final_coin, vocab,
            NAN_DRAFT_IS_ZERO=False, FALLBACK_LAST_POSITIVE=True, BLOCK_V=BLOCK_V,
        )  # fmt: skip
    else:
        bonus = _lane(wanted_at, node, current)
    inside = (current_flat >= 0) & (current_flat < num_flat)
    tl.store(predicts_ptr + current_flat * predicts_stride, bonus.to(tl.int32), mask=inside)
    tl.store(num_correct_ptr + b * num_correct_stride, num_accepted.to(tl.int32))


#: Largest tree (next power of two of D) whose [D, D] (row, sibling token) probabilities a
#: sampling verify loads up front; larger trees load one row's pairs per step.
_MAX_PAIR_PROBS_NODES = 16


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
    _verify_tree_launch(config, bs, num_nodes, None)(
        predicts, predicts.stride()[0],
        accept_index, *accept_index.stride(),
        num_correct_drafts, num_correct_drafts.stride()[0],
        candidates, *candidates.stride(),
        retrieve_index, *retrieve_index.stride(),
        retrieve_next_token, *retrieve_next_token.stride(),
        retrieve_next_sibling, *retrieve_next_sibling.stride(),
        target_predict, *target_predict.stride(),
        None, 0, 0, None, 0, None, 0, 0, 0, None, 0, 0, 0, 1.0, 1.0,
        num_nodes, max(num_nodes - 1, 1), accept_index.shape[1], 0, bs * num_nodes,
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _verify_tree_launch(config: LaunchConfig, bs: int, num_nodes: int, vocab: int | None) -> Launch:
    """The launch of a greedy verify (``vocab`` None: no probabilities are read) or a sampling one,
    whose pass over V takes the vocabulary tile at any batch: its sums over V add in the tile's
    order, so a request's bonus token must not depend on how many requests share the launch."""
    block_d = next_power_of_2(num_nodes)
    num_warps = request_warps(config, block_d * block_d)
    if vocab is None:
        return _verify_tree_kernel.at(
            (bs,), SAMPLING=False, PAIR_PROBS=False, BLOCK_D=block_d, BLOCK_V=1, num_warps=num_warps
        )
    block_v, walk_warps = walk_tile(config, vocab)
    return _verify_tree_kernel.at(
        (bs,),
        SAMPLING=True,
        PAIR_PROBS=block_d <= _MAX_PAIR_PROBS_NODES,
        BLOCK_D=block_d,
        BLOCK_V=block_v,
        num_warps=max(num_warps, walk_warps),
    )


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
    _verify_tree_launch(config, bs, num_nodes, vocab)(
        predicts, predicts.stride()[0],
        accept_index, *accept_index.stride(),
        num_correct_drafts, num_correct_drafts.stride()[0],
        candidates, *candidates.stride(),
        retrieve_index, *retrieve_index.stride(),
        retrieve_next_token, *retrieve_next_token.stride(),
        retrieve_next_sibling, *retrieve_next_sibling.stride(),
        None, 0, 0,
        uniform_samples, *uniform_samples.stride(),
        uniform_samples_for_final_sampling, uniform_samples_for_final_sampling.stride()[0],
        target_probs, *target_probs.stride(),
        draft_probs, *draft_probs.stride(),
        threshold_single, threshold_acc,
        num_nodes, max(num_nodes - 1, 1), accept_index.shape[1], vocab, bs * num_nodes,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# C4 chain_speculative_sampling


@kernel
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
    node = tl.arange(0, BLOCK_D).to(tl.int64)
    in_tree = node < num_nodes
    drafts = num_nodes - 1
    # Step c (lane c-1) tests x = candidates[c] on row c-1: accept iff coin * q(x) < p(x) (NaN q as
    # 0). Every step is tested at once (two load levels: the tokens, then their probabilities); the
    # chain stops at the first rejection.
    is_step = node < drafts
    next_token = tl.load(
        candidates_ptr + b * candidates_stride_b + (node + 1) * candidates_stride_n, mask=is_step, other=0
    )
    next_token = next_token.to(tl.int64)
    flat = tl.load(retrieve_index_ptr + b * index_stride_b + node * index_stride_n, mask=in_tree, other=0)
    flat = flat.to(tl.int64)
    coins = tl.load(coins_ptr + b * coins_stride_b + node * coins_stride_n, mask=is_step, other=0.0)
    final_coin = tl.load(final_coins_ptr + b * final_coins_stride)
    usable = is_step & (next_token >= 0) & (next_token < vocab)
    target = tl.load(
        target_probs_ptr + b * target_stride_b + node * target_stride_n + next_token * target_stride_v,
        mask=usable,
        other=0.0,
    )
    draft = tl.load(
        draft_probs_ptr + b * draft_stride_b + node * draft_stride_n + next_token * draft_stride_v,
        mask=usable,
        other=0.0,
    )
    draft = tl.where(draft != draft, 0.0, draft)
    rejected = is_step & ~(usable & (coins * draft < target))
    num_accepted = tl.min(tl.where(rejected, node, drafts), 0)

    # The bonus: relu(p - q) at the rejected step's row, p after the last draft.
    use_draft = num_accepted < drafts
    draft_row = tl.minimum(num_accepted, drafts - 1)
    bonus = _inverse_cdf_sample(
        target_probs_ptr + b * target_stride_b + num_accepted * target_stride_n, target_stride_v,
        draft_probs_ptr + b * draft_stride_b + draft_row * draft_stride_n, draft_stride_v,
        use_draft, final_coin, vocab,
        NAN_DRAFT_IS_ZERO=True, FALLBACK_LAST_POSITIVE=False, BLOCK_V=BLOCK_V,
    )  # fmt: skip

    # Commit nodes 0..n: accept_index[k] = retrieve_index[k]; predicts there = the next draft, or
    # the bonus after node n.
    on_path = node <= num_accepted
    tl.store(accept_index_ptr + b * accept_stride_b + node * accept_stride_k, flat.to(tl.int32), mask=on_path)
    committed = tl.where(node == num_accepted, bonus, next_token)
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
    _chain_sampling_launch(config, bs, num_nodes, vocab)(
        predicts, predicts.stride()[0],
        accept_index, *accept_index.stride(),
        num_correct_drafts, num_correct_drafts.stride()[0],
        candidates, *candidates.stride(),
        retrieve_index, *retrieve_index.stride(),
        uniform_samples, *uniform_samples.stride(),
        uniform_samples_for_final_sampling, uniform_samples_for_final_sampling.stride()[0],
        target_probs, *target_probs.stride(),
        draft_probs, *draft_probs.stride(),
        num_nodes, vocab, bs * num_nodes,
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _chain_sampling_launch(config: LaunchConfig, bs: int, num_nodes: int, vocab: int) -> Launch:
    block_v, num_warps = walk_tile(config, vocab)
    return _chain_sampling_kernel.at(
        (bs,), BLOCK_D=next_power_of_2(num_nodes), BLOCK_V=block_v, num_warps=num_warps
    )


# --------------------------------------------------------------------------------------------------
# C5 fill_bonus_tokens


@kernel
@triton.jit
def _fill_bonus_tokens_kernel(
    tokens_ptr, tokens_stride_b, tokens_stride_w, lens_ptr, lens_stride, bonus_ptr, bonus_stride,
    bs, width, BLOCK: tl.constexpr, BLOCK_W: tl.constexpr, WHOLE_ROWS: tl.constexpr,
):  # fmt: skip
    """``WHOLE_ROWS`` (narrow rows): each request's row is loaded along with its length and only the
    lane at the length stores, so no load waits for another; else the token is gathered by length."""
    b = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)[:, None]  # [BLOCK, 1]
    live = b < bs
    if WHOLE_ROWS:
        lanes = tl.arange(0, BLOCK_W)[None, :]
        rows = tl.load(
            tokens_ptr + b * tokens_stride_b + lanes * tokens_stride_w,
            mask=live & (lanes < width),
            other=0,
        )
    column = tl.load(lens_ptr + b * lens_stride, mask=live, other=0).to(tl.int64) - 1
    inside = live & (column >= 0) & (column < width)
    if WHOLE_ROWS:
        bonus = tl.broadcast_to(bonus_ptr + b * bonus_stride, [BLOCK, BLOCK_W])
        tl.store(bonus, rows.to(tl.int32), mask=inside & (lanes == column))
    else:
        token = tl.load(tokens_ptr + b * tokens_stride_b + column * tokens_stride_w, mask=inside, other=0)
        tl.store(bonus_ptr + b * bonus_stride, token.to(tl.int32), mask=inside)


#: Widest accept row (next power of two of W) that fill_bonus_tokens reads whole.
_MAX_WHOLE_ROW = 16


def _fill_bonus_tokens(
    config: LaunchConfig, accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor
) -> None:
    bs, width = accept_tokens.shape
    if width == 0:
        return  # every accept_lens is out of range: nothing is written
    _fill_bonus_tokens_launch(config, bs, width)(
        accept_tokens, *accept_tokens.stride(), accept_lens, accept_lens.stride()[0],
        bonus_tokens, bonus_tokens.stride()[0], bs, width,
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _fill_bonus_tokens_launch(config: LaunchConfig, bs: int, width: int) -> Launch:
    block_w = next_power_of_2(width)
    whole_rows = block_w <= _MAX_WHOLE_ROW
    block = max(1, config.block // block_w) if whole_rows else config.block  # block lanes per program
    return _fill_bonus_tokens_kernel.at(
        (cdiv(bs, block),), BLOCK=block, BLOCK_W=block_w, WHOLE_ROWS=whole_rows, num_warps=config.num_warps
    )


# --------------------------------------------------------------------------------------------------

#: The family's launchers of this module.
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("build_tree_kernel_efficient", _build_tree_kernel_efficient),
    Launcher("verify_tree_greedy", _verify_tree_greedy),
    Launcher(
        "tree_speculative_sampling_target_only", _tree_speculative_sampling_target_only, tile="vocabulary"
    ),
    Launcher("chain_speculative_sampling", _chain_speculative_sampling, tile="vocabulary"),
    Launcher("fill_bonus_tokens", _fill_bonus_tokens),
)

assert (FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING) == (0, 1, 2)  # the kernel's MODE values
