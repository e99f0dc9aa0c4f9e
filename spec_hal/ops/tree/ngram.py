"""Family C, NGRAM helpers: the full attention mask and retrieve links from an NGRAM draft tree mask."""

from __future__ import annotations

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_sum_fits,
    check_tensor,
    common_device,
    exact_sum,
    tree_index_outputs,
    value_checks_enabled,
)
from ..rowwise import first_true
from ._common import (
    full_mask_tree_columns,
    next_siblings,
    or_none,
    scatter_distinct_bool_,
)

# --------------------------------------------------------------------------------------------------
# C6 NGRAM helpers


def _pack_ngram_full_mask_reference(
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
    scatter_distinct_bool_(full_mask, full_mask_tree_columns(seq, num_nodes), tree_bits)


@define_op(
    _pack_ngram_full_mask_reference,
    mutates=("full_mask",),
    op_class="bandwidth",
    variant=("seq_lens",),
    portable_reason="NGRAM only; not yet in the Triton family",
)
def pack_ngram_full_mask(
    op: OpDef, draft_tree_mask: Tensor, seq_lens: Tensor, draft_token_num: int, full_mask: Tensor
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
        needed = num_nodes * exact_sum(seq_lens) + bs * num_nodes * num_nodes
        if full_mask.numel() < needed:
            raise ValueError(
                f"full_mask: needs D*sum(seq_lens) + bs*D*D = {needed} entries, has {full_mask.numel()}"
            )
    if bs > 0:
        op.dispatch(device, draft_tree_mask, seq_lens, num_nodes, full_mask)
    return full_mask


def _reconstruct_indices_from_tree_mask_reference(
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
    retrieve_next_token.copy_(or_none(first_true(later_with_column), num_nodes))
    retrieve_next_sibling.copy_(next_siblings(parent))


@define_op(
    _reconstruct_indices_from_tree_mask_reference,
    mutates=("positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling"),
    op_class="latency",
    variant=("seq_lens",),
    portable_reason="NGRAM only; not yet in the Triton family",
)
def reconstruct_indices_from_tree_mask(
    op: OpDef,
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
    positions, links = tree_index_outputs(
        device, bs, num_nodes, positions, (retrieve_index, retrieve_next_token, retrieve_next_sibling)
    )
    if value_checks_enabled(device):
        check_non_negative("seq_lens", seq_lens)
        check_sum_fits(
            "seq_lens", seq_lens, torch.int64, constant=num_nodes - 1, expression="seq_lens + depth (< D)"
        )
    if bs > 0:
        op.dispatch(device, tree_mask, seq_lens, num_nodes, positions, *links)
    return (positions, *links)  # type: ignore[return-value]
