"""Family A helpers shared by the stage modules: fixed-shape ragged fills and scatters (no host
sync) and the paged layout of draft slots. The checks the contracts share are in
:mod:`spec_hal.validation`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

INT32_MAX = 2**31 - 1


def take(table: Tensor, *index: Tensor) -> tuple[Tensor, Tensor]:
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


def ragged_layout(lens: Tensor, width: int) -> tuple[Tensor, Tensor, Tensor]:
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


def ragged_fill_(out: Tensor, lens: Tensor, read: _Reader, *, max_total: int | None = None) -> None:
    """Write the concatenation of ragged runs into ``out`` (last dim); other entries keep their value.

    ``read(run, within)`` returns the values of those run positions and the mask of lanes it could
    read (ids in range). ``max_total`` is a shape-derived bound on the total: positions past it are
    not even looked at.
    """
    width = out.shape[-1] if max_total is None else min(out.shape[-1], max_total)
    target = out[..., :width]
    run, within, inside = ragged_layout(lens, width)
    values, readable = read(run, within)
    target.copy_(torch.where(inside & readable, values.to(out.dtype), target))


def scatter_valid_(dest: Tensor, index: tuple[Tensor, ...], values: Tensor, valid: Tensor) -> None:
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


def draft_slot_columns(seq_lens: Tensor, topk: int, num_steps: int, page_size: int) -> Tensor:
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
