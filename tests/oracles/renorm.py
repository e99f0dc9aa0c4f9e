"""Loop oracles for family D7 (top-k / top-p renormalisation), written from the spec, one row at a time.

Each takes CPU tensors and returns a new CPU tensor. Sums are exact (``math.fsum``, and top-p's prefix
sums as whole multiples of float32's smallest step, Python ints); the top-p target ``top_p * total`` is
rounded to float32 as the contract computes it (an IEEE float32 product: exact in double, then rounded
once). The conformance data are multiples of a power of two with small totals, where these exact sums
are what any float32 adder gets.
"""

from __future__ import annotations

import math
import struct

import torch


def f32(x: float) -> float:
    """``x`` rounded to float32."""
    if math.isnan(x) or math.isinf(x):
        return x
    return struct.unpack("f", struct.pack("f", x))[0]


#: float32's smallest step is 2**-149: every float32 value is a whole number of steps.
_STEPS_PER_UNIT = 2.0**149


def _in_steps(value: float) -> int:
    """A float32 value as its exact number of steps (a power-of-two scaling: no rounding)."""
    return int(value * _STEPS_PER_UNIT)


def _per_row(parameter: torch.Tensor | int | float, batch: int) -> list:
    if isinstance(parameter, torch.Tensor):
        return parameter.tolist()
    return [parameter] * batch


def _renormalised(row: list[float], tau: float) -> list[float]:
    total = math.fsum(v for v in row if v >= tau)
    return [f32(v / total) if v >= tau else 0.0 for v in row]


def top_k_renorm_prob(probs: torch.Tensor, top_k: torch.Tensor | int) -> torch.Tensor:
    rows = probs.tolist()
    out = []
    for row, k in zip(rows, _per_row(top_k, len(rows)), strict=True):
        if k <= 0 or k >= len(row):
            tau = -math.inf
        else:
            tau = sorted(row, reverse=True)[k - 1]  # the k-th largest, ties counted
        out.append(_renormalised(row, tau))
    return torch.tensor(out, dtype=torch.float32).reshape(probs.shape)


def top_p_renorm_prob(probs: torch.Tensor, top_p: torch.Tensor | float) -> torch.Tensor:
    rows = probs.tolist()
    out = []
    for row, p in zip(rows, _per_row(top_p, len(rows)), strict=True):
        p = f32(p)
        if p >= 1:
            out.append(_renormalised(row, -math.inf))
            continue
        ordered = sorted(row, reverse=True)
        target = _in_steps(f32(p * math.fsum(ordered)))
        prefix, tau = 0, ordered[-1]
        for value in ordered:
            prefix += _in_steps(value)  # exact
            if prefix >= target:
                tau = value
                break
        out.append(_renormalised(row, tau))
    return torch.tensor(out, dtype=torch.float32).reshape(probs.shape)
