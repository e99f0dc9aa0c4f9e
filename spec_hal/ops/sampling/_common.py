"""Family D helpers shared by the draft sampling ops and the topk = 1 post-processing: output
checks, the exponential race, the tempered softmax, the NaN-low argmax."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ..._constants import NAN_LOGIT
from ...validation import (
    FLOAT_DTYPES,
    check_output,
    check_tensor,
    device_kind,
    empty,
    new_outputs,
    value_checks_enabled,
)
from ..rowwise import row_sums
from .keyed import check_keys, check_step, keyed_exponential

#: Exp(1) noise is clamped to this so that a zero draw cannot divide by zero (D2).
FLOAT32_TINY = torch.finfo(torch.float32).tiny


# --------------------------------------------------------------------------------------------------
# Shared helpers


OutputSpec = tuple[str, Sequence[int], torch.dtype]


def outputs(out: object, specs: Sequence[OutputSpec | None], device: torch.device) -> list[Tensor | None]:
    """The outputs of a bare ``out=`` tuple (flattened), checked against ``specs``; allocated when None.

    A None spec is an output the call does not produce (e.g. ``hidden`` without hidden states): its
    ``out`` entry must be None too.
    """
    if out is None:
        wanted = [spec[1:] for spec in specs if spec is not None]
        allocated = iter(new_outputs(wanted, device) if wanted else ())
        return [None if spec is None else next(allocated) for spec in specs]
    if not isinstance(out, (tuple, list)) or len(out) != len(specs):
        raise ValueError(f"out: expected a tuple of {len(specs)} entries shaped like the returns")
    outputs: list[Tensor | None] = []
    for position, (given, spec) in enumerate(zip(out, specs, strict=True)):
        if spec is None:
            if given is not None:
                raise ValueError(f"out[{position}]: expected None, this call has no such output")
            outputs.append(None)
        else:
            name, shape, dtype = spec
            outputs.append(check_output(name, given, dtype=dtype, device=device, shape=shape))
    return outputs


def check_generator(generator: object, device: torch.device) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    if generator.device == device or device_kind(device) == "meta":  # the common case first
        return
    if generator.device.type != device.type:
        raise ValueError(
            f"generator: expected a generator of the tensors' device {device}, got one of {generator.device}"
        )


def exponential_noise(
    shape: Sequence[int], device: torch.device, generator: torch.Generator | None
) -> Tensor:
    """Exp(1) noise of the exponential race, fp32, drawn from ``generator`` (default one when None)."""
    noise = empty(shape, torch.float32, device)
    if generator is None or noise.is_meta:  # meta tensors hold no data: there is nothing to draw
        return noise.exponential_()
    return noise.exponential_(generator=generator)


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


def check_sampling_keys(
    seeds: object, positions: object, step: object, generator: object, batch: int
) -> bool:
    """Whether a sampling call is keyed (``seeds`` given), after checking the keyword arguments that
    choose between keyed draws and a generator's."""
    if seeds is None:
        if positions is not None:
            raise ValueError("seeds: required with positions= (keyed draws need both)")
        if step != 0:
            raise ValueError(f"step: only keyed draws (seeds=, positions=) take a step, got {step}")
        return False
    if generator is not None:
        raise ValueError("generator: expected None with seeds= (keyed draws touch no generator)")
    if positions is None:
        raise ValueError("positions: required with seeds= (a key is (seed, position, step))")
    check_keys(seeds, positions, batch)
    check_step(step)
    return True


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


def check_temperatures(temperatures: object, batch: int) -> Tensor:
    return check_tensor("temperatures", temperatures, dtype=torch.float32, shape=(batch, 1))


def check_positive_temperatures(temperatures: Tensor, device: torch.device) -> None:
    # A zero or NaN temperature would make the whole row NaN (sglang maps greedy requests to 1.0).
    # "not > 0" catches NaN, which every comparison rejects.
    if value_checks_enabled(device) and temperatures.numel():
        bad = ~(temperatures > 0)
        if bool(bad.any()):
            raise ValueError(f"temperatures: expected positive values, found {float(temperatures[bad][0])}")


def check_float_matrix(name: str, value: object) -> Tensor:
    return check_tensor(name, value, dtype=FLOAT_DTYPES, ndim=2)


def check_logits(logits: object) -> Tensor:
    """``[B, V]`` floating logits over a non-empty vocabulary."""
    logits = check_float_matrix("logits", logits)
    if logits.shape[1] == 0:
        raise ValueError("logits: expected a non-empty vocabulary (V >= 1)")
    return logits
