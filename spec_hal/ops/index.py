"""Family A: index plumbing between ``req_to_token`` rows and flat KV slot lists .

Contracts and portable references live together: each ``_<op>_reference`` function is the op's
portable provider (and the provider signature); each public op is made by ``define_op`` from its
contract, which validates and dispatches.

Most ops here move ragged runs (one run per request, lengths known only on the device). The
portable references keep every shape fixed by the shapes of their arguments:

* a ragged *output* is filled position by position: :func:`_ragged_layout` finds, for every output
  position, its run (binary search on the inclusive cumsum of the run lengths) and its index within
  the run, and positions outside every run keep their value (:func:`_ragged_fill_`);
* a scatter into a table (``req_to_token``) writes the valid lanes only (:func:`_scatter_valid_`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..opdef import define_op
from ..validation import (
    ANY_SIZE,
    check_fits_int32,
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_range,
    check_sum_below,
    check_sum_fits,
    check_tensor,
    common_device,
    exact_sum,
    new_output,
    value_checks_enabled,
)

__all__ = [
    "assign_extend_cache_locs",
    "assign_extend_cache_locs_uniform",
    "assign_req_to_token_pool",
    "assign_draft_cache_locs_contiguous",
    "generate_draft_decode_kv_indices",
    "fill_accept_out_cache_loc",
    "get_src_tgt_cache_loc",
    "get_target_cache_loc",
    "create_num_accept_tokens_filter",
    "filter_finished_cache_loc",
    "align_evict_mask_to_page_size",
    "rebuild_compact_draft_req_to_token",
    "draft_kv_indices_buffer_width",
    "draft_kv_indices_used_len",
]

_INT32_MAX = 2**31 - 1


# --------------------------------------------------------------------------------------------------
# Shared device helpers (fixed shapes, no host sync)


def _take(table: Tensor, *index: Tensor) -> tuple[Tensor, Tensor]:
    """``table[index]`` read with every index clamped into range, and the mask of in-range lanes.

    Out-of-range lanes (unchecked ids on accelerators) read some in-range element and must be masked
    by the caller; the read itself never leaves the table.
    """
    shape = torch.broadcast_shapes(*(i.shape for i in index))
    inside = torch.ones(shape, dtype=torch.bool, device=table.device)
    if table.numel() == 0:
        return torch.zeros(shape, dtype=table.dtype, device=table.device), inside.logical_not_()
    clamped = []
    for axis, ids in enumerate(index):
        size = table.shape[axis]
        inside = inside & (ids >= 0) & (ids < size)
        clamped.append(ids.clamp(0, size - 1))
    return table[tuple(clamped)], inside


def _ragged_layout(lens: Tensor, width: int) -> tuple[Tensor, Tensor, Tensor]:
    """Locate positions ``0..width-1`` in the concatenation of runs of lengths ``lens`` (last dim).

    Run r occupies ``[off[r], off[r] + lens[r])`` with ``off`` the exclusive cumsum of ``lens``.
    Returns ``(run, within, inside)`` of shape ``lens.shape[:-1] + (width,)``: the run each position
    falls in, its index within that run, and whether it lies inside a run at all (positions past the
    total, or any position when a length is negative, are outside).
    """
    lens = lens.long()
    shape = (*lens.shape[:-1], width)
    if lens.shape[-1] == 0:
        zeros = torch.zeros(shape, dtype=torch.long, device=lens.device)
        return zeros, zeros, torch.zeros(shape, dtype=torch.bool, device=lens.device)
    ends = torch.cumsum(lens, dim=-1)
    positions = torch.arange(width, device=lens.device).expand(shape).contiguous()
    run = torch.searchsorted(ends, positions, right=True).clamp_(max=lens.shape[-1] - 1)
    run_len = lens.gather(-1, run)
    within = positions - (ends.gather(-1, run) - run_len)
    inside = (within >= 0) & (within < run_len)
    return run, within, inside


_Reader = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


def _ragged_fill_(out: Tensor, lens: Tensor, read: _Reader, *, max_total: int | None = None) -> None:
    """Write the concatenation of ragged runs into ``out`` (last dim); other entries keep their value.

    ``read(run, within)`` returns the values of those run positions and the mask of lanes it could
    read (ids in range). ``max_total`` is a shape-derived bound on the total: positions past it are
    not even looked at.
    """
    width = out.shape[-1] if max_total is None else min(out.shape[-1], max_total)
    target = out[..., :width]
    run, within, inside = _ragged_layout(lens, width)
    values, readable = read(run, within)
    target.copy_(torch.where(inside & readable, values.to(out.dtype), target))


def _scatter_valid_(dest: Tensor, index: tuple[Tensor, ...], values: Tensor, valid: Tensor) -> None:
    """``dest[index] = values`` on the lanes where ``valid``; the other lanes change nothing.

    A fixed-shape scatter writes every lane, so the others are pointed at an element whose final value
    is known: the first valid lane's target with that lane's value (a duplicate write of one value is
    deterministic) or, when no lane is valid, element 0 with its own value. ``index`` must be in range
    on the valid lanes.
    """
    shape = torch.broadcast_shapes(valid.shape, values.shape, *(i.shape for i in index))
    if dest.numel() == 0 or shape.numel() == 0:
        return
    valid = valid.expand(shape).reshape(-1)
    values = values.to(dest.dtype).expand(shape).reshape(-1)
    index = tuple(i.long().expand(shape).reshape(-1) for i in index)
    first = valid.to(torch.int32).argmax().view(1)  # first valid lane (lane 0 if none)
    any_valid = valid.any()
    spare_index = tuple(torch.where(any_valid, i[first], 0) for i in index)  # [1]: no host read
    spare_value = torch.where(any_valid, values[first], dest[spare_index])
    dest.index_put_(
        tuple(torch.where(valid, i, spare) for i, spare in zip(index, spare_index, strict=True)),
        torch.where(valid, values, spare_value),
    )


def _draft_slot_columns(seq_lens: Tensor, topk: int, num_steps: int, page_size: int) -> Tensor:
    """``req_to_token`` column of draft step s of branch t of each request: ``[bs, topk, num_steps]``,
    in ``seq_lens``' dtype (int64 to index; float64 to check, where a huge length cannot wrap).

    Paged tree layout (§A3): each branch owns whole pages after the last full prefix page, starting
    with a copy of the partial prefix page, so step s sits at the partial length + s in them. With
    ``page_size == 1`` or ``topk == 1`` this reduces to the contiguous ``seq_len + t*num_steps + s``.
    """
    seq = seq_lens[:, None, None]
    partial = torch.remainder(seq, page_size)
    pages_per_branch = torch.div(partial + (num_steps + page_size - 1), page_size, rounding_mode="floor")
    branch = torch.arange(topk, device=seq.device)[None, :, None]
    step = torch.arange(num_steps, device=seq.device)[None, None, :]
    return seq + branch * pages_per_branch * page_size + step


# --------------------------------------------------------------------------------------------------
# Shared validation helpers


def _check_req_to_token(name: str, value: object) -> Tensor:
    return check_tensor(name, value, dtype=torch.int32, ndim=2)


def _total(lens: Tensor) -> int:
    return exact_sum(lens)  # a Python int: an int64 sum of huge lengths would wrap and pass the checks


def _check_capacity(name: str, tensor: Tensor, needed: int, what: str) -> None:
    if tensor.numel() < needed:
        raise ValueError(f"{name}: needs at least {needed} elements ({what}), has {tensor.numel()}")


def _check_window(start: Tensor, end: Tensor, pool_len: int) -> int:
    """Value checks of per-request column windows ``[start, end)`` of ``req_to_token``; their total."""
    check_range("start", start, 0, pool_len + 1)
    check_range("end", end, 0, pool_len + 1)
    lens = end.long() - start.long()
    if lens.numel() and bool((lens < 0).any()):
        first = int(lens.argmin())
        raise ValueError(
            f"end: expected end >= start, got end={int(end[first])} < start={int(start[first])} at {first}"
        )
    return _total(lens)


# --------------------------------------------------------------------------------------------------
# A1 assign_extend_cache_locs / assign_extend_cache_locs_uniform


def _assign_extend_cache_locs_reference(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, end: Tensor, out: Tensor
) -> None:
    start = start.long()
    rows = req_pool_indices.long()

    def read(run: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        return _take(req_to_token, rows[run], start[run] + within)

    bound = req_pool_indices.shape[0] * req_to_token.shape[1]  # each window lies within a row
    _ragged_fill_(out, end.long() - start, read, max_total=bound)


@define_op(
    _assign_extend_cache_locs_reference,
    mutates=("out",),
    op_class="latency",
)
def assign_extend_cache_locs(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, end: Tensor, out: Tensor
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
    _check_req_to_token("req_to_token", req_to_token)
    check_index("start", start, shape=(bs,))
    check_index("end", end, shape=(bs,))
    device = common_device(
        req_pool_indices=req_pool_indices, req_to_token=req_to_token, start=start, end=end, out=out
    )
    check_output("out", out, dtype=torch.int64, device=device, ndim=1)
    if value_checks_enabled(device):
        check_range("req_pool_indices", req_pool_indices, 0, req_to_token.shape[0])
        _check_capacity("out", out, _check_window(start, end, req_to_token.shape[1]), "sum(end - start)")
    if bs == 0:
        return out
    assign_extend_cache_locs.dispatch(device, req_pool_indices, req_to_token, start, end, out)
    return out


def _assign_extend_cache_locs_uniform_reference(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, draft_token_num: int, out: Tensor
) -> None:
    columns = start.long()[:, None] + torch.arange(draft_token_num, device=start.device)
    values, inside = _take(req_to_token, req_pool_indices.long()[:, None], columns)
    rows_out = out.view(-1, draft_token_num)
    rows_out.copy_(torch.where(inside, values.long(), rows_out))


@define_op(
    _assign_extend_cache_locs_uniform_reference,
    mutates=("out",),
    op_class="latency",
)
def assign_extend_cache_locs_uniform(
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
    _check_req_to_token("req_to_token", req_to_token)
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
    assign_extend_cache_locs_uniform.dispatch(
        device, req_pool_indices, req_to_token, start, draft_token_num, out
    )
    return out


# --------------------------------------------------------------------------------------------------
# A2 assign_req_to_token_pool


def _assign_req_to_token_pool_reference(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, end: Tensor, out_cache_loc: Tensor
) -> None:
    start = start.long()
    run, within, inside = _ragged_layout(end.long() - start, out_cache_loc.shape[0])
    rows = req_pool_indices.long()[run]
    columns = start[run] + within
    _, in_table = _take(req_to_token, rows, columns)
    _scatter_valid_(req_to_token, (rows, columns), out_cache_loc, inside & in_table)


@define_op(
    _assign_req_to_token_pool_reference,
    mutates=("req_to_token",),
    op_class="latency",
)
def assign_req_to_token_pool(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, end: Tensor, out_cache_loc: Tensor
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
    _check_req_to_token("req_to_token", req_to_token)
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
        total = _check_window(start, end, req_to_token.shape[1])
        _check_capacity("out_cache_loc", out_cache_loc, total, "sum(end - start)")
        check_fits_int32("out_cache_loc", out_cache_loc[:total])
    if bs == 0:
        return req_to_token
    assign_req_to_token_pool.dispatch(device, req_pool_indices, req_to_token, start, end, out_cache_loc)
    return req_to_token


# --------------------------------------------------------------------------------------------------
# A3 assign_draft_cache_locs_contiguous


def _assign_draft_cache_locs_contiguous_reference(
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    topk: int,
    num_steps: int,
    page_size: int,
    out: Tensor,
) -> None:
    columns = _draft_slot_columns(seq_lens.long(), topk, num_steps, page_size)
    values, inside = _take(req_to_token, req_pool_indices.long()[:, None, None], columns)
    slots = out.view(-1, topk, num_steps)
    slots.copy_(torch.where(inside, values.long(), slots))


def _check_draft_columns(seq_lens: Tensor, topk: int, num_steps: int, page_size: int, pool_len: int) -> None:
    """Value check: every draft slot column (and the prefix) of every request lies inside the row."""
    check_non_negative("seq_lens", seq_lens)
    if seq_lens.numel() == 0:
        return
    # In float64: int64 columns of a huge seq_len would wrap below pool_len and pass. Columns past
    # 2**53 round, but stay far past any pool_len.
    last = _draft_slot_columns(seq_lens.double(), topk, num_steps, page_size)[:, -1, -1]
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
    _check_req_to_token("req_to_token", req_to_token)
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
        _check_draft_columns(seq_lens, topk, num_steps, page_size, req_to_token.shape[1])
    if bs == 0:
        return out
    assign_draft_cache_locs_contiguous.dispatch(
        device, req_pool_indices, req_to_token, seq_lens, topk, num_steps, page_size, out
    )
    return out


# --------------------------------------------------------------------------------------------------
# A4 generate_draft_decode_kv_indices


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
    draft_columns = _draft_slot_columns(seq_lens.long(), topk, num_steps, page_size).view(branches, num_steps)

    def read(branch: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        own_prefix = prefix_len[branch]
        draft_step = (within - own_prefix).clamp(0, num_steps - 1)
        columns = torch.where(within < own_prefix, within, draft_columns[branch, draft_step])
        return _take(req_to_token, rows[branch], columns)

    bound = topk * bs * req_to_token.shape[1] + branches * num_steps  # a prefix never exceeds a row
    _ragged_fill_(kv_indices, prefix_len + appended, read, max_total=bound)


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
    _check_req_to_token("req_to_token", req_to_token)
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
        _check_draft_columns(seq_lens, topk, num_steps, page_size, req_to_token.shape[1])
        check_non_negative("positions", positions)
        used = topk * _total(seq_lens) + bs * topk * num_steps
        if kv_indices.shape[1] < used:
            raise ValueError(
                f"kv_indices: needs at least {used} columns (topk*sum(seq_lens) + bs*topk*num_steps), "
                f"has {kv_indices.shape[1]}"
            )
        if _total(positions) + bs * topk * num_steps > _INT32_MAX:
            raise ValueError("positions: sum(positions) + bs*topk*num_steps overflows the int32 kv_indptr")
    if bs == 0:
        return kv_indices, kv_indptr
    generate_draft_decode_kv_indices.dispatch(
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


# --------------------------------------------------------------------------------------------------
# A5 fill_accept_out_cache_loc


def _fill_accept_out_cache_loc_reference(
    accept_index: Tensor, out_cache_loc: Tensor, accept_out_cache_loc: Tensor, size: int
) -> None:
    considered = accept_index.reshape(-1)[:size]
    accepted = (considered >= 0) & (considered < out_cache_loc.shape[0])  # -1 and out of range: rejected

    def read(entry: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        return _take(out_cache_loc, considered[entry])

    # Each accepted entry is a run of length 1: run r's offset is its rank among accepted entries.
    _ragged_fill_(accept_out_cache_loc, accepted, read, max_total=size)


@define_op(
    _fill_accept_out_cache_loc_reference,
    mutates=("accept_out_cache_loc",),
    op_class="latency",
)
def fill_accept_out_cache_loc(
    accept_index: Tensor, out_cache_loc: Tensor, accept_out_cache_loc: Tensor, size: int | None = None
) -> Tensor:
    """Compact the KV slots of the accepted draft tokens, in accept order.

    Over the first ``size`` entries p of the flattened ``accept_index`` (-1 = rejected),
    ``accept_out_cache_loc[rank(p)] = out_cache_loc[accept_index[p]]`` with rank(p) the number of
    accepted entries before p. Used after verify to find the slots whose KV moves to the target
    positions; entries past the accepted count are untouched.

    Args:
        accept_index: ``[bs, W]`` int32/int64, values in ``[-1, len(out_cache_loc))``.
        out_cache_loc: ``[bs*D]`` int32/int64 verify slots.
        accept_out_cache_loc: ``[>= size]`` int64, written.
        size: prefix of the flat ``accept_index`` to consider, ``0 <= size <= bs*W``; None = all.

    Returns:
        ``accept_out_cache_loc``.
    """
    check_index("accept_index", accept_index, ndim=2)
    bs = accept_index.shape[0]
    check_index("out_cache_loc", out_cache_loc)
    device = common_device(
        accept_index=accept_index, out_cache_loc=out_cache_loc, accept_out_cache_loc=accept_out_cache_loc
    )
    if size is None:
        size = accept_index.numel()
    check_positive_int("size", size, minimum=0)
    if size > accept_index.numel():
        raise ValueError(f"size: expected at most accept_index.numel() = {accept_index.numel()}, got {size}")
    check_output(
        "accept_out_cache_loc", accept_out_cache_loc, dtype=torch.int64, device=device, ndim=1, min_numel=size
    )
    if value_checks_enabled(device):
        check_range("accept_index", accept_index.reshape(-1)[:size], 0, out_cache_loc.shape[0], allow=-1)
    if bs == 0 or size == 0:
        return accept_out_cache_loc
    fill_accept_out_cache_loc.dispatch(device, accept_index, out_cache_loc, accept_out_cache_loc, size)
    return accept_out_cache_loc


# --------------------------------------------------------------------------------------------------
# A6 get_src_tgt_cache_loc / get_target_cache_loc


def _get_src_tgt_cache_loc_reference(
    seq_lens: Tensor,
    out_cache_loc: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    draft_token_num: int,
    page_size: int,
    src_cache_loc: Tensor,
    tgt_cache_loc: Tensor,
    to_free_num_slots: Tensor,
) -> None:
    values, inside = _take(out_cache_loc, accept_index.long())
    src_cache_loc.copy_(torch.where(inside, values.long(), src_cache_loc))
    tgt_cache_loc.zero_()
    seq = seq_lens.long()
    extended = seq + draft_token_num
    committed = seq + num_correct_drafts.long() + 1
    page_end = torch.div(committed + (page_size - 1), page_size, rounding_mode="floor") * page_size
    to_free_num_slots.copy_(extended - torch.minimum(page_end, extended))


@define_op(
    _get_src_tgt_cache_loc_reference,
    mutates=("src_cache_loc", "tgt_cache_loc", "to_free_num_slots"),
    op_class="latency",
)
def get_src_tgt_cache_loc(
    seq_lens: Tensor,
    out_cache_loc: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    draft_token_num: int,
    page_size: int,
    src_cache_loc: Tensor | None = None,
    tgt_cache_loc: Tensor | None = None,
    to_free_num_slots: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Spec v1, paged tree accept: where accepted KV comes from and how many tail slots to free.

    ``src_cache_loc = out_cache_loc[accept_index]``, ``tgt_cache_loc`` zero-filled (filled later by
    :func:`get_target_cache_loc`), and per request ``to_free_num_slots = ext - min(roundup(seq_len +
    ncd + 1, ps), ext)`` with ``ext = seq_len + D``: the verify slots past the page holding the last
    committed token.

    Args:
        seq_lens: ``[bs]`` int32/int64 committed lengths before this step.
        out_cache_loc: ``[bs*D]`` int32/int64 verify slots.
        accept_index: ``[A]`` int32/int64 compacted accepted flat ids (no -1), in ``[0, bs*D)``.
        num_correct_drafts: ``[bs]`` int32/int64 in ``[0, D)``.
        draft_token_num, page_size: D >= 1, ps >= 1.
        src_cache_loc, tgt_cache_loc: optional ``[A]`` int64. to_free_num_slots: optional ``[bs]`` int64.

    Returns:
        ``(src_cache_loc, tgt_cache_loc, to_free_num_slots)``.
    """
    check_index("seq_lens", seq_lens)
    bs = seq_lens.shape[0]
    check_positive_int("draft_token_num", draft_token_num)
    check_positive_int("page_size", page_size)
    check_index("out_cache_loc", out_cache_loc, shape=(bs * draft_token_num,))
    check_index("accept_index", accept_index)
    check_index("num_correct_drafts", num_correct_drafts, shape=(bs,))
    device = common_device(
        seq_lens=seq_lens,
        out_cache_loc=out_cache_loc,
        accept_index=accept_index,
        num_correct_drafts=num_correct_drafts,
        src_cache_loc=src_cache_loc,
        tgt_cache_loc=tgt_cache_loc,
        to_free_num_slots=to_free_num_slots,
    )
    accepted = accept_index.shape[0]
    src_cache_loc = _optional_output("src_cache_loc", src_cache_loc, (accepted,), device)
    tgt_cache_loc = _optional_output("tgt_cache_loc", tgt_cache_loc, (accepted,), device)
    to_free_num_slots = _optional_output("to_free_num_slots", to_free_num_slots, (bs,), device)
    if value_checks_enabled(device):
        check_non_negative("seq_lens", seq_lens)
        check_range("accept_index", accept_index, 0, out_cache_loc.shape[0])
        check_range("num_correct_drafts", num_correct_drafts, 0, draft_token_num)
    if bs == 0:
        return src_cache_loc, tgt_cache_loc, to_free_num_slots
    get_src_tgt_cache_loc.dispatch(
        device,
        seq_lens,
        out_cache_loc,
        accept_index,
        num_correct_drafts,
        draft_token_num,
        page_size,
        src_cache_loc,
        tgt_cache_loc,
        to_free_num_slots,
    )
    return src_cache_loc, tgt_cache_loc, to_free_num_slots


def _optional_output(
    name: str,
    value: Tensor | None,
    shape: tuple[int, ...],
    device: torch.device,
    dtype: torch.dtype = torch.int64,
) -> Tensor:
    if value is None:
        return new_output(shape, dtype, device)
    return check_output(name, value, dtype=dtype, device=device, shape=shape)


def _get_target_cache_loc_reference(
    tgt_cache_loc: Tensor,
    to_free_slots: Tensor,
    num_correct_drafts: Tensor,
    to_free_num_slots: Tensor,
    out_cache_loc: Tensor,
    draft_token_num: int,
) -> None:
    rows = out_cache_loc.view(-1, draft_token_num)
    bs = rows.shape[0]
    to_free = to_free_num_slots.long()

    def read_accepted(run: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        return _take(rows, run, within)  # the first ncd+1 verify slots of the request

    def read_freed(run: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        return _take(rows, run, draft_token_num - to_free[run] + within)  # its last to_free slots

    bound = bs * draft_token_num  # each run lies within the request's D verify slots
    _ragged_fill_(tgt_cache_loc, num_correct_drafts.long() + 1, read_accepted, max_total=bound)
    _ragged_fill_(to_free_slots, to_free, read_freed, max_total=bound)


@define_op(
    _get_target_cache_loc_reference,
    mutates=("tgt_cache_loc", "to_free_slots"),
    op_class="latency",
)
def get_target_cache_loc(
    tgt_cache_loc: Tensor,
    to_free_slots: Tensor,
    num_correct_drafts: Tensor,
    to_free_num_slots: Tensor,
    out_cache_loc: Tensor,
    draft_token_num: int,
) -> tuple[Tensor, Tensor]:
    """Spec v1, paged tree accept: the slots accepted KV moves to and the verify slots to free.

    Request b's first ``ncd[b] + 1`` verify slots go to ``tgt_cache_loc`` at the exclusive cumsum of
    ``ncd + 1``; its last ``to_free_num_slots[b]`` verify slots go to ``to_free_slots`` at the
    exclusive cumsum of ``to_free_num_slots``. Entries past either total are untouched. (sglang's
    ``num_verify_tokens`` is ``draft_token_num``.)

    Args:
        tgt_cache_loc: ``[>= sum(ncd + 1)]`` int64, written.
        to_free_slots: ``[>= sum(to_free_num_slots)]`` int64, written.
        num_correct_drafts: ``[bs]`` int32/int64 in ``[0, D)``.
        to_free_num_slots: ``[bs]`` int32/int64 in ``[0, D]`` (from :func:`get_src_tgt_cache_loc`).
        out_cache_loc: ``[bs*D]`` int32/int64 verify slots.
        draft_token_num: D >= 1.

    Returns:
        ``(tgt_cache_loc, to_free_slots)``.
    """
    check_index("num_correct_drafts", num_correct_drafts)
    bs = num_correct_drafts.shape[0]
    check_index("to_free_num_slots", to_free_num_slots, shape=(bs,))
    check_positive_int("draft_token_num", draft_token_num)
    check_index("out_cache_loc", out_cache_loc, shape=(bs * draft_token_num,))
    device = common_device(
        tgt_cache_loc=tgt_cache_loc,
        to_free_slots=to_free_slots,
        num_correct_drafts=num_correct_drafts,
        to_free_num_slots=to_free_num_slots,
        out_cache_loc=out_cache_loc,
    )
    check_output("tgt_cache_loc", tgt_cache_loc, dtype=torch.int64, device=device, ndim=1)
    check_output("to_free_slots", to_free_slots, dtype=torch.int64, device=device, ndim=1)
    if value_checks_enabled(device):
        check_range("num_correct_drafts", num_correct_drafts, 0, draft_token_num)
        check_range("to_free_num_slots", to_free_num_slots, 0, draft_token_num + 1)
        _check_capacity(
            "tgt_cache_loc", tgt_cache_loc, _total(num_correct_drafts) + bs, "sum(num_correct_drafts + 1)"
        )
        _check_capacity("to_free_slots", to_free_slots, _total(to_free_num_slots), "sum(to_free_num_slots)")
    if bs == 0:
        return tgt_cache_loc, to_free_slots
    get_target_cache_loc.dispatch(
        device,
        tgt_cache_loc,
        to_free_slots,
        num_correct_drafts,
        to_free_num_slots,
        out_cache_loc,
        draft_token_num,
    )
    return tgt_cache_loc, to_free_slots


# --------------------------------------------------------------------------------------------------
# A7 create_num_accept_tokens_filter / filter_finished_cache_loc


def _create_num_accept_tokens_filter_reference(
    num_correct_drafts: Tensor, unfinished_index: Tensor, seq_lens: Tensor, num_accept_tokens_filter: Tensor
) -> None:
    committed = num_correct_drafts.long() + 1
    num_accept_tokens_filter.zero_()
    rows = unfinished_index.long()
    values, inside = _take(committed, rows)
    _scatter_valid_(num_accept_tokens_filter, (rows,), values, inside)
    seq_lens.add_(committed.to(seq_lens.dtype))


@define_op(
    _create_num_accept_tokens_filter_reference,
    mutates=("seq_lens", "num_accept_tokens_filter"),
    op_class="latency",
)
def create_num_accept_tokens_filter(
    num_correct_drafts: Tensor,
    unfinished_index: Tensor,
    seq_lens: Tensor,
    num_accept_tokens_filter: Tensor | None = None,
) -> Tensor:
    """Spec v1 accept: committed token counts of the unfinished requests, and advance ``seq_lens``.

    ``num_accept_tokens_filter = 0`` except ``[unfinished_index] = ncd + 1``; ``seq_lens += ncd + 1``
    for every request (finished ones included). The filter then drives
    :func:`filter_finished_cache_loc`.

    Args:
        num_correct_drafts: ``[bs]`` int32/int64, >= 0.
        unfinished_index: ``[k]`` int32/int64 rows in ``[0, bs)``.
        seq_lens: ``[bs]`` int32/int64, mutated (keeps its dtype).
        num_accept_tokens_filter: optional ``[bs]`` int32.

    Returns:
        ``num_accept_tokens_filter``.
    """
    check_index("num_correct_drafts", num_correct_drafts)
    bs = num_correct_drafts.shape[0]
    check_index("unfinished_index", unfinished_index)
    check_index("seq_lens", seq_lens, shape=(bs,))
    device = common_device(
        num_correct_drafts=num_correct_drafts,
        unfinished_index=unfinished_index,
        seq_lens=seq_lens,
        num_accept_tokens_filter=num_accept_tokens_filter,
    )
    num_accept_tokens_filter = _optional_output(
        "num_accept_tokens_filter", num_accept_tokens_filter, (bs,), device, torch.int32
    )
    if value_checks_enabled(device):
        check_non_negative("num_correct_drafts", num_correct_drafts)
        check_range("unfinished_index", unfinished_index, 0, bs)
        check_sum_fits(
            "seq_lens",
            seq_lens,
            seq_lens.dtype,
            plus=num_correct_drafts,
            constant=1,
            expression="seq_lens + num_correct_drafts + 1",
        )
        check_sum_fits(
            "num_correct_drafts",
            num_correct_drafts,
            torch.int32,
            constant=1,
            expression="num_correct_drafts + 1 (num_accept_tokens_filter)",
        )
    if bs == 0:
        return num_accept_tokens_filter
    create_num_accept_tokens_filter.dispatch(
        device, num_correct_drafts, unfinished_index, seq_lens, num_accept_tokens_filter
    )
    return num_accept_tokens_filter


def _filter_finished_cache_loc_reference(
    out_cache_loc: Tensor, tgt_cache_loc: Tensor, num_correct_drafts: Tensor, num_accept_tokens_filter: Tensor
) -> None:
    committed = num_correct_drafts.long() + 1
    source_start = torch.cumsum(committed, 0) - committed

    def read(run: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        values, inside = _take(tgt_cache_loc, source_start[run] + within)
        return values, inside & (within < committed[run])  # never read into the next request's run

    _ragged_fill_(out_cache_loc, num_accept_tokens_filter, read, max_total=tgt_cache_loc.shape[0])


@define_op(
    _filter_finished_cache_loc_reference,
    mutates=("out_cache_loc",),
    op_class="latency",
)
def filter_finished_cache_loc(
    out_cache_loc: Tensor, tgt_cache_loc: Tensor, num_correct_drafts: Tensor, num_accept_tokens_filter: Tensor
) -> Tensor:
    """Spec v1 accept: drop the finished requests' slots from the committed slot list.

    Request b's run of ``ncd[b] + 1`` slots in ``tgt_cache_loc`` (at the exclusive cumsum of
    ``ncd + 1``) is copied, first ``filter[b]`` entries, to ``out_cache_loc`` at the exclusive cumsum
    of the filter. Entries past ``sum(filter)`` are untouched.

    Args:
        out_cache_loc: ``[>= sum(filter)]`` int64, written.
        tgt_cache_loc: ``[sum(ncd + 1)]`` int32/int64 (a longer tensor's tail is ignored).
        num_correct_drafts: ``[bs]`` int32/int64, >= 0.
        num_accept_tokens_filter: ``[bs]`` int32/int64 in ``[0, ncd + 1]`` (from
            :func:`create_num_accept_tokens_filter`).

    Returns:
        ``out_cache_loc``.
    """
    check_index("tgt_cache_loc", tgt_cache_loc)
    check_index("num_correct_drafts", num_correct_drafts)
    bs = num_correct_drafts.shape[0]
    check_index("num_accept_tokens_filter", num_accept_tokens_filter, shape=(bs,))
    device = common_device(
        out_cache_loc=out_cache_loc,
        tgt_cache_loc=tgt_cache_loc,
        num_correct_drafts=num_correct_drafts,
        num_accept_tokens_filter=num_accept_tokens_filter,
    )
    check_output("out_cache_loc", out_cache_loc, dtype=torch.int64, device=device, ndim=1)
    if value_checks_enabled(device):
        check_non_negative("num_correct_drafts", num_correct_drafts)
        check_non_negative("num_accept_tokens_filter", num_accept_tokens_filter)
        if bool(
            (num_accept_tokens_filter.long() - 1 > num_correct_drafts.long()).any()
        ):  # no wrap: both >= 0
            raise ValueError("num_accept_tokens_filter: expected values <= num_correct_drafts + 1")
        _check_capacity(
            "tgt_cache_loc", tgt_cache_loc, _total(num_correct_drafts) + bs, "sum(num_correct_drafts + 1)"
        )
        _check_capacity(
            "out_cache_loc", out_cache_loc, _total(num_accept_tokens_filter), "sum(num_accept_tokens_filter)"
        )
    if bs == 0:
        return out_cache_loc
    filter_finished_cache_loc.dispatch(
        device, out_cache_loc, tgt_cache_loc, num_correct_drafts, num_accept_tokens_filter
    )
    return out_cache_loc


# --------------------------------------------------------------------------------------------------
# A8 align_evict_mask_to_page_size


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
    seq_lens: Tensor, evict_mask: Tensor, page_size: int, draft_token_num: int
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
    align_evict_mask_to_page_size.dispatch(device, seq_lens, evict_mask, page_size, draft_token_num)
    return evict_mask


# --------------------------------------------------------------------------------------------------
# A9 rebuild_compact_draft_req_to_token


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
    from_target, target_ok = _take(target_req_to_token, rows, suffix_start.long()[:, None] + column)
    block_column = column - prefix_len
    from_verify, verify_ok = _take(
        verify_out_cache_loc, torch.arange(rows.shape[0], device=rows.device)[:, None], block_column
    )
    values = torch.where(in_prefix, from_target, from_verify.to(torch.int32))
    readable = torch.where(in_prefix, target_ok, verify_ok & (block_column < block))
    _, row_ok = _take(draft_req_to_token, rows, column)
    _scatter_valid_(draft_req_to_token, (rows, column), values, readable & row_ok)


@define_op(
    _rebuild_compact_draft_req_to_token_reference,
    mutates=("draft_req_to_token",),
    op_class="latency",
)
def rebuild_compact_draft_req_to_token(
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
    _check_req_to_token("draft_req_to_token", draft_req_to_token)
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
    rebuild_compact_draft_req_to_token.dispatch(
        device,
        draft_req_to_token,
        target_req_to_token,
        req_pool_indices,
        suffix_start,
        draft_prefix_lens,
        verify_out_cache_loc,
    )
    return draft_req_to_token


# --------------------------------------------------------------------------------------------------
# A10 host sizing of the draft decode kv_indices buffer


def draft_kv_indices_buffer_width(num_seqs: int, topk: int, max_context_len: int) -> int:
    """Columns a ``kv_indices`` row of :func:`generate_draft_decode_kv_indices` needs at most.

    ``num_seqs * topk * max_context_len`` (the topk factor is mandatory: each branch lists the whole
    prefix). ValueError if it reaches 2**31: the int32 ``kv_indptr`` could not address it.
    """
    check_positive_int("num_seqs", num_seqs, minimum=0)
    check_positive_int("topk", topk)
    check_positive_int("max_context_len", max_context_len, minimum=0)
    width = num_seqs * topk * max_context_len
    if width > _INT32_MAX:
        raise ValueError(
            f"max_context_len: num_seqs*topk*max_context_len = {num_seqs}*{topk}*{max_context_len} = {width} "
            f"does not fit int32 kv_indptr (max {_INT32_MAX})"
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
    if used > _INT32_MAX:
        raise ValueError(
            f"seq_lens_sum: seq_lens_sum*topk + num_seqs*topk*num_steps = {used} does not fit int32 kv_indptr "
            f"(max {_INT32_MAX})"
        )
    return used
