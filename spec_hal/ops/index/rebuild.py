"""Family A rows kept after verify: A8 ``align_evict_mask_to_page_size`` and A9
``rebuild_compact_draft_req_to_token``."""

from __future__ import annotations

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    ANY_SIZE,
    check_fits_int32,
    check_index,
    check_non_negative,
    check_positive_int,
    check_range,
    check_req_to_token,
    check_sum_below,
    check_tensor,
    common_device,
    value_checks_enabled,
)
from ._common import scatter_valid_, take


def _align_evict_mask_to_page_size_reference(
    seq_lens: Tensor, evict_mask: Tensor, page_size: int, draft_token_num: int
) -> None:
    rows = evict_mask.view(-1, draft_token_num)
    seq = seq_lens.long()
    kept = draft_token_num - rows.sum(1)
    # Offset, relative to the request's first verify slot, of the page holding its last kept token.
    page_start = torch.div(seq + kept - 1, page_size, rounding_mode="floor") * page_size - seq
    column = torch.arange(draft_token_num, device=evict_mask.device)
    in_last_page = (column >= page_start[:, None]) & (column < page_start[:, None] + page_size)
    rows.logical_and_(in_last_page.logical_not_())


@define_op(
    _align_evict_mask_to_page_size_reference,
    mutates=("evict_mask",),
    op_class="latency",
)
def align_evict_mask_to_page_size(
    op: OpDef, seq_lens: Tensor, evict_mask: Tensor, page_size: int, draft_token_num: int
) -> Tensor:
    """Spec v1, paged chains: never free the page holding a request's last kept token.

    Per request (a row of ``D`` entries of ``evict_mask``, True = free), with ``kept = D - #True``,
    clear the mask on ``[max(start, 0), min(start + ps, D))``, ``start = floor((seq_len + kept - 1) /
    ps) * ps - seq_len``. Assumes the kept tokens are a prefix of the row (chains).
    Example: seq_lens [5, 8], ps 4, D 4, rows [T,F,T,T] -> [F,F,F,T] and [F,F,F,F].

    Args:
        seq_lens: ``[bs]`` int32/int64, >= 0.
        evict_mask: ``[bs*D]`` bool, mutated.
        page_size, draft_token_num: ps >= 1, D >= 1.

    Returns:
        ``evict_mask``.
    """
    check_index("seq_lens", seq_lens)
    bs = seq_lens.shape[0]
    check_positive_int("page_size", page_size)
    check_positive_int("draft_token_num", draft_token_num)
    check_tensor("evict_mask", evict_mask, dtype=torch.bool, shape=(bs * draft_token_num,))
    device = common_device(seq_lens=seq_lens, evict_mask=evict_mask)
    if value_checks_enabled(device):
        check_non_negative("seq_lens", seq_lens)
    if bs == 0:
        return evict_mask
    op.dispatch(device, seq_lens, evict_mask, page_size, draft_token_num)
    return evict_mask


def _rebuild_compact_draft_req_to_token_reference(
    draft_req_to_token: Tensor,
    target_req_to_token: Tensor,
    req_pool_indices: Tensor,
    suffix_start: Tensor,
    draft_prefix_lens: Tensor,
    verify_out_cache_loc: Tensor,
) -> None:
    block = verify_out_cache_loc.shape[1]
    rows = req_pool_indices.long()[:, None]
    prefix_len = draft_prefix_lens.long()[:, None]
    column = torch.arange(draft_req_to_token.shape[1], device=rows.device)[None, :]
    in_prefix = column < prefix_len
    from_target, target_ok = take(target_req_to_token, rows, suffix_start.long()[:, None] + column)
    block_column = column - prefix_len
    from_verify, verify_ok = take(
        verify_out_cache_loc, torch.arange(rows.shape[0], device=rows.device)[:, None], block_column
    )
    values = torch.where(in_prefix, from_target, from_verify.to(torch.int32))
    readable = torch.where(in_prefix, target_ok, verify_ok & (block_column < block))
    _, row_ok = take(draft_req_to_token, rows, column)
    scatter_valid_(draft_req_to_token, (rows, column), values, readable & row_ok)


@define_op(
    _rebuild_compact_draft_req_to_token_reference,
    mutates=("draft_req_to_token",),
    op_class="latency",
)
def rebuild_compact_draft_req_to_token(
    op: OpDef,
    draft_req_to_token: Tensor,
    target_req_to_token: Tensor,
    req_pool_indices: Tensor,
    suffix_start: Tensor,
    draft_prefix_lens: Tensor,
    verify_out_cache_loc: Tensor,
) -> Tensor:
    """DFlash compact draft pool: rebuild each request's draft row from its target row and verify slots.

    Draft row ``rpi[b]`` gets, in columns ``[0, pl)``, the target row's slots ``[suffix_start[b],
    suffix_start[b] + pl)`` (``pl = draft_prefix_lens[b]``), then in ``[pl, pl + block)`` the verify
    slots ``verify_out_cache_loc[b]``. Other columns are untouched.

    Args:
        draft_req_to_token: ``[R, Pd]`` int32, mutated.
        target_req_to_token: ``[R, Pt]`` int32.
        req_pool_indices: ``[bs]`` int32/int64 (same row in both tables).
        suffix_start: ``[bs]`` int32/int64, ``suffix_start + pl <= Pt``.
        draft_prefix_lens: ``[bs]`` int32/int64, ``pl + block <= Pd``.
        verify_out_cache_loc: ``[bs, block]`` int32/int64 slot ids (must fit int32).

    Returns:
        ``draft_req_to_token``.
    """
    check_req_to_token("draft_req_to_token", draft_req_to_token)
    rows_total = draft_req_to_token.shape[0]
    check_tensor("target_req_to_token", target_req_to_token, dtype=torch.int32, shape=(rows_total, ANY_SIZE))
    check_index("req_pool_indices", req_pool_indices)
    bs = req_pool_indices.shape[0]
    check_index("suffix_start", suffix_start, shape=(bs,))
    check_index("draft_prefix_lens", draft_prefix_lens, shape=(bs,))
    check_index("verify_out_cache_loc", verify_out_cache_loc, shape=(bs, ANY_SIZE))
    device = common_device(
        draft_req_to_token=draft_req_to_token,
        target_req_to_token=target_req_to_token,
        req_pool_indices=req_pool_indices,
        suffix_start=suffix_start,
        draft_prefix_lens=draft_prefix_lens,
        verify_out_cache_loc=verify_out_cache_loc,
    )
    if value_checks_enabled(device):
        block = verify_out_cache_loc.shape[1]
        check_range("req_pool_indices", req_pool_indices, 0, rows_total)
        check_range("draft_prefix_lens", draft_prefix_lens, 0, draft_req_to_token.shape[1] - block + 1)
        check_non_negative("suffix_start", suffix_start)
        check_sum_below(
            "suffix_start",
            suffix_start,
            target_req_to_token.shape[1] + 1,
            plus=draft_prefix_lens,
            expression="suffix_start + draft_prefix_lens (within target_req_to_token's columns)",
        )
        check_fits_int32("verify_out_cache_loc", verify_out_cache_loc)
    if bs == 0:
        return draft_req_to_token
    op.dispatch(
        device,
        draft_req_to_token,
        target_req_to_token,
        req_pool_indices,
        suffix_start,
        draft_prefix_lens,
        verify_out_cache_loc,
    )
    return draft_req_to_token
