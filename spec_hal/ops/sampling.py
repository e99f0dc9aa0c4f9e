"""Family D: draft sampling and tree expansion (spec ops.md §D).

Contracts and portable references live together: the ``_portable`` functions decorated with
``define_op`` are the provider signatures; the public functions validate and dispatch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..opdef import define_op
from ..validation import FLOAT_DTYPES, check_output, check_positive_int, check_tensor, new_output

__all__ = ["fast_topk"]


# --------------------------------------------------------------------------------------------------
# D1 fast_topk


@define_op("fast_topk", mutates=("out_values", "out_indices"), op_class="bandwidth", bytes_moved="numel(values)*elem")
def _fast_topk_portable(values: Tensor, k: int, dim: int, out_values: Tensor, out_indices: Tensor) -> None:
    if k == 1:  # max is one pass; topk sorts
        torch.max(values, dim, keepdim=True, out=(out_values, out_indices))
    else:
        torch.topk(values, k, dim, largest=True, sorted=True, out=(out_values, out_indices))


def fast_topk(
    values: Tensor, k: int, dim: int = -1, out: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor]:
    """The ``k`` largest entries of ``values`` along ``dim``, in descending order.

    Used on draft logits/probabilities to pick each expanded node's children. ``k == 1`` runs a
    single max; otherwise ``torch.topk`` (sorted). Ties are unspecified.

    Args:
        values: ``[..., n]`` floating tensor.
        k: number of entries to keep, ``1 <= k <= n``.
        dim: the dimension to reduce (default last).
        out: optional ``(values[..., k] same dtype, indices[..., k] int64)``.

    Returns:
        ``(top_values, top_indices)`` with ``top_indices`` int64.
    """
    check_tensor("values", values, dtype=FLOAT_DTYPES)
    if values.dim() == 0:
        raise ValueError("values: expected at least a 1-D tensor, got a scalar")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim: expected an int, got {type(dim).__name__}")
    if not -values.dim() <= dim < values.dim():
        raise ValueError(f"dim: expected a dimension in [{-values.dim()}, {values.dim()}), got {dim}")
    dim %= values.dim()
    check_positive_int("k", k)
    if k > values.shape[dim]:
        raise ValueError(f"k: expected k <= values.shape[{dim}] = {values.shape[dim]}, got {k}")
    shape = list(values.shape)
    shape[dim] = k
    if out is None:
        out_values = new_output(shape, values.dtype, values.device)
        out_indices = new_output(shape, torch.int64, values.device)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ValueError("out: expected a tuple (values, indices)")
        out_values = check_output("out[0]", out[0], dtype=values.dtype, device=values.device, shape=shape)
        out_indices = check_output("out[1]", out[1], dtype=torch.int64, device=values.device, shape=shape)
    _fast_topk_portable.dispatch(values.device, values, k, dim, out_values, out_indices)
    return out_values, out_indices
