"""Family C, tree build: organize the draft results into a tree and build its mask, positions and
retrieve links."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..._constants import FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING, SIGNED_OF
from ...opdef import OpDef, define_op
from ...validation import (
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_range,
    check_sum_fits,
    check_tensor,
    common_device,
    exact_sum,
    new_output,
    new_outputs,
    tree_index_outputs,
    value_checks_enabled,
)
from ..rowwise import first_true
from ._common import (
    BITPACK_ALLOC,
    BITPACK_DTYPES,
    MASK_MODES,
    MAX_BITPACK_NODES,
    full_mask_tree_columns,
    next_siblings,
    or_none,
    scatter_distinct_bool_,
)

# --------------------------------------------------------------------------------------------------
# C1 organize_draft_results


def _organize_draft_results_reference(
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


@define_op(
    _organize_draft_results_reference,
    mutates=("parent_list", "selected_index", "draft_tokens"),
    op_class="latency",
    variant=("token_list", "parents_list"),
    portable_reason="a sort and gathers over [bs, K + (S-1)K^2]: torch is a few launches",
)
def organize_draft_results(
    op: OpDef,
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
    score_list = check_index_list("score_list", score_list)
    token_list = check_index_list("token_list", token_list)
    parents_list = check_index_list("parents_list", parents_list)
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
        outputs = tuple(new_outputs([(shape, torch.int64) for shape in shapes], device))
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise ValueError("out: expected a tuple (parent_list, selected_index, draft_tokens)")
        outputs = tuple(
            check_output(name, o, dtype=torch.int64, device=device, shape=shape)
            for name, o, shape in zip(names, out, shapes, strict=True)
        )
    if bs == 0:
        return outputs  # type: ignore[return-value]
    op.dispatch(device, score_list, token_list, parents_list, draft_token_num, *outputs)
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
        match = first_true(selected[:, None, :] == wanted[:, :, None])
        found = (step_slot >= 1) & (step_slot < width) & (match < num_nodes - 1)
        parent = torch.where(found, match + 1, -1)
    else:
        parent = torch.full_like(selected, -1)
    parent = torch.where(step_slot == 0, 0, parent)
    return torch.cat([selected.new_full((bs, 1), -1), parent], 1)


def _build_tree_kernel_efficient_reference(
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
    verified_id: Tensor | None,
    draft_tokens: Tensor | None,
    flat_tokens: Tensor | None,
) -> None:
    bs, num_nodes = retrieve_index.shape
    device = retrieve_index.device
    if flat_tokens is not None:  # verified_id and draft_tokens come with it
        assert verified_id is not None and draft_tokens is not None
        tokens = flat_tokens.view(bs, num_nodes)
        tokens[:, 0] = verified_id
        tokens[:, 1:] = draft_tokens
    node = torch.arange(num_nodes, device=device)
    parent = _tree_parents(parent_list, selected_index, topk, num_nodes)

    # Links: children in ascending node order, INVALID nodes left out.
    is_child = parent[:, None, :] == node[:, None]  # [b, p, i]: node i's parent is p
    first_child = first_true(is_child)
    retrieve_next_token.copy_(or_none(first_child, num_nodes))
    retrieve_next_sibling.copy_(next_siblings(parent))
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
        items = tree_mask.view(bs, num_nodes).view(SIGNED_OF.get(tree_mask.dtype, tree_mask.dtype))
        items.bitwise_or_(bits.to(items.dtype))  # the caller zero-fills; ORing is the kernels' contract
    else:
        scatter_distinct_bool_(tree_mask, full_mask_tree_columns(seq, num_nodes), ancestors)


@define_op(
    _build_tree_kernel_efficient_reference,
    mutates=(
        "tree_mask",
        "positions",
        "retrieve_index",
        "retrieve_next_token",
        "retrieve_next_sibling",
        "flat_tokens",
    ),
    op_class="latency",
    variant=("tree_mask_mode", "parent_list", "selected_index", "seq_lens", "tree_mask"),
)
def build_tree_kernel_efficient(
    op: OpDef,
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
    mode = check_int("tree_mask_mode", tree_mask_mode)
    if mode not in MASK_MODES:
        raise ValueError(
            f"tree_mask_mode: expected 0 (FULL_MASK), 1 (QLEN_ONLY) or 2 (QLEN_ONLY_BITPACKING), got {mode}"
        )
    num_nodes = draft_token_num
    if mode == QLEN_ONLY_BITPACKING and num_nodes > MAX_BITPACK_NODES:
        raise ValueError(
            f"tree_mask_mode: QLEN_ONLY_BITPACKING packs at most {MAX_BITPACK_NODES} nodes per item, "
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
        item_dtype = next(dtype for nodes, dtype in BITPACK_ALLOC if num_nodes <= nodes)
        if tree_mask is None:
            tree_mask = new_output((bs * num_nodes,), item_dtype, device, fill=0)
        check_tensor("tree_mask", tree_mask, dtype=BITPACK_DTYPES)
        if tree_mask.dtype.itemsize < item_dtype.itemsize:
            raise TypeError(
                f"tree_mask: D = {num_nodes} needs items of at least {item_dtype.itemsize} bytes, "
                f"got {str(tree_mask.dtype).replace('torch.', '')}"
            )
        check_output("tree_mask", tree_mask, dtype=tree_mask.dtype, device=device, shape=(bs * num_nodes,))

    positions, links = tree_index_outputs(
        device,
        bs,
        num_nodes,
        positions,
        (retrieve_index, retrieve_next_token, retrieve_next_sibling),
        fill=-1,
    )
    retrieve_index, retrieve_next_token, retrieve_next_sibling = links

    if value_checks_enabled(device):
        check_non_negative("seq_lens", seq_lens)
        check_sum_fits(
            "seq_lens",
            seq_lens,
            torch.int64,
            constant=num_steps,
            expression="seq_lens + depth (<= num_steps)",
        )
        check_range("selected_index", selected_index, 0, topk + (num_steps - 1) * topk * topk)
        if mode == FULL_MASK:
            needed = num_nodes * exact_sum(seq_lens) + bs * num_nodes * num_nodes
            if tree_mask.numel() < needed:
                raise ValueError(
                    f"tree_mask: FULL_MASK needs D*sum(seq_lens) + bs*D*D = {needed} entries, has {tree_mask.numel()}"
                )

    # The verify input ids, written by the provider with the tree. No output parameter holds them,
    # so they are allocated also under graph capture (the graph's pool keeps them for replays).
    flat_tokens = None
    if verified_id is not None:
        flat_tokens = torch.empty(bs * num_nodes, dtype=torch.int64, device=device)
    if bs > 0:
        op.dispatch(
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
            verified_id,
            draft_tokens,
            flat_tokens,
        )
    return tree_mask, positions, retrieve_index, retrieve_next_token, retrieve_next_sibling, flat_tokens


# --------------------------------------------------------------------------------------------------
# Checks of the build contracts alone


def check_index_list(name: str, tensors: object) -> list[Tensor]:
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"{name}: expected a non-empty list of tensors")
    return list(tensors)


def check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    return value
