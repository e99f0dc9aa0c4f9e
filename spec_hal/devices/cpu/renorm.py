"""CPU provider of ``top_k_renorm_prob``: the k-th largest value of each row from a top-k.

The portable reference sorts every row whole (V log V). On the CPU the host holds the data, so the
largest k of the batch is read directly and each row's threshold taken from ``torch.topk`` with
that k (V log k): the same value of the row, ties counted, whatever the order of equal values.
``top_p_renorm_prob`` keeps its portable reference on the CPU: a top-k of growing width until each
row's prefix reaches its target was slower than the sort on the bench's target distributions
(their top-p prefixes reach deep into the tail).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ... import ops
from ...ops.renorm import renormalise_at_least

_PROVIDER = "cpu"


def top_k_renorm_prob(probs: Tensor, top_k: Tensor | None, top_k_value: int, out: Tensor) -> None:
    batch, vocab = probs.shape
    ks = torch.full((batch,), top_k_value, dtype=torch.int64) if top_k is None else top_k.to(torch.int64)
    keep_all = (ks <= 0) | (ks >= vocab)
    kept_ks = ks.masked_fill(keep_all, 1)
    largest = int(kept_ks.max())  # a host read: the data is on the host
    descending = torch.topk(probs, largest, dim=1).values
    tau = descending.gather(1, (kept_ks - 1).unsqueeze(1))  # the k-th largest, ties counted
    renormalise_at_least(probs, tau.masked_fill(keep_all.unsqueeze(1), -math.inf), out)


def register() -> None:
    ops.top_k_renorm_prob.register_impl("cpu", _PROVIDER, top_k_renorm_prob)
