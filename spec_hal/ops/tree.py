"""Family C: draft tree build, verify and accept (spec ops.md §C and §P).

Contracts and portable references live together: the ``_portable`` functions decorated with
``define_op`` are the provider signatures; the public functions validate and dispatch.

Every portable reference works on the whole batch at once with shapes fixed by its arguments. Trees
are small (D nodes, depth S, accept width W), so the references loop over those sizes only:

* a node's parent, first child and next sibling come from ``[bs, D, D]`` comparisons;
* the verify walks (greedy and sampling) take W-1 synchronous steps for all requests; each step
  looks at the current node's whole child list at once (:class:`_ChildLists`, pointer doubling
  over ``retrieve_next_sibling``), so the per-sibling loop of the kernels becomes a
  first-match reduction (:func:`_walk_tree`, shared by greedy verify and tree sampling);
* outputs indexed by data (``predicts``, the FULL_MASK buffer, ``draft_probs``) are written through
  helpers that never write a masked or out-of-range lane.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..opdef import define_op
from ..validation import (
    check_fits_int32,
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_range,
    check_tensor,
    common_device,
    new_output,
    value_checks_enabled,
)

__all__ = [
    "TreeMaskMode",
    "FULL_MASK",
    "QLEN_ONLY",
    "QLEN_ONLY_BITPACKING",
    "organize_draft_results",
    "build_tree_kernel_efficient",
    "verify_tree_greedy",
    "tree_speculative_sampling_target_only",
    "chain_speculative_sampling",
    "fill_bonus_tokens",
    "pack_ngram_full_mask",
    "reconstruct_indices_from_tree_mask",
]


class TreeMaskMode(enum.IntEnum):
    """Layout of the attention mask written by :func:`build_tree_kernel_efficient`."""

    #: per request a block of D rows x (seq_len + D) bools; the caller fills the prefix columns.
    FULL_MASK = 0
    #: ``[bs*D*D]`` bools, row (b, i) at ``(b*D + i)*D``: tree columns only.
    QLEN_ONLY = 1
    #: one integer item per (b, i); bit c = tree column c (D <= 32).
    QLEN_ONLY_BITPACKING = 2


FULL_MASK = TreeMaskMode.FULL_MASK
QLEN_ONLY = TreeMaskMode.QLEN_ONLY
QLEN_ONLY_BITPACKING = TreeMaskMode.QLEN_ONLY_BITPACKING

_SIGNED_OF = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
_MASK_MODES = frozenset(int(mode) for mode in TreeMaskMode)  # dynamo cannot trace tuple(EnumType)

#: Bitpacked mask items: the dtype allocated for D <= 8/16/32 and the item sizes accepted from callers.
_BITPACK_ALLOC = ((8, torch.uint8), (16, torch.uint16), (32, torch.uint32))
_BITPACK_DTYPES = (
    torch.uint8,
    torch.int8,
    torch.uint16,
    torch.int16,
    torch.uint32,
    torch.int32,
    torch.uint64,
    torch.int64,
)
_MAX_BITPACK_NODES = 32
#: Floor of the sampling thresholds (as the kernels): avoids a division by zero.
_MIN_THRESHOLD = 1e-9


def _dtypes(*tensors: Tensor) -> tuple[torch.dtype, ...]:
    return tuple(t.dtype for t in tensors)


def _check_index_list(name: str, tensors: object) -> list[Tensor]:
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"{name}: expected a non-empty list of tensors")
    return list(tensors)


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    return value


def _check_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
    if value != value:
        raise ValueError(f"{name}: expected a number, got nan")
    return float(value)


# --------------------------------------------------------------------------------------------------
# Shared device helpers (fixed shapes, no host sync)


def _scatter_lanes_(out: Tensor, index: Tensor, values: Tensor, write: Tensor) -> None:
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


def _scatter_distinct_bool_(flat: Tensor, index: Tensor, values: Tensor) -> None:
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


def _first_true(mask: Tensor) -> Tensor:
    """Index of the first True along the last dim, or its length where there is none."""
    width = mask.shape[-1]
    positions = torch.arange(width, device=mask.device)
    return torch.where(mask, positions, width).min(-1).values  # min(dim) beats amin on small rows


def _or_none(index: Tensor, limit: int) -> Tensor:
    """Reduction results equal to ``limit`` (nothing found) become the -1 sentinel."""
    return torch.where(index < limit, index, -1)


def _next_siblings(parent: Tensor) -> Tensor:
    """Next sibling [bs, D]: the first later node with the same parent (-1 parents have none)."""
    num_nodes = parent.shape[1]
    node = torch.arange(num_nodes, device=parent.device)
    later_sibling = (
        (parent[:, :, None] == parent[:, None, :]) & (parent[:, :, None] >= 0) & (node > node[:, None])
    )
    return _or_none(_first_true(later_sibling), num_nodes)


def _full_mask_tree_columns(seq: Tensor, num_nodes: int) -> Tensor:
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


def _sample_inverse_cdf(weights: Tensor, coin: Tensor, *, fallback_last_positive: bool) -> Tensor:
    """Row-wise inverse-CDF sample of unnormalised ``weights`` [bs, V]: the first index whose running
    sum exceeds ``coin * sum``. Where none does (rounding, an all-zero row) the tree kernel falls back
    to the last positive index, the chain kernel (and the tree kernel on an all-zero row) to V-1."""
    vocab = weights.shape[-1]
    threshold = coin * weights.sum(-1)
    first = _first_true(weights.cumsum(-1) > threshold[:, None])
    fallback = torch.full_like(first, vocab - 1)
    if fallback_last_positive:
        positions = torch.arange(vocab, device=weights.device)
        last_positive = torch.where(weights > 0, positions, -1).amax(-1)
        fallback = torch.where(last_positive >= 0, last_positive, fallback)
    return torch.where(first < vocab, first, fallback)


def _commit_path(
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
    _scatter_lanes_(predicts, flat_ids, path_tokens, on_path)
    num_correct_drafts.copy_(num_accepted)


class _ChildLists:
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


def _walk_tree(
    retrieve_next_token: Tensor, retrieve_next_sibling: Tensor, num_steps: int, accept_position: StepRule
) -> tuple[Tensor, Tensor]:
    """The verify walk of every request from the root: ``num_steps`` (W-1) synchronous steps, each
    moving to the first child the rule accepts; a request stops at its first step without one.

    Returns ``path`` [bs, W] (local node ids, the root first, entries past n repeat the last node)
    and ``num_accepted`` n [bs].
    """
    children = _ChildLists(retrieve_next_token, retrieve_next_sibling)
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


def _padded_tokens(candidates: Tensor) -> Tensor:
    """``candidates`` as int64 with a column D of -1: the token of node "none"."""
    return torch.cat([candidates.long(), candidates.new_full((candidates.shape[0], 1), -1).long()], 1)


# --------------------------------------------------------------------------------------------------
# C1 organize_draft_results


@define_op(
    "organize_draft_results",
    mutates=("parent_list", "selected_index", "draft_tokens"),
    op_class="latency",
    variant=lambda scores, tokens, parents, *rest: (_dtypes(*tokens), _dtypes(*parents)),
)
def _organize_draft_results_portable(
    score_list: list[Tensor],
    token_list: list[Tensor],
    parents_list: list[Tensor],
    draft_token_num: int,
    parent_list: Tensor,
    selected_index: Tensor,
    draft_tokens: Tensor,
) -> None:
    scores = torch.cat([s.flatten(1) for s in score_list], 1)
    tokens = torch.cat([t.long() for t in token_list], 1)
    # A stable descending sort makes ties deterministic (the lower flat index wins), unlike topk.
    best = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, : draft_token_num - 1]
    selected = best.sort(1).values
    selected_index.copy_(selected)
    draft_tokens.copy_(tokens.gather(1, selected))
    if len(parents_list) > 1:
        parent_list.copy_(torch.cat([p.long() for p in parents_list[:-1]], 1))


def organize_draft_results(
    score_list: Sequence[Tensor],
    token_list: Sequence[Tensor],
    parents_list: Sequence[Tensor],
    draft_token_num: int,
    out: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Pick the D-1 best-scoring draft nodes of the S draft steps, in ascending flat-score order.

    After the S draft forwards this turns the per-step scores, tokens and parents into the inputs of
    :func:`build_tree_kernel_efficient`. Scores of all steps are flattened to width K + (S-1)K^2;
    the D-1 largest are selected (ties: the lower flat index wins; NaN counts as largest) and sorted
    ascending; their tokens are gathered.

    Args:
        score_list: S float32 tensors, ``[bs, 1, K]`` then ``[bs, K, K]``.
        token_list: S index tensors, ``[bs, K]`` then ``[bs, K*K]``.
        parents_list: S index tensors, ``[bs, K+1]`` then ``[bs, K]`` (the last is not used).
        draft_token_num: D, tree nodes including the root; ``D-1 <= K + (S-1)K^2``.
        out: optional ``(parent_list, selected_index, draft_tokens)``, all int64.

    Returns:
        ``parent_list [bs, K*(S-1)+1]`` (``[bs, 0]`` if S = 1), ``selected_index [bs, D-1]``,
        ``draft_tokens [bs, D-1]``, all int64.
    """
    score_list = _check_index_list("score_list", score_list)
    token_list = _check_index_list("token_list", token_list)
    parents_list = _check_index_list("parents_list", parents_list)
    num_steps = len(score_list)
    for name, items in (("token_list", token_list), ("parents_list", parents_list)):
        if len(items) != num_steps:
            raise ValueError(
                f"{name}: expected {num_steps} tensors (one per step, as score_list), got {len(items)}"
            )
    first = check_tensor("score_list[0]", score_list[0], dtype=torch.float32, ndim=3)
    bs, topk = first.shape[0], first.shape[2]
    if first.shape[1] != 1 or topk < 1:
        raise ValueError(f"score_list[0]: expected shape (bs, 1, K) with K >= 1, got {tuple(first.shape)}")
    for step in range(num_steps):
        rows = 1 if step == 0 else topk
        check_tensor(f"score_list[{step}]", score_list[step], dtype=torch.float32, shape=(bs, rows, topk))
        check_index(f"token_list[{step}]", token_list[step], shape=(bs, rows * topk))
        check_index(f"parents_list[{step}]", parents_list[step], shape=(bs, topk + 1 if step == 0 else topk))
    device = common_device(
        **{f"score_list[{i}]": t for i, t in enumerate(score_list)},
        **{f"token_list[{i}]": t for i, t in enumerate(token_list)},
        **{f"parents_list[{i}]": t for i, t in enumerate(parents_list)},
    )
    check_positive_int("draft_token_num", draft_token_num)
    num_scores = topk + (num_steps - 1) * topk * topk
    if draft_token_num - 1 > num_scores:
        raise ValueError(
            f"draft_token_num: expected D-1 <= K + (S-1)*K^2 = {num_scores} scored nodes, got D = {draft_token_num}"
        )
    shapes = (
        (bs, topk * (num_steps - 1) + 1 if num_steps > 1 else 0),
        (bs, draft_token_num - 1),
        (bs, draft_token_num - 1),
    )
    names = ("out[0]", "out[1]", "out[2]")
    if out is None:
        outputs = tuple(new_output(shape, torch.int64, device) for shape in shapes)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise ValueError("out: expected a tuple (parent_list, selected_index, draft_tokens)")
        outputs = tuple(
            check_output(name, o, dtype=torch.int64, device=device, shape=shape)
            for name, o, shape in zip(names, out, shapes, strict=True)
        )
    if bs == 0:
        return outputs  # type: ignore[return-value]
    _organize_draft_results_portable.dispatch(
        device, score_list, token_list, parents_list, draft_token_num, *outputs
    )
    return outputs  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# C2 build_tree_kernel_efficient


def _tree_parents(parent_list: Tensor, selected_index: Tensor, topk: int, num_nodes: int) -> Tensor:
    """Parent node of each node [bs, D]: 0 for children of the root, -1 for the root and for INVALID
    nodes (the parent's score index is not among the D-1 selected ones: malformed trees)."""
    bs, width = parent_list.shape
    selected = selected_index.long()
    step_slot = selected.div(topk, rounding_mode="floor")  # the parent's slot in parent_list; 0 = root
    if width > 0 and num_nodes > 1:
        wanted = parent_list.long().gather(1, step_slot.clamp(0, width - 1))
        # Search the D-1 selected entries only; the first match wins.
        match = _first_true(selected[:, None, :] == wanted[:, :, None])
        found = (step_slot >= 1) & (step_slot < width) & (match < num_nodes - 1)
        parent = torch.where(found, match + 1, -1)
    else:
        parent = torch.full_like(selected, -1)
    parent = torch.where(step_slot == 0, 0, parent)
    return torch.cat([selected.new_full((bs, 1), -1), parent], 1)


def _tree_mask_variant(*args: object) -> tuple[object, ...]:
    parent_list, selected_index, seq_lens = args[0], args[1], args[2]
    mode, tree_mask = args[6], args[7]
    return (int(mode), _dtypes(parent_list, selected_index, seq_lens, tree_mask))  # type: ignore[arg-type,call-overload]


@define_op(
    "build_tree_kernel_efficient",
    mutates=("tree_mask", "positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling"),
    op_class="latency",
    variant=_tree_mask_variant,
)
def _build_tree_kernel_efficient_portable(
    parent_list: Tensor,
    selected_index: Tensor,
    seq_lens: Tensor,
    topk: int,
    num_steps: int,
    draft_token_num: int,
    tree_mask_mode: int,
    tree_mask: Tensor,
    positions: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
) -> None:
    bs, num_nodes = retrieve_index.shape
    device = retrieve_index.device
    node = torch.arange(num_nodes, device=device)
    parent = _tree_parents(parent_list, selected_index, topk, num_nodes)

    # Links: children in ascending node order, INVALID nodes left out.
    is_child = parent[:, None, :] == node[:, None]  # [b, p, i]: node i's parent is p
    first_child = _first_true(is_child)
    retrieve_next_token.copy_(_or_none(first_child, num_nodes))
    retrieve_next_sibling.copy_(_next_siblings(parent))
    retrieve_index.copy_(torch.arange(bs, device=device)[:, None] * num_nodes + node)

    # Ancestor walk, at most S steps: it stops at the root and after an INVALID node's own column.
    ancestors = torch.zeros(bs, num_nodes, num_nodes, dtype=torch.bool, device=device)
    ancestors[:, :, 0] = True
    depth = torch.zeros(bs, num_nodes, dtype=torch.long, device=device)
    current = node.expand(bs, num_nodes)
    walking = current > 0
    for _ in range(num_steps):
        ancestors |= walking[:, :, None] & (current[:, :, None] == node)
        depth += walking
        up = parent.gather(1, current)
        walking = walking & (up > 0)
        current = torch.where(walking, up, current)
    seq = seq_lens.long()
    positions.view(bs, num_nodes).copy_(seq[:, None] + depth)

    if tree_mask_mode == QLEN_ONLY:
        tree_mask.view(bs, num_nodes, num_nodes).copy_(ancestors)
    elif tree_mask_mode == QLEN_ONLY_BITPACKING:
        bits = (ancestors.long() << node).sum(-1)  # columns are distinct bits: sum = or
        # Same-size signed view: CUDA has no bitwise_or for uint16/32/64, and the bits are the same.
        items = tree_mask.view(bs, num_nodes).view(_SIGNED_OF.get(tree_mask.dtype, tree_mask.dtype))
        items.bitwise_or_(bits.to(items.dtype))  # the caller zero-fills; ORing is the kernels' contract
    else:
        _scatter_distinct_bool_(tree_mask, _full_mask_tree_columns(seq, num_nodes), ancestors)


def build_tree_kernel_efficient(
    parent_list: Tensor,
    selected_index: Tensor,
    seq_lens: Tensor,
    topk: int,
    num_steps: int,
    draft_token_num: int,
    tree_mask_mode: int,
    tree_mask: Tensor | None = None,
    positions: Tensor | None = None,
    retrieve_index: Tensor | None = None,
    retrieve_next_token: Tensor | None = None,
    retrieve_next_sibling: Tensor | None = None,
    verified_id: Tensor | None = None,
    draft_tokens: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """Build the draft tree the target verifies: attention mask, positions and link lists.

    Runs between :func:`organize_draft_results` and the TARGET_VERIFY forward. Node 0 is the root
    (the last committed token); node i >= 1 is ``selected_index[b, i-1]``, whose parent is the root if
    ``selected_index // topk == 0`` and otherwise the node whose selected index equals
    ``parent_list[b, selected_index // topk]``. When no selected node matches (malformed trees, e.g.
    NaN scores) the node is INVALID: it is left out of the link lists, and the ancestor walk of the
    mask stops after its column. The walk takes at most ``num_steps`` steps.

    Outputs (each fully written for its tree columns):
        tree_mask: by ``tree_mask_mode``: FULL_MASK (0) a bool buffer of at least
            ``D*sum(seq_lens) + bs*D*D`` entries, required (the caller fills the prefix columns);
            QLEN_ONLY (1) ``[bs*D*D]`` bool; QLEN_ONLY_BITPACKING (2) ``[bs*D]`` integer items of at
            least 1/2/4 bytes for D <= 8/16/32 (D > 32 unsupported), zero-filled by the caller (the
            op ORs the bits in). The QLEN buffers are allocated (zeroed) when None.
        positions: ``[bs*D]`` int64, ``seq_lens[b] + depth`` of each node.
        retrieve_index: ``[bs, D]`` int64, ``b*D + i``.
        retrieve_next_token / retrieve_next_sibling: ``[bs, D]`` int64 first child / next sibling,
            -1 for none (the spec asks callers to pre-fill -1; every entry is written anyway).

    ``verified_id`` [bs] and ``draft_tokens`` [bs, D-1] (both or neither) give the sixth result, the
    verify input ids ``cat(verified_id[:, None], draft_tokens).flatten()`` (int64), else None.
    """
    check_index("parent_list", parent_list, ndim=2)
    check_index("selected_index", selected_index, ndim=2)
    check_index("seq_lens", seq_lens, ndim=1)
    check_positive_int("topk", topk)
    check_positive_int("num_steps", num_steps)
    check_positive_int("draft_token_num", draft_token_num)
    mode = _check_int("tree_mask_mode", tree_mask_mode)
    if mode not in _MASK_MODES:
        raise ValueError(
            f"tree_mask_mode: expected 0 (FULL_MASK), 1 (QLEN_ONLY) or 2 (QLEN_ONLY_BITPACKING), got {mode}"
        )
    mode = TreeMaskMode(mode)
    num_nodes = draft_token_num
    if mode == QLEN_ONLY_BITPACKING and num_nodes > _MAX_BITPACK_NODES:
        raise ValueError(
            f"tree_mask_mode: QLEN_ONLY_BITPACKING packs at most {_MAX_BITPACK_NODES} nodes per item, "
            f"got draft_token_num = {num_nodes}"
        )
    bs = seq_lens.shape[0]
    parent_width = topk * (num_steps - 1) + 1 if num_steps > 1 else 0
    check_index("parent_list", parent_list, shape=(bs, parent_width))
    check_index("selected_index", selected_index, shape=(bs, num_nodes - 1))
    if (verified_id is None) != (draft_tokens is None):
        raise ValueError("verified_id: pass verified_id and draft_tokens together, or neither")
    if verified_id is not None:
        check_index("verified_id", verified_id, shape=(bs,))
        check_index("draft_tokens", draft_tokens, shape=(bs, num_nodes - 1))
    device = common_device(
        parent_list=parent_list,
        selected_index=selected_index,
        seq_lens=seq_lens,
        verified_id=verified_id,
        draft_tokens=draft_tokens,
    )

    if mode == FULL_MASK:
        if tree_mask is None:
            raise ValueError("tree_mask: required for FULL_MASK (its size depends on seq_lens)")
        check_output("tree_mask", tree_mask, dtype=torch.bool, device=device, ndim=1)
    elif mode == QLEN_ONLY:
        if tree_mask is None:
            tree_mask = new_output((bs * num_nodes * num_nodes,), torch.bool, device, fill=False)
        check_output(
            "tree_mask", tree_mask, dtype=torch.bool, device=device, shape=(bs * num_nodes * num_nodes,)
        )
    else:
        item_dtype = next(dtype for nodes, dtype in _BITPACK_ALLOC if num_nodes <= nodes)
        if tree_mask is None:
            tree_mask = new_output((bs * num_nodes,), item_dtype, device, fill=0)
        check_tensor("tree_mask", tree_mask, dtype=_BITPACK_DTYPES)
        if tree_mask.dtype.itemsize < item_dtype.itemsize:
            raise TypeError(
                f"tree_mask: D = {num_nodes} needs items of at least {item_dtype.itemsize} bytes, "
                f"got {str(tree_mask.dtype).replace('torch.', '')}"
            )
        check_output("tree_mask", tree_mask, dtype=tree_mask.dtype, device=device, shape=(bs * num_nodes,))

    if positions is None:
        positions = new_output((bs * num_nodes,), torch.int64, device)
    check_output("positions", positions, dtype=torch.int64, device=device, shape=(bs * num_nodes,))
    links = []
    for name, given in (
        ("retrieve_index", retrieve_index),
        ("retrieve_next_token", retrieve_next_token),
        ("retrieve_next_sibling", retrieve_next_sibling),
    ):
        if given is None:
            given = new_output((bs, num_nodes), torch.int64, device, fill=-1)
        links.append(check_output(name, given, dtype=torch.int64, device=device, shape=(bs, num_nodes)))
    retrieve_index, retrieve_next_token, retrieve_next_sibling = links

    if value_checks_enabled(device):
        check_non_negative("seq_lens", seq_lens)
        check_range("selected_index", selected_index, 0, topk + (num_steps - 1) * topk * topk)
        if mode == FULL_MASK:
            needed = num_nodes * int(seq_lens.long().sum()) + bs * num_nodes * num_nodes
            if tree_mask.numel() < needed:
                raise ValueError(
                    f"tree_mask: FULL_MASK needs D*sum(seq_lens) + bs*D*D = {needed} entries, has {tree_mask.numel()}"
                )

    flat_tokens = None
    if verified_id is not None:
        flat_tokens = torch.cat([verified_id.long()[:, None], draft_tokens.long()], 1).flatten()  # type: ignore[union-attr]
    if bs > 0:
        _build_tree_kernel_efficient_portable.dispatch(
            device,
            parent_list,
            selected_index,
            seq_lens,
            topk,
            num_steps,
            num_nodes,
            int(mode),
            tree_mask,
            positions,
            retrieve_index,
            retrieve_next_token,
            retrieve_next_sibling,
        )
    return tree_mask, positions, retrieve_index, retrieve_next_token, retrieve_next_sibling, flat_tokens


# --------------------------------------------------------------------------------------------------
# C3 verify_tree_greedy


@define_op(
    "verify_tree_greedy",
    mutates=("predicts", "accept_index", "num_correct_drafts"),
    op_class="latency",
    variant=lambda *args: _dtypes(*args[3:8]),
)
def _verify_tree_greedy_portable(
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

    tokens = _padded_tokens(candidates)

    def first_matching_child(current: Tensor, kids: Tensor, walking: Tensor) -> Tensor:
        wanted = target_flat[flat_ids[batch, current].clamp(0, bs * num_nodes - 1)]
        return _first_true((tokens.gather(1, kids) == wanted[:, None]) & (kids < num_nodes))

    path, num_accepted = _walk_tree(
        retrieve_next_token, retrieve_next_sibling, width - 1, first_matching_child
    )
    # Greedy commits the target's token after every path node (it equals the next accepted draft).
    _commit_path(
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


def verify_tree_greedy(
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
        _verify_tree_greedy_portable.dispatch(
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


@define_op(
    "tree_speculative_sampling_target_only",
    mutates=("predicts", "accept_index", "num_correct_drafts", "draft_probs"),
    op_class="bandwidth",
    bytes_moved="8*bs*V",
    variant=lambda *args: _dtypes(*args[3:7]),
)
def _tree_speculative_sampling_target_only_portable(
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
    node_tokens = _padded_tokens(candidates)

    def first_accepted_child(current: Tensor, kids: Tensor, walking: Tensor) -> Tensor:
        tokens = node_tokens.gather(1, kids)
        usable = (kids < num_nodes) & (tokens >= 0) & (tokens < vocab)
        tokens = torch.where(usable, tokens, 0)
        row = current[:, None]
        prob = torch.where(usable, target_probs[batch, row, tokens], 0.0)
        # Each sibling is accepted with its target probability: the coin's position in the running
        # sum of the siblings' probabilities picks it.
        coin = uniform_samples[batch, row]
        accepted = usable & ((coin <= prob.cumsum(1) / threshold_acc) | (prob >= threshold_single))
        position = _first_true(accepted)
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

    path, num_accepted = _walk_tree(
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
    bonus = _sample_inverse_cdf(residual, uniform_samples_for_final_sampling, fallback_last_positive=True)
    # The token committed after path node k is node k+1's candidate; after the last, the bonus.
    next_nodes = torch.cat([path[:, 1:], path[:, -1:]], 1)
    tokens = node_tokens.gather(1, next_nodes)
    on_bonus = torch.arange(width, device=path.device) == num_accepted[:, None]
    tokens = torch.where(on_bonus, bonus[:, None], tokens)
    _commit_path(predicts, accept_index, num_correct_drafts, retrieve_index, path, num_accepted, tokens)


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


def tree_speculative_sampling_target_only(
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
        threshold_single, threshold_acc: acceptance thresholds (clamped to >= 1e-9); 1.0 is lossless.
        deterministic: ignored (the result is always deterministic).
    """
    links = {"retrieve_next_token": retrieve_next_token, "retrieve_next_sibling": retrieve_next_sibling}
    device, bs, num_nodes = _check_verify_args(
        predicts, accept_index, num_correct_drafts, candidates, retrieve_index, links
    )
    vocab = _check_probs(candidates, uniform_samples, uniform_samples_for_final_sampling, target_probs)
    check_tensor("draft_probs", draft_probs, dtype=torch.float32, shape=(bs, num_nodes, vocab))
    common_device(candidates=candidates, draft_probs=draft_probs)
    threshold_single = max(_check_float("threshold_single", threshold_single), _MIN_THRESHOLD)
    threshold_acc = max(_check_float("threshold_acc", threshold_acc), _MIN_THRESHOLD)
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic: expected a bool, got {type(deterministic).__name__}")
    if value_checks_enabled(device):
        check_range("candidates", candidates, 0, vocab)
    if bs > 0:
        _tree_speculative_sampling_target_only_portable.dispatch(
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


@define_op(
    "chain_speculative_sampling",
    mutates=("predicts", "accept_index", "num_correct_drafts"),
    op_class="bandwidth",
    bytes_moved="8*bs*V",
    variant=lambda *args: _dtypes(*args[3:5]),
)
def _chain_speculative_sampling_portable(
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
    bonus = _sample_inverse_cdf(residual, uniform_samples_for_final_sampling, fallback_last_positive=False)

    path = torch.arange(num_nodes, device=device).expand(bs, num_nodes)
    next_tokens = torch.cat([candidates[:, 1:].long(), candidates.new_zeros(bs, 1).long()], 1)
    path_tokens = torch.where(path == num_accepted[:, None], bonus[:, None], next_tokens)
    _commit_path(predicts, accept_index, num_correct_drafts, retrieve_index, path, num_accepted, path_tokens)


def chain_speculative_sampling(
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
        _chain_speculative_sampling_portable.dispatch(
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


@define_op(
    "fill_bonus_tokens",
    mutates=("bonus_tokens",),
    op_class="latency",
    variant=lambda accept_tokens, accept_lens, bonus_tokens: _dtypes(accept_tokens, accept_lens),
)
def _fill_bonus_tokens_portable(accept_tokens: Tensor, accept_lens: Tensor, bonus_tokens: Tensor) -> None:
    width = accept_tokens.shape[1]
    if width == 0:
        return  # every accept_lens is out of range: nothing is written
    column = accept_lens.long() - 1
    inside = (column >= 0) & (column < width)
    picked = accept_tokens.gather(1, column.clamp(0, width - 1)[:, None]).squeeze(1)
    bonus_tokens.copy_(torch.where(inside, picked.to(torch.int32), bonus_tokens))


def fill_bonus_tokens(
    accept_tokens: Tensor, accept_lens: Tensor, bonus_tokens: Tensor | None = None
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
        _fill_bonus_tokens_portable.dispatch(device, accept_tokens, accept_lens, bonus_tokens)
    return bonus_tokens


# --------------------------------------------------------------------------------------------------
# C6 NGRAM helpers


@define_op(
    "pack_ngram_full_mask",
    mutates=("full_mask",),
    op_class="bandwidth",
    bytes_moved="D*sum(seq_lens) + 2*bs*D*D",
    variant=lambda draft_tree_mask, seq_lens, *rest: seq_lens.dtype,
)
def _pack_ngram_full_mask_portable(
    draft_tree_mask: Tensor, seq_lens: Tensor, draft_token_num: int, full_mask: Tensor
) -> None:
    bs = seq_lens.shape[0]
    num_nodes = draft_token_num
    seq = seq_lens.long()
    # Every row is seq_b prefix ones followed by its D tree bits, so the whole packed region
    # [0, D*sum(seq) + bs*D*D) is set to True first and the tree bits are scattered over it.
    packed_len = num_nodes * seq.sum() + bs * num_nodes * num_nodes
    full_mask.masked_fill_(torch.arange(full_mask.numel(), device=seq.device) < packed_len, True)
    tree_bits = draft_tree_mask.view(bs, num_nodes, num_nodes)
    _scatter_distinct_bool_(full_mask, _full_mask_tree_columns(seq, num_nodes), tree_bits)


def pack_ngram_full_mask(
    draft_tree_mask: Tensor, seq_lens: Tensor, draft_token_num: int, full_mask: Tensor
) -> Tensor:
    """Expand NGRAM draft-tree masks (QLEN layout) into the FULL_MASK layout the attention reads.

    Row (b, i) starts at ``D*sum_{j<b} seq_lens[j] + b*D*D + i*(seq_lens[b] + D)`` and is
    ``seq_lens[b]`` ones followed by the D bits ``draft_tree_mask[(b*D + i)*D : +D]``. Entries past
    ``D*sum(seq_lens) + bs*D*D`` are not written.

    Args:
        draft_tree_mask: ``[bs*D*D]`` bool.
        seq_lens: ``[bs]`` idx.
        draft_token_num: D (1..256 in sglang; any positive value here).
        full_mask: out ``[>= D*sum(seq_lens) + bs*D*D]`` bool.
    """
    check_index("seq_lens", seq_lens, ndim=1)
    bs = seq_lens.shape[0]
    check_positive_int("draft_token_num", draft_token_num)
    num_nodes = draft_token_num
    check_tensor("draft_tree_mask", draft_tree_mask, dtype=torch.bool, shape=(bs * num_nodes * num_nodes,))
    device = common_device(draft_tree_mask=draft_tree_mask, seq_lens=seq_lens)
    check_output("full_mask", full_mask, dtype=torch.bool, device=device, ndim=1)
    if value_checks_enabled(device):
        check_non_negative("seq_lens", seq_lens)
        needed = num_nodes * int(seq_lens.long().sum()) + bs * num_nodes * num_nodes
        if full_mask.numel() < needed:
            raise ValueError(
                f"full_mask: needs D*sum(seq_lens) + bs*D*D = {needed} entries, has {full_mask.numel()}"
            )
    if bs > 0:
        _pack_ngram_full_mask_portable.dispatch(device, draft_tree_mask, seq_lens, num_nodes, full_mask)
    return full_mask


@define_op(
    "reconstruct_indices_from_tree_mask",
    mutates=("positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling"),
    op_class="latency",
    variant=lambda tree_mask, seq_lens, *rest: seq_lens.dtype,
)
def _reconstruct_indices_from_tree_mask_portable(
    tree_mask: Tensor,
    seq_lens: Tensor,
    draft_token_num: int,
    positions: Tensor,
    retrieve_index: Tensor,
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
) -> None:
    bs = seq_lens.shape[0]
    num_nodes = draft_token_num
    node = torch.arange(num_nodes, device=seq_lens.device)
    mask = tree_mask.view(bs, num_nodes, num_nodes)
    # Only the columns before the diagonal describe ancestors; the nearest one is the parent.
    ancestor = mask & (node < node[:, None])
    depth = ancestor.sum(-1)
    parent = torch.where(ancestor, node, -1).amax(-1)
    positions.view(bs, num_nodes).copy_(seq_lens.long()[:, None] + depth)
    retrieve_index.copy_(torch.arange(bs, device=node.device)[:, None] * num_nodes + node)
    # First child: the first later row that has this node's column (mask[b, later, this]).
    later_with_column = mask.transpose(1, 2) & (node > node[:, None])
    retrieve_next_token.copy_(_or_none(_first_true(later_with_column), num_nodes))
    retrieve_next_sibling.copy_(_next_siblings(parent))


def reconstruct_indices_from_tree_mask(
    tree_mask: Tensor,
    seq_lens: Tensor,
    draft_token_num: int,
    positions: Tensor | None = None,
    retrieve_index: Tensor | None = None,
    retrieve_next_token: Tensor | None = None,
    retrieve_next_sibling: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Recover positions and link lists from an NGRAM draft tree given as a QLEN mask.

    For node i of request b (row ``(b*D + i)*D``, only columns before the diagonal are read): depth =
    number of True columns, parent = the nearest True column; ``positions = seq_lens[b] + depth``;
    first child = the first later row with column i set; next sibling = the first later row with
    the same parent. Each output is fully written and allocated when None.

    Args:
        tree_mask: ``[bs*D*D]`` bool.
        seq_lens: ``[bs]`` idx.
        draft_token_num: D.
        positions: out ``[bs*D]`` int64; retrieve_index / retrieve_next_token /
            retrieve_next_sibling: out ``[bs, D]`` int64 (-1 = none).
    """
    check_index("seq_lens", seq_lens, ndim=1)
    bs = seq_lens.shape[0]
    check_positive_int("draft_token_num", draft_token_num)
    num_nodes = draft_token_num
    check_tensor("tree_mask", tree_mask, dtype=torch.bool, shape=(bs * num_nodes * num_nodes,))
    device = common_device(tree_mask=tree_mask, seq_lens=seq_lens)
    if positions is None:
        positions = new_output((bs * num_nodes,), torch.int64, device)
    check_output("positions", positions, dtype=torch.int64, device=device, shape=(bs * num_nodes,))
    links = []
    for name, given in (
        ("retrieve_index", retrieve_index),
        ("retrieve_next_token", retrieve_next_token),
        ("retrieve_next_sibling", retrieve_next_sibling),
    ):
        if given is None:
            given = new_output((bs, num_nodes), torch.int64, device)
        links.append(check_output(name, given, dtype=torch.int64, device=device, shape=(bs, num_nodes)))
    if value_checks_enabled(device):
        check_non_negative("seq_lens", seq_lens)
    if bs > 0:
        _reconstruct_indices_from_tree_mask_portable.dispatch(
            device, tree_mask, seq_lens, num_nodes, positions, *links
        )
    return (positions, *links)  # type: ignore[return-value]
