"""Top-k and top-p renormalisation of target probabilities before sampling verification.

sglang's EAGLE verify renormalises each request's target distribution with its top-k and top-p
before ``tree_speculative_sampling_target_only`` (FlashInfer on CUDA, a Triton kernel on HIP, its
own kernel on NPU). Here the kept set is defined by *values*, so every provider agrees whatever its
sort order:

* top-k: ``tau`` is the k-th largest value of the row, counted with multiplicity; the kept set is
  ``{v : p_v >= tau}`` (every value tied with ``tau`` is kept); ``k <= 0`` or ``k >= V`` keeps the row;
* top-p: with the row sorted descending ``q_1 >= ... >= q_V``, ``m`` is the smallest index with
  ``q_1 + ... + q_m >= top_p * (q_1 + ... + q_V)``, ``tau = q_m`` and the kept set is
  ``{v : p_v >= tau}``; ``top_p = 1`` keeps the row;
* the output is ``p_v / sum(kept)`` on the kept set and 0 elsewhere.

The portable references sort each row. Accelerator providers find ``tau`` without a sort, by a few
counting passes over the row, and must land on the same value of the row. Sums are float32: where a
cumulative sum is within float32 rounding of ``top_p * total``, providers that add in another order
may differ on that one boundary value.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..opdef import OpDef, define_op, is_compiling
from ..validation import (
    check_distinct_elements,
    check_index,
    check_output,
    check_tensor,
    common_device,
    new_output,
    value_checks_enabled,
)
from .rowwise import first_true, row_sums, running_row_sums

__all__ = ["top_k_renorm_prob", "top_p_renorm_prob"]

FLOAT32_MAX = torch.finfo(torch.float32).max


# --------------------------------------------------------------------------------------------------
# Shared by both ops


def renormalise_at_least(probs: Tensor, tau: Tensor, out: Tensor) -> None:
    """``out = p / sum(kept)`` on the kept set ``p >= tau`` (``tau`` ``[B, 1]``), 0 elsewhere; the
    kept mass added in a fixed order (:func:`.rowwise.row_sums`), the same for a row at any batch."""
    kept = torch.where(probs >= tau, probs, torch.zeros((), dtype=probs.dtype, device=probs.device))
    out.copy_(kept / row_sums(kept))  # kept is a new tensor: out may be probs


def _bytes_moved(probs: Tensor, **_: object) -> int:
    # One read and one write of the row, whatever the number of passes.
    return 8 * probs.numel()


def _checked_probs(probs: object) -> Tensor:
    probs = check_tensor("probs", probs, dtype=torch.float32, ndim=2)
    if probs.shape[0] and not probs.shape[1]:
        raise ValueError(f"probs: expected a non-empty vocabulary (V >= 1), got shape {tuple(probs.shape)}")
    return probs


def _checked_out(
    out: object, probs: Tensor, device: torch.device, name: str, per_row: Tensor | None
) -> Tensor:
    """The output: allocated when None, else ``probs`` itself or a tensor sharing no byte with it
    whose elements do not share memory; and a per-row parameter sharing no byte with it (providers
    write ``out`` before they have read every row's parameter, and the split search keeps values in
    it)."""
    if out is None:  # fresh memory: nothing overlaps it
        return new_output(probs.shape, torch.float32, device)
    out = check_output("out", out, dtype=torch.float32, device=device, shape=probs.shape)
    # Data pointers: meta tensors hold none, and dynamo cannot trace them.
    if probs.is_meta or is_compiling():
        return out
    if per_row is not None and _bytes_intersect(per_row, out):
        raise ValueError(f"{name}: expected a tensor that does not overlap out")
    # Before the in-place return: probs expanded and passed as out too would have its rows race.
    check_distinct_elements("out", out)
    if out is probs:
        return out
    same = out.data_ptr() == probs.data_ptr() and out.stride() == probs.stride()
    if not same and _bytes_intersect(out, probs):
        raise ValueError("out: expected probs itself or a tensor that does not overlap probs")
    return out


def _bytes_intersect(a: Tensor, b: Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False

    def extent(t: Tensor) -> tuple[int, int]:
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()

    (a_start, a_end), (b_start, b_end) = extent(a), extent(b)
    return a_start < b_end and b_start < a_end


def _check_probs_values(probs: Tensor) -> None:
    """Finite, non-negative, no row summing to 0 (the renormalisation would divide by 0) and none
    whose float32 sum overflows (every provider would divide by inf and write zeros)."""
    if probs.numel() == 0:
        return
    smallest, largest = (float(v) for v in torch.aminmax(probs))
    if not (smallest >= 0 and largest < math.inf):  # NaN fails both comparisons
        bad = probs[~((probs >= 0) & (probs < math.inf))][0].item()
        raise ValueError(f"probs: expected finite, non-negative probabilities, found {bad}")
    zero_rows = (probs.amax(dim=1) == 0).nonzero()
    if zero_rows.numel():
        raise ValueError(f"probs: row {int(zero_rows[0, 0])} sums to 0 (nothing to renormalise)")
    if largest * probs.shape[1] >= FLOAT32_MAX / 2:  # only then can a row's sum overflow (with rounding)
        overflowing = probs.sum(dim=1).isinf().nonzero()
        if overflowing.numel():
            raise ValueError(
                f"probs: row {int(overflowing[0, 0])} sums past float32's largest value "
                "(scale the row down to renormalise it)"
            )


def _dispatch(
    op: OpDef,
    probs: Tensor,
    name: str,
    per_row: Tensor | None,
    value: int | float,
    out: Tensor | None,
    check_per_row: Callable[[Tensor], None] | None = None,
) -> Tensor:
    """The common tail of both contracts: one device, the output, the value checks, the provider."""
    device = common_device(probs=probs, **{name: per_row})
    out = _checked_out(out, probs, device, name, per_row)
    if value_checks_enabled(device):
        _check_probs_values(probs)
        if check_per_row is not None and per_row is not None and per_row.numel():
            check_per_row(per_row)
    if probs.shape[0]:
        op.dispatch(device, probs, per_row, value, out)
    return out


# --------------------------------------------------------------------------------------------------
# top_k_renorm_prob


def renormalise_top_k(
    probs: Tensor,
    top_k: Tensor | None,
    top_k_value: int,
    out: Tensor,
    largest: Callable[[Tensor, Tensor], Tensor],
) -> None:
    """The top-k renormalisation with each row's threshold read from ``largest(probs, ks)``: the
    row's largest values in descending order (ties counted), at least ``max(ks)`` of them (``ks`` the
    per-row k, from 1 to V - 1; rows keeping everything ask for 1)."""
    batch, vocab = probs.shape
    if top_k is None:
        ks = torch.full((batch,), top_k_value, dtype=torch.int64, device=probs.device)
    else:
        ks = top_k.to(torch.int64)
    keep_all = (ks <= 0) | (ks >= vocab)
    kept_ks = ks.masked_fill(keep_all, 1)
    tau = largest(probs, kept_ks).gather(1, (kept_ks - 1).unsqueeze(1))  # the k-th largest
    renormalise_at_least(probs, tau.masked_fill(keep_all.unsqueeze(1), -math.inf), out)


def _top_k_renorm_prob_reference(probs: Tensor, top_k: Tensor | None, top_k_value: int, out: Tensor) -> None:
    renormalise_top_k(
        probs, top_k, top_k_value, out, lambda rows, ks: torch.sort(rows, dim=1, descending=True).values
    )


@define_op(_top_k_renorm_prob_reference, mutates=("out",), op_class="bandwidth", bytes_moved=_bytes_moved)
def top_k_renorm_prob(op: OpDef, probs: Tensor, top_k: Tensor | int, out: Tensor | None = None) -> Tensor:
    """Keep each row's top-k probabilities (ties at the k-th value kept) and renormalise them.

    sglang's EAGLE verify calls it on the target probabilities before
    ``tree_speculative_sampling_target_only`` (then ``top_p_renorm_prob``), with each request's
    top-k. The kept set is defined by values: ``tau`` is the k-th largest value of the row counted
    with multiplicity, and every ``p_v >= tau`` is kept, so a row may keep more than ``k`` entries
    when values tie at ``tau``. ``k <= 0`` or ``k >= V`` keeps the whole row (and still
    renormalises it). Output: ``p_v / sum(kept)`` on the kept set, 0 elsewhere.

    Args:
        probs: ``[B, V]`` float32, finite and non-negative, no row summing to 0 or past float32's
            largest value (rows need not sum to 1).
        top_k: ``[B]`` int32/int64 tensor (one k per row) or an int for every row; a tensor must
            not overlap ``out``.
        out: optional ``[B, V]`` float32 output; may be ``probs`` itself (in place), otherwise it
            must not overlap ``probs``.

    Returns:
        ``out``.

    Raises:
        TypeError: ``probs`` or ``out`` not float32, a ``top_k`` tensor not int32/int64, a
            ``top_k`` that is neither a tensor nor an int.
        ValueError: shapes or devices that do not match, ``V == 0`` with ``B > 0``, an ``out``
            that partly overlaps ``probs`` or whose elements share memory, a ``top_k`` tensor that
            overlaps ``out``; on CPU tensors (accelerators: ``SPEC_HAL_DEBUG=1``) negative, NaN or
            infinite probabilities, rows summing to 0 and rows whose float32 sum overflows.
    """
    probs = _checked_probs(probs)
    batch, vocab = probs.shape
    top_k_tensor, top_k_value = None, 0
    if isinstance(top_k, Tensor):
        top_k_tensor = check_index("top_k", top_k, shape=(batch,))
    elif isinstance(top_k, int) and not isinstance(top_k, bool):
        top_k_value = min(max(top_k, 0), vocab)  # same kept set: <= 0 and >= V both keep the row
    else:
        raise TypeError(f"top_k: expected a [B] int32/int64 tensor or an int, got {type(top_k).__name__}")
    return _dispatch(op, probs, "top_k", top_k_tensor, top_k_value, out)


# --------------------------------------------------------------------------------------------------
# top_p_renorm_prob


def _top_p_renorm_prob_reference(
    probs: Tensor, top_p: Tensor | None, top_p_value: float, out: Tensor
) -> None:
    batch, vocab = probs.shape
    if top_p is None:
        ps = torch.full((batch,), top_p_value, dtype=torch.float32, device=probs.device)
    else:
        ps = top_p
    descending = torch.sort(probs, dim=1, descending=True).values
    cumulative = running_row_sums(descending)  # the same bits for a row at any batch
    target = ps.unsqueeze(1) * cumulative[:, -1:]
    # m - 1: the first prefix sum that reaches the target (none may, through rounding, where top_p is
    # near 1: then the last).
    before = first_true(cumulative >= target).clamp_(max=vocab - 1).unsqueeze(1)
    tau = descending.gather(1, before)
    # top_p = 1 keeps the row even where float32 prefix sums reach the total early.
    renormalise_at_least(probs, tau.masked_fill((ps >= 1).unsqueeze(1), -math.inf), out)


@define_op(_top_p_renorm_prob_reference, mutates=("out",), op_class="bandwidth", bytes_moved=_bytes_moved)
def top_p_renorm_prob(op: OpDef, probs: Tensor, top_p: Tensor | float, out: Tensor | None = None) -> Tensor:
    """Keep the smallest head of each row holding ``top_p`` of its mass (nucleus) and renormalise.

    sglang's EAGLE verify calls it on the target probabilities (after ``top_k_renorm_prob``) before
    ``tree_speculative_sampling_target_only``, with each request's top-p. With the row sorted
    descending ``q_1 >= ... >= q_V``, ``m`` is the smallest index with
    ``q_1 + ... + q_m >= top_p * (q_1 + ... + q_V)`` and ``tau = q_m``; every ``p_v >= tau`` is kept
    (values tied with ``tau`` included). ``top_p = 1`` keeps the whole row. Output:
    ``p_v / sum(kept)`` on the kept set, 0 elsewhere. Sums are float32: a boundary value whose
    inclusion changes a prefix sum by less than float32 rounding may be decided differently by
    providers that add in another order.

    Args:
        probs: ``[B, V]`` float32, finite and non-negative, no row summing to 0 or past float32's
            largest value (rows need not sum to 1).
        top_p: ``[B]`` float32 tensor (one per row) or a float for every row, each in ``(0, 1]``; a
            tensor must not overlap ``out``.
        out: optional ``[B, V]`` float32 output; may be ``probs`` itself (in place), otherwise it
            must not overlap ``probs``.

    Returns:
        ``out``.

    Raises:
        TypeError: ``probs``, ``out`` or a ``top_p`` tensor not float32, a ``top_p`` that is
            neither a tensor nor a number.
        ValueError: a ``top_p`` number outside ``(0, 1]``; shapes or devices that do not match,
            ``V == 0`` with ``B > 0``, an ``out`` that partly overlaps ``probs`` or whose elements
            share memory, a ``top_p`` tensor that overlaps ``out``; on CPU tensors (accelerators:
            ``SPEC_HAL_DEBUG=1``) ``top_p`` tensor values outside ``(0, 1]``, negative, NaN or
            infinite probabilities, rows summing to 0 and rows whose float32 sum overflows.
    """
    probs = _checked_probs(probs)
    batch = probs.shape[0]
    top_p_tensor, top_p_value = None, 1.0
    if isinstance(top_p, Tensor):
        top_p_tensor = check_tensor("top_p", top_p, dtype=torch.float32, shape=(batch,))
    elif isinstance(top_p, (int, float)) and not isinstance(top_p, bool):
        if not 0 < top_p <= 1:  # NaN fails too
            raise ValueError(f"top_p: expected a value in (0, 1], got {top_p}")
        top_p_value = float(top_p)
    else:
        raise TypeError(f"top_p: expected a [B] float32 tensor or a float, got {type(top_p).__name__}")
    return _dispatch(op, probs, "top_p", top_p_tensor, top_p_value, out, _check_top_p_values)


def _check_top_p_values(top_p: Tensor) -> None:
    outside = ~((top_p > 0) & (top_p <= 1))  # NaN included
    if bool(outside.any()):
        raise ValueError(f"top_p: expected values in (0, 1], found {top_p[outside][0].item()}")
