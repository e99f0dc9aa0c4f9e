"""Triton kernels of family D7: ``top_k_renorm_prob`` and ``top_p_renorm_prob`` without a sort.

The kept set is ``{p >= tau}`` with ``tau`` a value of the row (``spec_hal/ops/renorm.py``). One
program per row (programs take several rows beyond ``config.max_grid``). Non-negative float32 values
order like their bit patterns read as int32 (*keys*, 31 bits), so ``tau``'s key is found one digit at
a time, most significant first (a radix select). The condition on a key x (top-k: at least k values of
the row at or above x; top-p: at least ``top_p * total`` of mass at or above x) only weakens as x
grows, and ``tau`` is the largest key of the row where it holds. Each pass over the row tallies the
values whose key starts with the digits found so far by their next digit; the highest digit where the
condition still holds (counting what lies above the tallied values) is ``tau``'s next digit:

* top-k tallies counts with ``tl.histogram``: 8-bit digits, 4 passes;
* top-p tallies mass, in per-lane sums of each digit (a digit costs a compare and an add per value,
  so digits are 4 bits wide): 8 passes, the first also giving the row's total.

After the last digit the tallied bins are single keys, so the kept mass is exact bookkeeping: the
mass above the last bracket plus each kept key's count (top-k) or mass (top-p). A last pass writes
``out = p / sum(kept)`` where ``p >= tau``, 0 elsewhere (``out`` may be ``probs``: every lane is read
before it is written, by the thread that writes it). Rows that keep everything (``k <= 0``,
``k >= V``, ``top_p >= 1``) only sum the row. Passes after the first read the row again (from L2 when
it is still there): the op's bytes are counted once. Negative keys (negative values, which the
contract rejects) match no digit and fall below every ``tau``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from .config import LaunchConfig
from .launch import kernel, next_power_of_2
from .sizing import warps

#: Bits of a key (the sign bit of a non-negative float is 0).
_KEY_BITS = tl.constexpr(31)
#: Digit widths. A pass costs a read of the row plus work per value that grows with the digit's
#: values: ``tl.histogram``'s bit ballots for top-k's counts, a compare and an add per digit value for
#: top-p's mass; both kernels are bound by that work, not by the reads (``spec-hal bench --sweep``).
_COUNT_DIGIT_BITS = 5
_MASS_DIGIT_BITS = 2
#: Blocks of a mass pass loaded per step (more keep more registers live than the kernel has).
_UNROLL = tl.constexpr(4)
_KEY_MIN = tl.constexpr(-(2**31))


@triton.jit
def _load_row_block(row_ptr, stride_v, start, vocab, BLOCK: tl.constexpr):
    """Lanes ``start + [0, BLOCK)`` of a row: (indices, in range, values (0 outside), keys)."""
    offsets = start + tl.arange(0, BLOCK)
    inside = offsets < vocab
    values = tl.load(row_ptr + offsets.to(tl.int64) * stride_v, mask=inside, other=0.0)
    return offsets, inside, values, values.to(tl.int32, bitcast=True)


@triton.jit
def _row_total(row_ptr, stride_v, vocab, BLOCK_V: tl.constexpr):
    mass = tl.zeros([BLOCK_V], tl.float32)
    for start in range(0, vocab, BLOCK_V):
        _, _, values, _ = _load_row_block(row_ptr, stride_v, start, vocab, BLOCK_V)
        mass += values
    return tl.sum(mass, 0)


@triton.jit
def _count_pass(
    row_ptr, stride_v, vocab, prefix, HIGH: tl.constexpr, SHIFT: tl.constexpr, BLOCK_V: tl.constexpr
):  # fmt: skip
    """Over the keys whose bits from ``HIGH`` up equal ``prefix``'s (the bracket): the count of each
    digit (bits ``SHIFT .. HIGH - 1``); and the mass of the keys above the bracket."""
    NUM_DIGITS: tl.constexpr = tl.constexpr(1) << (HIGH - SHIFT)
    head = prefix >> HIGH
    counts = tl.zeros([NUM_DIGITS], tl.int32)
    mass_above = tl.zeros([BLOCK_V], tl.float32)
    for start in range(0, vocab, BLOCK_V):
        _, inside, values, keys = _load_row_block(row_ptr, stride_v, start, vocab, BLOCK_V)
        key_head = keys >> HIGH
        digits = (keys >> SHIFT) & (NUM_DIGITS - 1)
        counts += tl.histogram(digits, NUM_DIGITS, mask=inside & (key_head == head))
        mass_above += tl.where(inside & (key_head > head), values, 0.0)
    return counts, tl.sum(mass_above, 0)


@triton.jit
def _mass_pass(
    row_ptr, stride_v, vocab, prefix, HIGH: tl.constexpr, SHIFT: tl.constexpr, BLOCK_R: tl.constexpr,
    UNROLL: tl.constexpr,
):  # fmt: skip
    """Over the bracket (as in :func:`_count_pass`): the mass of each digit. Each step reads
    ``UNROLL`` blocks of ``BLOCK_R`` lanes, all loads issued before the first is used (the
    ``[BLOCK_R, digits]`` sums keep the block small; one block per step would wait on memory once per
    block)."""
    NUM_DIGITS: tl.constexpr = tl.constexpr(1) << (HIGH - SHIFT)
    head = prefix >> HIGH
    digit_values = tl.arange(0, NUM_DIGITS)
    masses = tl.zeros([BLOCK_R, NUM_DIGITS], tl.float32)
    for start in range(0, vocab, BLOCK_R * UNROLL):
        for part in tl.static_range(UNROLL):
            _, inside, values, keys = _load_row_block(
                row_ptr, stride_v, start + part * BLOCK_R, vocab, BLOCK_R
            )
            digits = (keys >> SHIFT) & (NUM_DIGITS - 1)
            hit = (inside & ((keys >> HIGH) == head))[:, None] & (digits[:, None] == digit_values[None, :])
            masses += tl.where(hit, values[:, None], 0.0)
    return tl.sum(masses, 0)


@triton.jit
def _highest_holding(tallies, above, needed):
    """(the highest digit d where ``above`` + the tallies of digits >= d reach ``needed``, 0 where
    none does (the condition holds at the bracket's lower edge: float32 sums may say otherwise);
    the tallies of the digits above d, summed)."""
    digit_values = tl.arange(0, tallies.shape[0])
    at_or_above = tl.cumsum(tallies, 0, reverse=True)
    chosen = tl.max(tl.where(above + at_or_above >= needed, digit_values, 0), 0)
    return chosen, tl.sum(tl.where(digit_values > chosen, tallies, 0), 0)


@triton.jit
def _top_k_digit(row_ptr, stride_v, vocab, k, prefix, count_above, LEVEL: tl.constexpr, DIGIT: tl.constexpr,
                 BLOCK_V: tl.constexpr):  # fmt: skip
    """One digit of tau's key for 1 <= k < V: (the prefix with it, the count above the new bracket,
    after the last digit the kept mass (else 0))."""
    HIGH: tl.constexpr = _KEY_BITS - LEVEL * DIGIT
    SHIFT: tl.constexpr = (HIGH - DIGIT) * (HIGH > DIGIT)
    counts, mass_above = _count_pass(row_ptr, stride_v, vocab, prefix, HIGH, SHIFT, BLOCK_V)
    chosen, counted = _highest_holding(counts.to(tl.int64), count_above, k)
    prefix = prefix | (chosen.to(tl.int32) << SHIFT)
    kept_mass = tl.zeros((), tl.float32)
    if SHIFT == 0:
        # The digits are whole keys: the kept ones are tau's and those above it, with the bracket's.
        digit_values = tl.arange(0, counts.shape[0])
        keys = (prefix >> HIGH << HIGH) | digit_values
        kept = tl.where(digit_values >= chosen, counts.to(tl.float32), 0.0)
        kept_mass = mass_above + tl.sum(kept * keys.to(tl.float32, bitcast=True), 0)
    return prefix, count_above + counted, kept_mass


@triton.jit
def _top_p_digit(row_ptr, stride_v, vocab, top_p, prefix, mass_above, target, LEVEL: tl.constexpr,
                 DIGIT: tl.constexpr, BLOCK_R: tl.constexpr, UNROLL: tl.constexpr):  # fmt: skip
    """One digit of tau's key for top_p < 1: (the prefix with it, the mass above the new bracket,
    the target mass (from the first digit's pass, which covers the row), after the last digit the
    kept mass (else 0))."""
    HIGH: tl.constexpr = _KEY_BITS - LEVEL * DIGIT
    SHIFT: tl.constexpr = (HIGH - DIGIT) * (HIGH > DIGIT)
    masses = _mass_pass(row_ptr, stride_v, vocab, prefix, HIGH, SHIFT, BLOCK_R, UNROLL)
    if LEVEL == 0:
        target = top_p * tl.sum(masses, 0)
    chosen, summed = _highest_holding(masses, mass_above, target)
    kept_mass = tl.zeros((), tl.float32)
    if SHIFT == 0:
        # The digits are whole keys: the kept mass is what lies above tau's key plus tau's own.
        digit_values = tl.arange(0, masses.shape[0])
        kept_mass = mass_above + summed + tl.sum(tl.where(digit_values == chosen, masses, 0.0), 0)
    return prefix | (chosen.to(tl.int32) << SHIFT), mass_above + summed, target, kept_mass


@triton.jit
def _top_k_threshold(row_ptr, stride_v, vocab, k, DIGIT: tl.constexpr, BLOCK_V: tl.constexpr):
    """(tau's key, sum of the kept values) for 1 <= k < V."""
    prefix = tl.zeros((), tl.int32)
    count_above = tl.zeros((), tl.int64)
    kept_mass = tl.zeros((), tl.float32)
    for level in tl.static_range((_KEY_BITS + DIGIT - 1) // DIGIT):
        prefix, count_above, kept_mass = _top_k_digit(
            row_ptr, stride_v, vocab, k, prefix, count_above, level, DIGIT, BLOCK_V
        )
    return prefix, kept_mass


@triton.jit
def _top_p_threshold(
    row_ptr, stride_v, vocab, top_p, DIGIT: tl.constexpr, BLOCK_R: tl.constexpr, UNROLL: tl.constexpr
):  # fmt: skip
    """(tau's key, sum of the kept values) for top_p < 1."""
    prefix = tl.zeros((), tl.int32)
    mass_above = tl.zeros((), tl.float32)
    target = tl.zeros((), tl.float32)
    kept_mass = tl.zeros((), tl.float32)
    for level in tl.static_range((_KEY_BITS + DIGIT - 1) // DIGIT):
        prefix, mass_above, target, kept_mass = _top_p_digit(
            row_ptr, stride_v, vocab, top_p, prefix, mass_above, target, level, DIGIT, BLOCK_R, UNROLL
        )
    return prefix, kept_mass


@kernel
@triton.jit
def _renorm_kernel(
    probs_ptr, probs_stride_b, probs_stride_v,
    out_ptr, out_stride_b, out_stride_v,
    param_ptr, param_stride, param_value,
    batch, vocab,
    TOP_P: tl.constexpr, PER_ROW: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr,
    COUNT_DIGIT: tl.constexpr, MASS_DIGIT: tl.constexpr,
):  # fmt: skip
    """``param``: the row's k (int) or top_p (float32), from ``param_ptr`` when ``PER_ROW``."""
    for program_row in range(tl.program_id(0), batch, tl.num_programs(0)):
        row = tl.zeros((), tl.int64) + program_row
        row_ptr = probs_ptr + row * probs_stride_b
        if PER_ROW:
            param = tl.load(param_ptr + row * param_stride)
        else:
            param = param_value
        if TOP_P:
            top_p = tl.zeros((), tl.float32) + param
            keep_all = top_p >= 1.0
        else:
            k = tl.zeros((), tl.int64) + param
            keep_all = (k <= 0) | (k >= vocab)
        if keep_all:
            tau_key = tl.zeros((), tl.int32) + _KEY_MIN
            kept_mass = _row_total(row_ptr, probs_stride_v, vocab, BLOCK_V)
        elif TOP_P:
            tau_key, kept_mass = _top_p_threshold(
                row_ptr, probs_stride_v, vocab, top_p, MASS_DIGIT, BLOCK_R, _UNROLL
            )
        else:
            tau_key, kept_mass = _top_k_threshold(row_ptr, probs_stride_v, vocab, k, COUNT_DIGIT, BLOCK_V)
        out_row = out_ptr + row * out_stride_b
        for start in range(0, vocab, BLOCK_V):
            offsets, inside, values, keys = _load_row_block(row_ptr, probs_stride_v, start, vocab, BLOCK_V)
            # IEEE division: the reference's p / sum(kept).
            renormalised = tl.where(keys >= tau_key, tl.div_rn(values, kept_mass), 0.0)
            tl.store(out_row + offsets.to(tl.int64) * out_stride_v, renormalised, mask=inside)


def _launch(
    config: LaunchConfig,
    probs: torch.Tensor,
    param: torch.Tensor | None,
    param_value: int | float,
    out: torch.Tensor,
    top_p: bool,
) -> None:
    batch, vocab = probs.shape
    if batch == 0:
        return
    block_v = min(next_power_of_2(config.row_block_bytes // 4), next_power_of_2(vocab))
    _renorm_kernel[(min(batch, config.max_grid),)](
        probs, *probs.stride(), out, *out.stride(),
        param, 0 if param is None else param.stride(0), param_value,
        batch, vocab,
        TOP_P=top_p, PER_ROW=param is not None, BLOCK_V=block_v,
        BLOCK_R=max(block_v >> _MASS_DIGIT_BITS, 1), COUNT_DIGIT=_COUNT_DIGIT_BITS, MASS_DIGIT=_MASS_DIGIT_BITS,
        num_warps=warps(block_v, 4, config.warp_size, config.row_num_warps),
    )  # fmt: skip


def _top_k_renorm_prob(
    config: LaunchConfig, probs: torch.Tensor, top_k: torch.Tensor | None, top_k_value: int, out: torch.Tensor
) -> None:
    _launch(config, probs, top_k, top_k_value, out, top_p=False)


def _top_p_renorm_prob(
    config: LaunchConfig,
    probs: torch.Tensor,
    top_p: torch.Tensor | None,
    top_p_value: float,
    out: torch.Tensor,
) -> None:
    _launch(config, probs, top_p, top_p_value, out, top_p=True)


#: The family's launchers of this module: op name -> launcher(config, *provider arguments).
LAUNCHERS: dict[str, Callable[..., None]] = {
    "top_k_renorm_prob": _top_k_renorm_prob,
    "top_p_renorm_prob": _top_p_renorm_prob,
}
