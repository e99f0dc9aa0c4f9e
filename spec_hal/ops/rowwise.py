"""Row sums and running sums that give a row the same bits alone, in a slice or anywhere in a batch,
on every device: the portable providers' side of D8's batch invariance.

torch chooses how a reduction or a scan splits a row over threads from the tensor's shape and
alignment, so a row can be added in one order alone and in another in a batch (on CUDA a lone
row's scan takes another kernel than a batch's, and a softmax's sum another variant in a slice).
These add in a fixed pairwise order written out as elementwise adds of parts of the row: an
elementwise add of the same two numbers rounds the same on every device, so the result depends on
the row alone.
"""

from __future__ import annotations

import torch
from torch import Tensor


def row_sums(rows: Tensor) -> Tensor:
    """``[B, V]`` -> ``[B, 1]``: each row's sum, added pairwise (the row padded with zeros to a power
    of two, then its halves added until one column is left)."""
    width = rows.shape[1]
    if width == 0:
        return rows.new_zeros((rows.shape[0], 1))
    padded = 1 << (width - 1).bit_length()
    if padded != width:
        rows = torch.nn.functional.pad(rows, (0, padded - width))
    while rows.shape[1] > 1:
        half = rows.shape[1] // 2
        rows = rows[:, :half] + rows[:, half:]
    return rows


def running_row_sums(rows: Tensor) -> Tensor:
    """``[B, V]``: each row's inclusive running sums (Hillis and Steele's scan: at step s every entry
    adds the one 2**s places before it, ceil(log2(V)) elementwise adds in all)."""
    width = rows.shape[1]
    current, spare = rows.clone(), torch.empty_like(rows)
    shift = 1
    while shift < width:
        spare[:, :shift] = current[:, :shift]
        torch.add(current[:, shift:], current[:, :-shift], out=spare[:, shift:])
        current, spare = spare, current
        shift *= 2
    return current
