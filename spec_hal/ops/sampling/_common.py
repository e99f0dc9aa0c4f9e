"""Family D helpers shared by the references of the draft sampling ops and the topk = 1
post-processing: the exponential race, the tempered softmax, the NaN-low argmax. The checks their
contracts share are in :mod:`spec_hal.validation`, so a warm call passes no module but its
contract's, validation's and its provider's."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..._constants import NAN_LOGIT
from ..rowwise import row_sums
from .keyed import keyed_exponential

#: Exp(1) noise is clamped to this so that a zero draw cannot divide by zero (D2).
FLOAT32_TINY = torch.finfo(torch.float32).tiny


def exponential_race(probs: Tensor, exp_noise: Tensor, num_samples: int) -> Tensor:
    """``[B, n]`` int64 draws without replacement from each row of ``probs`` (need not sum to 1).

    argmax_i p_i / E_i with E_i ~ Exp(1) picks i with probability p_i / sum(p); equal scores go to
    the lowest id (argmax returns the first maximum, the sort is stable), so an all-zero row gives
    0, 1, ...
    """
    scores = probs.float() / exp_noise.clamp_min(FLOAT32_TINY)
    if num_samples == 1:
        return scores.argmax(dim=-1, keepdim=True)
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :num_samples]


def race_noise(
    probs: Tensor, exp_noise: Tensor | None, seeds: Tensor | None, positions: Tensor | None, step: int
) -> Tensor:
    """The race's Exp(1) noise of a provider call: the drawn ``exp_noise``, or the keyed noise of
    each row's (seed, position, step) when the call is keyed (``exp_noise`` None)."""
    if exp_noise is not None:
        return exp_noise
    assert seeds is not None and positions is not None  # the contract passes one or the other
    return keyed_exponential(seeds, positions, step, probs.shape[1])


def tempered_softmax(logits: Tensor, temperatures: Tensor | None, out_probs: Tensor) -> None:
    """``out_probs = softmax(logits / temperatures)`` over the vocabulary, computed in fp32, each
    row's bits independent of the batch around it (its sum added in a fixed order, not by
    ``torch.softmax``, whose reduction a slice or a lone row can change)."""
    scaled = logits.float() if temperatures is None else logits.float() / temperatures
    shifted = (scaled - scaled.amax(dim=-1, keepdim=True)).exp_()  # a maximum is exact in any order
    torch.div(shifted, row_sums(shifted), out=out_probs)


def argmax_nan_low(logits: Tensor) -> Tensor:
    """D6's argmax ``[..., 1]`` int64: compared in fp32, NaN ranks as -1e30, ties go to the lowest index."""
    # nan_to_num is one pass (where(isnan) is two); infinities must stay infinite.
    values = torch.nan_to_num(logits.float(), nan=NAN_LOGIT, posinf=math.inf, neginf=-math.inf)
    return values.max(dim=-1, keepdim=True).indices  # max reports the first maximum
