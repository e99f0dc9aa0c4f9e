"""Row sums, running sums and first matches that give a row the same result alone, in a slice or
anywhere in a batch, on every device: the portable providers' side of D8's batch invariance.

torch chooses how a reduction or a scan splits a row over threads from the tensor's shape and
alignment, so a row can be added in one order alone and in another in a batch (on CUDA a lone
row's scan takes another kernel than a batch's, and a softmax's sum another variant in a slice).
These add in a fixed pairwise order written out as elementwise adds of parts of the row: an
elementwise add of the same two numbers rounds the same on every device, so the result depends on
the row alone. A minimum or maximum is exact in any order: torch's serve.
"""

from __future__ import annotations

import torch
from torch import Tensor


def row_sums(rows: Tensor) -> Tensor:
    """``[B, V]`` -> ``[B, 1]``: each row's sum, added pairwise: the entries past the largest power of
    two within V added onto the first ones, then the halves added until one column is left."""
    width = rows.shape[1]
    if width == 0:
        return rows.new_zeros((rows.shape[0], 1))
    head = 1 << (width.bit_length() - 1)
    if head != width:
        tail = rows[:, head:]
        rows = rows[:, :head].clone()  # a copy: the tail is added onto it in place
        rows[:, : width - head] += tail
    while rows.shape[1] > 1:
        half = rows.shape[1] // 2
        rows = rows[:, :half] + rows[:, half:]
    return rows


def running_row_sums(rows: Tensor) -> Tensor:
    """``[B, V]``: each row's inclusive running sums (Hillis and Steele's scan: at step s every entry
    adds the one 2**s places before it, ceil(log2(V)) elementwise adds over the row). Unlike a
    sequential scan's, consecutive sums may step down by a rounding: search them with
    :func:`first_true`, not by counting."""
    width = rows.shape[1]
    current, spare = rows.clone(), torch.empty_like(rows)
    shift = 1
    while shift < width:
        spare[:, :shift] = current[:, :shift]
        torch.add(current[:, shift:], current[:, :-shift], out=spare[:, shift:])
        current, spare = spare, current
        shift *= 2
    return current


def first_true(mask: Tensor) -> Tensor:
    """Index of the first True along the last dim, or its length where there is none."""
    width = mask.shape[-1]
    positions = torch.arange(width, device=mask.device)
    return torch.where(mask, positions, width).min(-1).values  # min(dim) beats amin on small rows
