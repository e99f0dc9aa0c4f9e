"""Family C helpers shared by the build and verify modules: fixed-shape device helpers (no host
sync) and the layouts of tree masks. The checks the contracts share are in
:mod:`spec_hal.validation`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..._constants import TreeMaskMode
from ..rowwise import first_true, running_row_sums

MASK_MODES = frozenset(int(mode) for mode in TreeMaskMode)  # dynamo cannot trace tuple(EnumType)

#: Bitpacked mask items: the dtype allocated for D <= 8/16/32 and the item sizes accepted from callers.
BITPACK_ALLOC = ((8, torch.uint8), (16, torch.uint16), (32, torch.uint32))
BITPACK_DTYPES = (
    torch.uint8,
    torch.int8,
    torch.uint16,
    torch.int16,
    torch.uint32,
    torch.int32,
    torch.uint64,
    torch.int64,
)
MAX_BITPACK_NODES = 32
#: Floor of ``threshold_acc`` (as sglang; the only threshold clamped): avoids a division by zero.
MIN_THRESHOLD = 1e-9


# --------------------------------------------------------------------------------------------------
# Shared device helpers (fixed shapes, no host sync)


def scatter_lanes_(out: Tensor, index: Tensor, values: Tensor, write: Tensor) -> None:
    """``out.view(-1)[index] = values`` on lanes with ``write`` and ``index`` in range; for small outputs.

    The lanes land in a staged copy with one scratch slot past the end, where masked lanes go; only
    the written positions change value.
    """
    flat = out.view(-1)
    size = flat.numel()
    slot = torch.where(write & (index >= 0) & (index < size), index, size).flatten()
    staged = torch.cat([flat, flat.new_zeros(1)])
    staged.scatter_(0, slot, values.flatten().to(flat.dtype))
    flat.copy_(staged[:size])


def scatter_distinct_bool_(flat: Tensor, index: Tensor, values: Tensor) -> None:
    """``flat[index] = values`` for pairwise distinct lanes (bool); lanes outside ``flat`` are dropped.

    For large buffers (the FULL_MASK, the NGRAM mask) where a staged copy would cost more than the
    op: out-of-range lanes are redirected to the last element and carry the value it ends with anyway
    (that of the in-range lane aimed at it, else its current one), so every write there agrees.
    """
    size = flat.numel()
    if size == 0:
        return
    index, values = index.flatten(), values.flatten()
    inside = (index >= 0) & (index < size)
    at_last = inside & (index == size - 1)
    last_value = torch.where(at_last.any(), (values & at_last).any(), flat[size - 1])
    flat.scatter_(0, torch.where(inside, index, size - 1), torch.where(inside, values, last_value))


def or_none(index: Tensor, limit: int) -> Tensor:
    """Reduction results equal to ``limit`` (nothing found) become the -1 sentinel."""
    return torch.where(index < limit, index, -1)


def next_siblings(parent: Tensor) -> Tensor:
    """Next sibling [bs, D]: the first later node with the same parent (-1 parents have none)."""
    num_nodes = parent.shape[1]
    node = torch.arange(num_nodes, device=parent.device)
    later_sibling = (
        (parent[:, :, None] == parent[:, None, :]) & (parent[:, :, None] >= 0) & (node > node[:, None])
    )
    return or_none(first_true(later_sibling), num_nodes)


def full_mask_tree_columns(seq: Tensor, num_nodes: int) -> Tensor:
    """Flat FULL_MASK offsets [bs, D, D] of the tree columns of row (b, i).

    Request b's block starts at ``D*sum_{j<b} seq_j + b*D^2``; its rows are ``seq_b + D`` wide, the
    tree columns after the seq_b prefix columns. int64: the offsets exceed 2^31 on long batches.
    """
    bs = seq.shape[0]
    node = torch.arange(num_nodes, device=seq.device)
    block = (torch.cumsum(seq, 0) - seq) * num_nodes + torch.arange(bs, device=seq.device) * (
        num_nodes * num_nodes
    )
    row_start = block[:, None] + node * (seq[:, None] + num_nodes) + seq[:, None]
    return row_start[:, :, None] + node


def sample_inverse_cdf(weights: Tensor, coin: Tensor, *, fallback_last_positive: bool) -> Tensor:
    """Row-wise inverse-CDF sample of unnormalised ``weights`` [bs, V]: the first index whose running
    sum exceeds ``coin * sum``. Where none does (rounding, an all-zero row) the tree kernel falls back
    to the last positive index, the chain kernel (and the tree kernel on an all-zero row) to V-1."""
    vocab = weights.shape[-1]
    # Running sums in a fixed order (torch's scan adds a lone row in another order than a batch's);
    # the total is their last entry.
    running = running_row_sums(weights)
    threshold = coin * running[:, -1]
    first = first_true(running > threshold[:, None])
    fallback = torch.full_like(first, vocab - 1)
    if fallback_last_positive:
        positions = torch.arange(vocab, device=weights.device)
        last_positive = torch.where(weights > 0, positions, -1).amax(-1)
        fallback = torch.where(last_positive >= 0, last_positive, fallback)
    return torch.where(first < vocab, first, fallback)


def commit_path(
    predicts: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    retrieve_index: Tensor,
    path: Tensor,
    num_accepted: Tensor,
    path_tokens: Tensor,
) -> None:
    """Write a verify result: ``accept_index[b, k] = retrieve_index[b, path[b, k]]`` and
    ``predicts[that] = path_tokens[b, k]`` for k <= n (the token committed after node k: the next
    accepted draft, or the bonus token at k = n); other entries keep the caller's values."""
    width = accept_index.shape[1]
    on_path = torch.arange(width, device=path.device) <= num_accepted[:, None]
    flat_ids = retrieve_index.long().gather(1, path.clamp(min=0))
    accept_index.copy_(torch.where(on_path, flat_ids.to(accept_index.dtype), accept_index))
    scatter_lanes_(predicts, flat_ids, path_tokens, on_path)
    num_correct_drafts.copy_(num_accepted)


class ChildLists:
    """The child list of any node, read off ``retrieve_next_token`` / ``retrieve_next_sibling``.

    ``of(current)`` returns ``[bs, C]`` (C = D-1): the first child of ``current[b]``, then its next
    siblings, D ("none") past the end. -1 and out-of-range links read as none; a sibling cycle
    (malformed links) repeats nodes instead of looping forever. Pointer doubling: the tables of the
    1st, 2nd, 4th ... next sibling are built once, then a list costs log2(D) gathers.
    """

    def __init__(self, retrieve_next_token: Tensor, retrieve_next_sibling: Tensor) -> None:
        bs, num_nodes = retrieve_next_token.shape
        self.num_nodes = num_nodes
        self.num_children = max(num_nodes - 1, 1)
        self.first_child = self._extended(retrieve_next_token)
        jump = self._extended(retrieve_next_sibling)
        self.jumps = [jump]
        while 2 ** len(self.jumps) < self.num_children:
            jump = jump.gather(1, jump)
            self.jumps.append(jump)

    def _extended(self, links: Tensor) -> Tensor:
        """Links [bs, D+1] with "none" as node D, which links to itself."""
        none = self.num_nodes
        links = links.long()
        links = torch.where((links >= 0) & (links < none), links, none)
        return torch.cat([links, links.new_full((links.shape[0], 1), none)], 1)

    def of(self, current: Tensor) -> Tensor:
        children = self.first_child.gather(1, current[:, None])
        for jump in self.jumps:
            children = torch.cat([children, jump.gather(1, children)], 1)
        return children[:, : self.num_children]


# What a verify step decides, given the current node [bs], its children [bs, C] (D = none) and
# whether the request still walks [bs]: the accepted position in the child list (C where none is).
StepRule = Callable[[Tensor, Tensor, Tensor], Tensor]


def walk_tree(
    retrieve_next_token: Tensor, retrieve_next_sibling: Tensor, num_steps: int, accept_position: StepRule
) -> tuple[Tensor, Tensor]:
    """The verify walk of every request from the root: ``num_steps`` (W-1) synchronous steps, each
    moving to the first child the rule accepts; a request stops at its first step without one.

    Returns ``path`` [bs, W] (local node ids, the root first, entries past n repeat the last node)
    and ``num_accepted`` n [bs].
    """
    children = ChildLists(retrieve_next_token, retrieve_next_sibling)
    bs = retrieve_next_token.shape[0]
    device = retrieve_next_token.device
    current = torch.zeros(bs, dtype=torch.long, device=device)
    walking = torch.ones(bs, dtype=torch.bool, device=device)
    num_accepted = torch.zeros_like(current)
    path = [current]
    for _ in range(num_steps):
        kids = children.of(current)
        position = accept_position(current, kids, walking)
        chosen = kids.gather(1, position.clamp(max=children.num_children - 1)[:, None]).squeeze(1)
        walking = walking & (position < children.num_children) & (chosen < children.num_nodes)
        num_accepted += walking
        current = torch.where(walking, chosen, current)
        path.append(current)
    return torch.stack(path, 1), num_accepted


def padded_tokens(candidates: Tensor) -> Tensor:
    """``candidates`` as int64 with a column D of -1: the token of node "none"."""
    return torch.cat([candidates.long(), candidates.new_full((candidates.shape[0], 1), -1).long()], 1)
