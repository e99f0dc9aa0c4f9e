"""Keyed randomness (D8): draws that are a pure function of (seed, position, step, domain, lane).

A request's draws must not depend on the batch around it, on a graph replaying the step, or on the
vendor. A torch generator gives none of that: its stream is consumed by whatever else the batch
holds. Here every draw is computed from its key alone, by Philox4x32-10 (Random123's counter-based
generator, the one cuRAND, torch, JAX and Triton's ``tl.rand`` use):

* counter ``(lane >> 2, position mod 2**32, (position >> 32) | (step << 16), domain)``,
  key ``(seed mod 2**32, (seed >> 32) mod 2**32)``, and the draw is word ``lane mod 4``
  of the block: four consecutive lanes share one evaluation;
* the uniform is ``((w >> 9) * 2 + 1) * 2**-24``: the odd multiples of ``2**-24``, exact in float32,
  in (0, 1), the same bits on every vendor (no library rounding is involved).

``seeds`` are int64 and read as their 64-bit two's complement, so any value is a seed. ``positions``
are the request's absolute sequence positions, in ``[0, 2**48)``. ``step`` (the draft step, or a
layer) is in ``[0, 2**16)``. ``domain`` keeps draws made for different purposes at the same
position apart: :data:`DRAFT_PROPOSAL`, :data:`ACCEPT_COIN`, :data:`FINAL_COIN`.

The portable implementation works on int64 tensors holding 32-bit words and multiplies in 16-bit
limbs, so no product overflows on any device torch runs on.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._constants import LANE_LIMIT
from ...opdef import OpDef, define_op
from ...validation import (
    check_keys,
    check_output,
    check_positions,
    check_positive_int,
    check_step,
    common_device,
    new_output,
)

#: Domains of keyed draws: a draft token proposal (lanes are token ids), the accept coin of a draft
#: token in tree or chain verification (lanes are node or draft indices), the coin of the final
#: (bonus) sample (lane 0).
DRAFT_PROPOSAL = 1
ACCEPT_COIN = 2
FINAL_COIN = 3
DOMAINS = {DRAFT_PROPOSAL: "DRAFT_PROPOSAL", ACCEPT_COIN: "ACCEPT_COIN", FINAL_COIN: "FINAL_COIN"}


PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
_WORD = 0xFFFFFFFF
_HALF = 0xFFFF


def _mulhilo(multiplier: int, x: Tensor) -> tuple[Tensor, Tensor]:
    """(high, low) 32-bit words of ``multiplier * x`` for 32-bit ``x`` held in int64: by 16-bit limbs,
    every partial product under ``2**34``."""
    m_high, m_low = multiplier >> 16, multiplier & _HALF
    x_high, x_low = x >> 16, x & _HALF
    middle = x_high * m_low + x_low * m_high
    low_sum = x_low * m_low + ((middle & _HALF) << 16)
    high = x_high * m_high + (middle >> 16) + (low_sum >> 32)
    return high, low_sum & _WORD


def philox4x32_10(counter: tuple[Tensor, ...], key: tuple[Tensor, Tensor]) -> tuple[Tensor, ...]:
    """Philox4x32-10 of broadcastable int64 tensors holding 32-bit words: the four output words."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_index in range(PHILOX_ROUNDS):
        if round_index:
            k0 = (k0 + PHILOX_W0) & _WORD
            k1 = (k1 + PHILOX_W1) & _WORD
        high0, low0 = _mulhilo(PHILOX_M0, c0)
        high1, low1 = _mulhilo(PHILOX_M1, c2)
        c0, c1, c2, c3 = high1 ^ c1 ^ k0, low1, high0 ^ c3 ^ k1, low0
    return c0, c1, c2, c3


def keyed_bits(seeds: Tensor, positions: Tensor, step: int, domain: int, n: int) -> Tensor:
    """``[B, n]`` int64: the 32-bit Philox words of lanes ``0 .. n-1`` of each row's key."""
    groups = torch.arange((n + 3) // 4, dtype=torch.int64, device=seeds.device)
    seeds, positions = seeds.unsqueeze(1), positions.unsqueeze(1)
    counter = (groups, positions & _WORD, (positions >> 32) | (step << 16), torch.full_like(groups, domain))
    words = philox4x32_10(counter, (seeds & _WORD, (seeds >> 32) & _WORD))
    expanded = [word.expand(seeds.shape[0], groups.shape[0]) for word in words]
    return torch.stack(expanded, dim=2).reshape(seeds.shape[0], -1)[:, :n]


def uniform_from_bits(bits: Tensor) -> Tensor:
    """float32 uniforms in (0, 1) from 32-bit words: ``((w >> 9) * 2 + 1) * 2**-24``, exact."""
    return (((bits >> 9) * 2 + 1).to(torch.float32)) * (2.0**-24)


def keyed_exponential(seeds: Tensor, positions: Tensor, step: int, n: int) -> Tensor:
    """``[B, n]`` float32 Exp(1) noise ``-log(u)`` of the keyed draft-proposal uniforms (the keyed
    exponential race's noise; lane = token id)."""
    return uniform_from_bits(keyed_bits(seeds, positions, step, DRAFT_PROPOSAL, n)).log_().neg_()


# --------------------------------------------------------------------------------------------------
# keyed_uniform


def _keyed_uniform_reference(seeds: Tensor, positions: Tensor, step: int, domain: int, out: Tensor) -> None:
    out.copy_(uniform_from_bits(keyed_bits(seeds, positions, step, domain, out.shape[1])))


@define_op(_keyed_uniform_reference, mutates=("out",), op_class="bandwidth")
def keyed_uniform(
    op: OpDef, seeds: Tensor, positions: Tensor, step: int, domain: int, n: int, out: Tensor | None = None
) -> Tensor:
    """``[B, n]`` float32 uniforms in (0, 1), lane ``j`` of row ``b`` keyed by ``(seeds[b],
    positions[b], step, domain, j)``: the same bits on every provider and vendor, whatever the batch.

    Engines draw the coins of tree and chain verification with it (``ACCEPT_COIN``, lane = the node's
    or draft's index; ``FINAL_COIN``, lane 0), and the draft proposals' noise is the same draws
    (``DRAFT_PROPOSAL``) computed inside ``fast_sample`` and ``sample_draft_proposal``. Bits:
    Philox4x32-10 with counter ``(j >> 2, position mod 2**32, (position >> 32) | (step << 16),
    domain)`` and key ``(seed mod 2**32, seed >> 32 mod 2**32)``, word ``j mod 4``; then
    ``((w >> 9) * 2 + 1) * 2**-24``.

    Args:
        seeds: ``[B]`` int64, any values (read as 64-bit two's complement).
        positions: ``[B]`` int64 in ``[0, 2**48)``: each request's absolute sequence position.
        step: int in ``[0, 2**16)``: the draft step (or layer) the draws belong to.
        domain: ``DRAFT_PROPOSAL``, ``ACCEPT_COIN`` or ``FINAL_COIN``.
        n: lanes per row, ``0 <= n < 2**34``.
        out: optional ``[B, n]`` float32.

    Returns:
        ``out``.
    """
    batch = check_keys(seeds, positions)
    check_step(step)
    if isinstance(domain, bool) or not isinstance(domain, int):
        raise TypeError(f"domain: expected an int, got {type(domain).__name__}")
    if domain not in DOMAINS:
        raise ValueError(
            "domain: expected one of "
            + ", ".join(f"{name} ({value})" for value, name in DOMAINS.items())
            + f", got {domain}"
        )
    check_positive_int("n", n, minimum=0)
    if n >= LANE_LIMIT:
        raise ValueError(f"n: expected fewer than 2**34 lanes, got {n}")
    device = common_device(seeds=seeds, positions=positions)
    check_positions(positions, device)
    if out is None:
        out = new_output((batch, n), torch.float32, device)
    else:
        check_output("out", out, dtype=torch.float32, device=device, shape=(batch, n))
    if batch and n:
        op.dispatch(device, seeds, positions, step, domain, out)
    return out
