"""Family A slot assignment: A1 ``assign_extend_cache_locs`` / ``assign_extend_cache_locs_uniform``, A2
``assign_req_to_token_pool`` and A3 ``assign_draft_cache_locs_contiguous``."""

from __future__ import annotations

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    check_capacity,
    check_fits_int32,
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_range,
    check_req_to_token,
    common_device,
    exact_sum,
    new_output,
    value_checks_enabled,
)
from ._common import (
    draft_slot_columns,
    ragged_fill_,
    ragged_layout,
    scatter_valid_,
    take,
)


def _assign_extend_cache_locs_reference(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, end: Tensor, out: Tensor
) -> None:
    start = start.long()
    rows = req_pool_indices.long()

    def read(run: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        return take(req_to_token, rows[run], start[run] + within)

    bound = req_pool_indices.shape[0] * req_to_token.shape[1]  # each window lies within a row
    ragged_fill_(out, end.long() - start, read, max_total=bound)


@define_op(
    _assign_extend_cache_locs_reference,
    mutates=("out",),
    op_class="latency",
)
def assign_extend_cache_locs(
    op: OpDef, req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, end: Tensor, out: Tensor
) -> Tensor:
    """Gather the KV slots of a window ``[start[b], end[b])`` of each request's ``req_to_token`` row.

    Used before the target verify forward (slots ``[seq_len, seq_len + D)``) and when moving accepted
    KV (``[seq_len, seq_len + accepted)``). Request b's slots land at ``out[off[b]:]`` with ``off``
    the exclusive cumsum of ``end - start``; entries of ``out`` past the total are untouched.

    Args:
        req_pool_indices: ``[bs]`` int32/int64, the ``req_to_token`` row of each request.
        req_to_token: ``[R, P]`` int32 slot table.
        start, end: ``[bs]`` int32/int64 column windows, ``0 <= start <= end <= P``.
        out: ``[>= sum(end - start)]`` int64, written.

    Returns:
        ``out``.
    """
    check_index("req_pool_indices", req_pool_indices)
    bs = req_pool_indices.shape[0]
    check_req_to_token("req_to_token", req_to_token)
    check_index("start", start, shape=(bs,))
    check_index("end", end, shape=(bs,))
    device = common_device(
        req_pool_indices=req_pool_indices, req_to_token=req_to_token, start=start, end=end, out=out
    )
    check_output("out", out, dtype=torch.int64, device=device, ndim=1)
    if value_checks_enabled(device):
        check_range("req_pool_indices", req_pool_indices, 0, req_to_token.shape[0])
        check_capacity("out", out, check_window(start, end, req_to_token.shape[1]), "sum(end - start)")
    if bs == 0:
        return out
    op.dispatch(device, req_pool_indices, req_to_token, start, end, out)
    return out


def _assign_extend_cache_locs_uniform_reference(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, draft_token_num: int, out: Tensor
) -> None:
    columns = start.long()[:, None] + torch.arange(draft_token_num, device=start.device)
    values, inside = take(req_to_token, req_pool_indices.long()[:, None], columns)
    rows_out = out.view(-1, draft_token_num)
    rows_out.copy_(torch.where(inside, values.long(), rows_out))


@define_op(
    _assign_extend_cache_locs_uniform_reference,
    mutates=("out",),
    op_class="latency",
)
def assign_extend_cache_locs_uniform(
    op: OpDef,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    start: Tensor,
    draft_token_num: int,
    out: Tensor | None = None,
) -> Tensor:
    """:func:`assign_extend_cache_locs` with every window ``draft_token_num`` long (``end = start + D``).

    Reads the verify slots of each request (``start = seq_lens``) for the target verify forward;
    row b lands at ``out[b*D:(b+1)*D]`` (no prefix sum).

    Args:
        req_pool_indices: ``[bs]`` int32/int64.
        req_to_token: ``[R, P]`` int32.
        start: ``[bs]`` int32/int64, ``0 <= start``, ``start + D <= P``.
        draft_token_num: D >= 1.
        out: optional ``[bs*D]`` int64.

    Returns:
        ``out``.
    """
    check_index("req_pool_indices", req_pool_indices)
    bs = req_pool_indices.shape[0]
    check_req_to_token("req_to_token", req_to_token)
    check_index("start", start, shape=(bs,))
    check_positive_int("draft_token_num", draft_token_num)
    device = common_device(req_pool_indices=req_pool_indices, req_to_token=req_to_token, start=start, out=out)
    if out is None:
        out = new_output((bs * draft_token_num,), torch.int64, device)
    else:
        check_output("out", out, dtype=torch.int64, device=device, shape=(bs * draft_token_num,))
    if value_checks_enabled(device):
        check_range("req_pool_indices", req_pool_indices, 0, req_to_token.shape[0])
        check_range("start", start, 0, req_to_token.shape[1] - draft_token_num + 1)
    if bs == 0:
        return out
    op.dispatch(device, req_pool_indices, req_to_token, start, draft_token_num, out)
    return out


def _assign_req_to_token_pool_reference(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, end: Tensor, out_cache_loc: Tensor
) -> None:
    start = start.long()
    run, within, inside = ragged_layout(end.long() - start, out_cache_loc.shape[0])
    rows = req_pool_indices.long()[run]
    columns = start[run] + within
    _, in_table = take(req_to_token, rows, columns)
    scatter_valid_(req_to_token, (rows, columns), out_cache_loc, inside & in_table)


@define_op(
    _assign_req_to_token_pool_reference,
    mutates=("req_to_token",),
    op_class="latency",
)
def assign_req_to_token_pool(
    op: OpDef,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    start: Tensor,
    end: Tensor,
    out_cache_loc: Tensor,
) -> Tensor:
    """Record freshly allocated KV slots in ``req_to_token`` (inverse of :func:`assign_extend_cache_locs`).

    ``req_to_token[rpi[b], start[b] + i] = int32(out_cache_loc[off[b] + i])`` for
    ``i < end[b] - start[b]``, ``off`` the exclusive cumsum of the window lengths. Used when KV is
    reserved before the draft loop (``start = kv_allocated_len``) and, in spec v1, after verify.

    Args:
        req_pool_indices: ``[bs]`` int32/int64 (distinct rows; duplicates race).
        req_to_token: ``[R, P]`` int32, mutated.
        start, end: ``[bs]`` int32/int64 column windows, ``0 <= start <= end <= P``.
        out_cache_loc: ``[>= sum(end - start)]`` int32/int64 slot ids (must fit int32).

    Returns:
        ``req_to_token``.
    """
    check_index("req_pool_indices", req_pool_indices)
    bs = req_pool_indices.shape[0]
    check_req_to_token("req_to_token", req_to_token)
    check_index("start", start, shape=(bs,))
    check_index("end", end, shape=(bs,))
    check_index("out_cache_loc", out_cache_loc)
    device = common_device(
        req_pool_indices=req_pool_indices,
        req_to_token=req_to_token,
        start=start,
        end=end,
        out_cache_loc=out_cache_loc,
    )
    if value_checks_enabled(device):
        check_range("req_pool_indices", req_pool_indices, 0, req_to_token.shape[0])
        total = check_window(start, end, req_to_token.shape[1])
        check_capacity("out_cache_loc", out_cache_loc, total, "sum(end - start)")
        check_fits_int32("out_cache_loc", out_cache_loc[:total])
    if bs == 0:
        return req_to_token
    op.dispatch(device, req_pool_indices, req_to_token, start, end, out_cache_loc)
    return req_to_token


def _assign_draft_cache_locs_contiguous_reference(
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    topk: int,
    num_steps: int,
    page_size: int,
    out: Tensor,
) -> None:
    columns = draft_slot_columns(seq_lens.long(), topk, num_steps, page_size)
    values, inside = take(req_to_token, req_pool_indices.long()[:, None, None], columns)
    slots = out.view(-1, topk, num_steps)
    slots.copy_(torch.where(inside, values.long(), slots))


def check_draft_columns(seq_lens: Tensor, topk: int, num_steps: int, page_size: int, pool_len: int) -> None:
    """Value check: every draft slot column (and the prefix) of every request lies inside the row."""
    check_non_negative("seq_lens", seq_lens)
    if seq_lens.numel() == 0:
        return
    # In float64: int64 columns of a huge seq_len would wrap below pool_len and pass. Columns past
    # 2**53 round, but stay far past any pool_len.
    last = draft_slot_columns(seq_lens.double(), topk, num_steps, page_size)[:, -1, -1]
    if bool((last >= pool_len).any()):
        b = int(last.argmax())
        raise ValueError(
            f"seq_lens: the draft slots of seq_lens[{b}]={int(seq_lens[b])} (topk={topk}, num_steps={num_steps}, "
            f"page_size={page_size}) reach column {last[b].item():.0f}, past req_to_token's {pool_len} columns"
        )


@define_op(
    _assign_draft_cache_locs_contiguous_reference,
    mutates=("out",),
    op_class="latency",
)
def assign_draft_cache_locs_contiguous(
    op: OpDef,
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    topk: int,
    num_steps: int,
    page_size: int = 1,
    out: Tensor | None = None,
) -> Tensor:
    """Read the ``topk * num_steps`` draft KV slots reserved for each request before the draft loop.

    ``out[b*K*S + t*S + s]`` is the slot of draft step s of branch t: column ``seq_lens[b] + t*S + s``
    of the request's row when ``page_size == 1`` or ``topk == 1``, else the paged tree layout (§A3:
    branch t's pages start at ``base + t*npp*ps`` with ``base`` the last full prefix page boundary,
    ``npp = ceil((seq_len % ps + S) / ps)``, step s at ``+ seq_len % ps + s``).

    Args:
        req_pool_indices: ``[bs]`` int32/int64.
        req_to_token: ``[R, P]`` int32.
        seq_lens: ``[bs]`` int32/int64 committed lengths.
        topk, num_steps, page_size: K >= 1, S >= 1, ps >= 1.
        out: optional ``[bs*K*S]`` int64.

    Returns:
        ``out``.
    """
    check_index("req_pool_indices", req_pool_indices)
    bs = req_pool_indices.shape[0]
    check_req_to_token("req_to_token", req_to_token)
    check_index("seq_lens", seq_lens, shape=(bs,))
    check_positive_int("topk", topk)
    check_positive_int("num_steps", num_steps)
    check_positive_int("page_size", page_size)
    device = common_device(
        req_pool_indices=req_pool_indices, req_to_token=req_to_token, seq_lens=seq_lens, out=out
    )
    size = bs * topk * num_steps
    if out is None:
        out = new_output((size,), torch.int64, device)
    else:
        check_output("out", out, dtype=torch.int64, device=device, shape=(size,))
    if value_checks_enabled(device):
        check_range("req_pool_indices", req_pool_indices, 0, req_to_token.shape[0])
        check_draft_columns(seq_lens, topk, num_steps, page_size, req_to_token.shape[1])
    if bs == 0:
        return out
    op.dispatch(device, req_pool_indices, req_to_token, seq_lens, topk, num_steps, page_size, out)
    return out


def check_window(start: Tensor, end: Tensor, pool_len: int) -> int:
    """Value checks of per-request column windows ``[start, end)`` of ``req_to_token``; their total."""
    check_range("start", start, 0, pool_len + 1)
    check_range("end", end, 0, pool_len + 1)
    lens = end.long() - start.long()
    if lens.numel() and bool((lens < 0).any()):
        first = int(lens.argmin())
        raise ValueError(
            f"end: expected end >= start, got end={int(end[first])} < start={int(start[first])} at {first}"
        )
    return exact_sum(lens)
