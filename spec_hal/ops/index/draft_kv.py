"""Family A draft decode attention indices: A4 ``generate_draft_decode_kv_indices`` and A10 the host
sizing of its ``kv_indices`` buffer."""

from __future__ import annotations

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    ANY_SIZE,
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_range,
    check_req_to_token,
    common_device,
    exact_sum,
    value_checks_enabled,
)
from ._common import INT32_MAX, draft_slot_columns, ragged_fill_, take
from .assign import check_draft_columns


def _generate_draft_decode_kv_indices_reference(
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    positions: Tensor,
    page_size: int,
    topk: int,
    num_steps: int,
    kv_indices: Tensor,
    kv_indptr: Tensor,
) -> None:
    device = seq_lens.device
    bs = seq_lens.shape[0]
    branches = bs * topk
    appended = torch.arange(1, num_steps + 1, device=device)[:, None]  # draft entries in row s: s + 1
    # indptr[s][z] for z >= 1: the prefix lengths of the branches before z plus their appended entries.
    prefix_before = torch.cumsum(positions.long(), 0)
    branch_no = torch.arange(1, branches + 1, device=device)
    kv_indptr[:, 1 : branches + 1] = (prefix_before + branch_no * appended).to(torch.int32)

    # Row s lists, per branch (b, t) in order, the request's prefix slots then its first s+1 draft slots.
    prefix_len = seq_lens.long().repeat_interleave(topk)  # [bs*K]
    rows = req_pool_indices.long().repeat_interleave(topk)
    draft_columns = draft_slot_columns(seq_lens.long(), topk, num_steps, page_size).view(branches, num_steps)

    def read(branch: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        own_prefix = prefix_len[branch]
        draft_step = (within - own_prefix).clamp(0, num_steps - 1)
        columns = torch.where(within < own_prefix, within, draft_columns[branch, draft_step])
        return take(req_to_token, rows[branch], columns)

    bound = topk * bs * req_to_token.shape[1] + branches * num_steps  # a prefix never exceeds a row
    ragged_fill_(kv_indices, prefix_len + appended, read, max_total=bound)


def _draft_kv_indices_bytes(seq_lens: Tensor, topk: int, num_steps: int, **_: object) -> int:
    """The prefix slots read once and written into every one of the K*S lists, plus the draft
    suffixes, the positions read and the indptr written."""
    bs, prefix = seq_lens.numel(), int(seq_lens.long().sum())
    lists = topk * num_steps
    return (
        4 * (prefix + bs * lists)
        + 4 * lists * prefix
        + 2 * bs * lists * (num_steps + 1)
        + 4 * num_steps * (bs * topk + 1)
    )


@define_op(
    _generate_draft_decode_kv_indices_reference,
    mutates=("kv_indices", "kv_indptr"),
    op_class="bandwidth",
    bytes_moved=_draft_kv_indices_bytes,
)
def generate_draft_decode_kv_indices(
    op: OpDef,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    positions: Tensor,
    page_size: int,
    topk: int,
    num_steps: int,
    kv_indices: Tensor,
    kv_indptr: Tensor,
) -> tuple[Tensor, Tensor]:
    """Per draft step, the CSR KV index lists (one per branch) for paged attention in the draft loop.

    Row s of ``kv_indices`` lists, for each branch z = b*K + t in order, the request's ``seq_lens[b]``
    prefix slots then the slots of its draft steps ``0..s`` (layout of
    :func:`assign_draft_cache_locs_contiguous`); it uses ``K*sum(seq_lens) + bs*K*(s+1)`` entries, the
    rest is untouched. ``kv_indptr[s][z] = sum(positions[:z]) + z*(s+1)`` for ``1 <= z <= bs*K``;
    column 0 is not written (the caller zeroes it once).

    Args:
        req_pool_indices: ``[bs]`` int32/int64.
        req_to_token: ``[R, P]`` int32.
        seq_lens: ``[bs]`` int32/int64 prefix lengths (sglang ``paged_kernel_lens``).
        positions: ``[bs*K]`` int32/int64 per-branch prefix lengths (seq_lens repeated K for real rows;
            CUDA-graph padding rows may differ).
        page_size, topk, num_steps: ps, K, S >= 1.
        kv_indices: ``[S, >= K*sum(seq_lens) + bs*K*S]`` int32, written.
        kv_indptr: ``[S, >= bs*K + 1]`` int32, written from column 1.

    Returns:
        ``(kv_indices, kv_indptr)``.
    """
    check_index("req_pool_indices", req_pool_indices)
    bs = req_pool_indices.shape[0]
    check_req_to_token("req_to_token", req_to_token)
    check_index("seq_lens", seq_lens, shape=(bs,))
    check_positive_int("page_size", page_size)
    check_positive_int("topk", topk)
    check_positive_int("num_steps", num_steps)
    check_index("positions", positions, shape=(bs * topk,))
    device = common_device(
        req_pool_indices=req_pool_indices,
        req_to_token=req_to_token,
        seq_lens=seq_lens,
        positions=positions,
        kv_indices=kv_indices,
        kv_indptr=kv_indptr,
    )
    check_output("kv_indices", kv_indices, dtype=torch.int32, device=device, shape=(num_steps, ANY_SIZE))
    check_output("kv_indptr", kv_indptr, dtype=torch.int32, device=device, shape=(num_steps, ANY_SIZE))
    if kv_indptr.shape[1] < bs * topk + 1:
        raise ValueError(
            f"kv_indptr: expected at least bs*topk + 1 = {bs * topk + 1} columns, got {kv_indptr.shape[1]}"
        )
    if value_checks_enabled(device):
        check_range("req_pool_indices", req_pool_indices, 0, req_to_token.shape[0])
        check_draft_columns(seq_lens, topk, num_steps, page_size, req_to_token.shape[1])
        check_non_negative("positions", positions)
        used = topk * exact_sum(seq_lens) + bs * topk * num_steps
        if kv_indices.shape[1] < used:
            raise ValueError(
                f"kv_indices: needs at least {used} columns (topk*sum(seq_lens) + bs*topk*num_steps), "
                f"has {kv_indices.shape[1]}"
            )
        if exact_sum(positions) + bs * topk * num_steps > INT32_MAX:
            raise ValueError("positions: sum(positions) + bs*topk*num_steps overflows the int32 kv_indptr")
    if bs == 0:
        return kv_indices, kv_indptr
    op.dispatch(
        device,
        req_pool_indices,
        req_to_token,
        seq_lens,
        positions,
        page_size,
        topk,
        num_steps,
        kv_indices,
        kv_indptr,
    )
    return kv_indices, kv_indptr


def draft_kv_indices_buffer_width(num_seqs: int, topk: int, max_context_len: int) -> int:
    """Columns a ``kv_indices`` row of :func:`generate_draft_decode_kv_indices` needs at most.

    ``num_seqs * topk * max_context_len`` (the topk factor is mandatory: each branch lists the whole
    prefix). ValueError if it reaches 2**31: the int32 ``kv_indptr`` could not address it.
    """
    check_positive_int("num_seqs", num_seqs, minimum=0)
    check_positive_int("topk", topk)
    check_positive_int("max_context_len", max_context_len, minimum=0)
    width = num_seqs * topk * max_context_len
    if width > INT32_MAX:
        raise ValueError(
            f"max_context_len: num_seqs*topk*max_context_len = {num_seqs}*{topk}*{max_context_len} = {width} "
            f"does not fit int32 kv_indptr (max {INT32_MAX})"
        )
    return width


def draft_kv_indices_used_len(seq_lens_sum: int, num_seqs: int, topk: int, num_steps: int) -> int:
    """Entries a ``kv_indices`` row uses at the last draft step: ``seq_lens_sum*K + num_seqs*K*S``.

    ValueError if it reaches 2**31 (int32 ``kv_indptr``).
    """
    check_positive_int("seq_lens_sum", seq_lens_sum, minimum=0)
    check_positive_int("num_seqs", num_seqs, minimum=0)
    check_positive_int("topk", topk)
    check_positive_int("num_steps", num_steps)
    used = seq_lens_sum * topk + num_seqs * topk * num_steps
    if used > INT32_MAX:
        raise ValueError(
            f"seq_lens_sum: seq_lens_sum*topk + num_seqs*topk*num_steps = {used} does not fit int32 kv_indptr "
            f"(max {INT32_MAX})"
        )
    return used
