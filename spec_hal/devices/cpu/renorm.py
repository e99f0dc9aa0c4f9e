"""CPU provider of ``top_k_renorm_prob``: the k-th largest value of each row from a top-k.

The portable reference sorts every row whole (V log V). On the CPU the host holds the data, so the
largest k of the batch is read directly and each row's threshold taken from ``torch.topk`` with
that k (V log k): the same value of the row, ties counted, whatever the order of equal values.
``top_p_renorm_prob`` keeps its portable reference on the CPU: a top-k of growing width until each
row's prefix reaches its target was slower than the sort on the bench's target distributions
(their top-p prefixes reach deep into the tail).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ... import ops
from ...ops.renorm import renormalise_top_k

_PROVIDER = "cpu"


def top_k_renorm_prob(probs: Tensor, top_k: Tensor | None, top_k_value: int, out: Tensor) -> None:
    # max(ks) is a host read: the data is on the host.
    renormalise_top_k(
        probs, top_k, top_k_value, out, lambda rows, ks: torch.topk(rows, int(ks.max()), dim=1).values
    )


def register() -> None:
    ops.top_k_renorm_prob.register_impl(
        "cpu",
        _PROVIDER,
        top_k_renorm_prob,
        intended="a top-k of the batch's largest k instead of a sort of every row",
    )
