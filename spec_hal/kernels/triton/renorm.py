"""Triton kernels of family D7: ``top_k_renorm_prob`` and ``top_p_renorm_prob`` without a sort.

The kept set is ``{p >= tau}`` with ``tau`` a value of the row (``spec_hal/ops/renorm.py``). One
program per row (programs take several rows beyond ``config.max_grid``) finds ``tau`` exactly in a
few passes over the row, then writes it once. Non-negative float32 values order like their bit
patterns read as int32 (*keys*), so the search narrows a range of keys. The condition on a key x
(top-k: at least k values of the row at or above x; top-p: at least ``top_p * total`` of mass at or
above x) only weakens as x grows, and ``tau`` is the largest key of the row where it holds:

1. stats: the row's total and each lane's largest value. The largest of them is the bracket's upper
   edge, key 0 its lower one; the lanes' maxima (in ``GROUPS`` groups) give a higher lower edge
   where the condition surely holds: the k-th largest group maximum (k values at least that large),
   or the first group maximum whose prefix sum reaches the target (that much mass at least that
   large). For the usual small kept sets only a few values lie above it;
2. gathering: a pass sums (and counts) the values above the bracket ``[lo, hi]`` and copies the
   values inside it, if at most ``CANDIDATES``, to a scratch row. Sorted in registers they give
   ``tau``: top-k the ``(k - count above)``-th largest, top-p the first whose prefix sum plus the
   mass above reaches the target;
3. narrowing, only when the bracket holds more values than that (or the float32 sums of the gathering
   say the condition fails at lo after all: then from key 0): a pass counts (top-p: and
   sums) the row's values in ``NUM_BUCKETS`` equal sub-ranges of the bracket, which becomes the
   highest sub-range whose lower edge still satisfies the condition, until it holds at most
   ``CANDIDATES`` values or one key; then gathering again (a bracket of one key is ``tau`` itself);
4. writing: ``out = p / sum(kept)`` where ``p >= tau``, 0 elsewhere (``out`` may be ``probs``:
   every lane is read before it is written, by the thread that writes it).

Rows that keep everything (``k <= 0``, ``k >= V``, ``top_p >= 1``) skip passes 2 and 3. Passes
after the first read the row again (from L2 when it is still there): the op's bytes are counted once.
Per-lane accumulators (sums, counts per sub-range) are reduced once per pass, not once per tile.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from .config import LaunchConfig
from .launch import kernel
from .sizing import vocab_block, vocab_warps

#: Sub-ranges per narrowing pass: each pass divides the bracket by this many (4 bits of the key).
_NUM_BUCKETS = 16
#: Blocks of a narrowing pass loaded per step (more keep more registers live than the kernel has).
_UNROLL = tl.constexpr(4)
#: Most values a bracket may hold to be gathered and sorted in registers (a power of two).
_MAX_CANDIDATES = 1024
#: Most groups of lane maxima sorted for the first bracket (a power of two).
_MAX_GROUPS = 256
_KEY_MIN = tl.constexpr(-(2**31))
_KEY_MAX = tl.constexpr(2**31 - 1)


@triton.jit
def _load_row_block(row_ptr, stride_v, start, vocab, BLOCK: tl.constexpr):
    """Lanes ``start + [0, BLOCK)`` of a row: (indices, in range, values (0 outside), keys)."""
    offsets = start + tl.arange(0, BLOCK)
    inside = offsets < vocab
    values = tl.load(row_ptr + offsets.to(tl.int64) * stride_v, mask=inside, other=0.0)
    return offsets, inside, values, values.to(tl.int32, bitcast=True)


@triton.jit
def _row_stats(row_ptr, stride_v, vocab, BLOCK_V: tl.constexpr):
    """(total, each lane's largest value (-inf for a lane past V))."""
    mass = tl.zeros([BLOCK_V], tl.float32)
    lane_max = tl.full([BLOCK_V], float("-inf"), tl.float32)
    for start in range(0, vocab, BLOCK_V):
        _, inside, values, _ = _load_row_block(row_ptr, stride_v, start, vocab, BLOCK_V)
        mass += values
        lane_max = tl.maximum(lane_max, tl.where(inside, values, float("-inf")))
    return tl.sum(mass, 0), lane_max


@triton.jit
def _first_edge(lane_max, k, target, TOP_P: tl.constexpr, BLOCK_V: tl.constexpr, GROUPS: tl.constexpr):
    """A key where the condition surely holds, from the lanes' maxima (each a distinct value of the
    row): the k-th largest group maximum, or the first group maximum whose prefix sum reaches the
    target; the smallest key there is (``_KEY_MIN``) when neither exists."""
    groups = tl.max(tl.reshape(lane_max, [GROUPS, BLOCK_V // GROUPS]), 1)
    ranked = tl.sort(groups, descending=True)  # groups past V (-inf) last
    slot = tl.arange(0, GROUPS)
    if TOP_P:
        prefix = tl.cumsum(tl.maximum(ranked, 0.0), 0)
        position = tl.min(tl.where(prefix >= target, slot, GROUPS), 0)
    else:
        position = tl.minimum(k - 1, GROUPS).to(tl.int32)
    edge = tl.sum(tl.where(slot == position, ranked, 0.0), 0)
    found = (position < GROUPS) & (edge > float("-inf"))
    return tl.where(found, edge.to(tl.int32, bitcast=True), _KEY_MIN)


@triton.jit
def _bucket_pass(
    row_ptr, stride_v, vocab, lo, hi, shift, TOP_P: tl.constexpr, BLOCK_R: tl.constexpr,
    NUM_BUCKETS: tl.constexpr, UNROLL: tl.constexpr,
):  # fmt: skip
    """Per sub-range ``lo + [b, b + 1) << shift`` of the bracket ``[lo, hi]``: the count of the row's
    values there and (top-p) their sum. Keys are compared as int32: inside the bracket
    ``key - lo`` fits (``0 <= lo <= key <= hi < 2**31``). Each step reads ``UNROLL`` blocks of
    ``BLOCK_R`` lanes, all loads issued before the first is used (the ``[BLOCK_R, NUM_BUCKETS]``
    accumulators keep the block small; one block per step would wait on memory once per block)."""
    buckets = tl.arange(0, NUM_BUCKETS)
    counts = tl.zeros([BLOCK_R, NUM_BUCKETS], tl.int32)
    masses = tl.zeros([BLOCK_R, NUM_BUCKETS], tl.float32)
    lo32 = lo.to(tl.int32)
    hi32 = hi.to(tl.int32)
    shift32 = shift.to(tl.int32)
    for start in range(0, vocab, BLOCK_R * UNROLL):
        for part in tl.static_range(UNROLL):
            _, inside, values, keys = _load_row_block(
                row_ptr, stride_v, start + part * BLOCK_R, vocab, BLOCK_R
            )
            in_bracket = inside & (keys >= lo32) & (keys <= hi32)
            # Keys outside the bracket are not subtracted from: key - lo could overflow there.
            bucket = (tl.where(in_bracket, keys, lo32) - lo32) >> shift32
            hit = in_bracket[:, None] & (bucket[:, None] == buckets[None, :])
            counts += hit.to(tl.int32)
            if TOP_P:
                masses += tl.where(hit, values[:, None], 0.0)
    return tl.sum(counts, 0), tl.sum(masses, 0)


@triton.jit
def _narrow(
    row_ptr, stride_v, vocab, k, target, lo, hi, inside_count, TOP_P: tl.constexpr, BLOCK_R: tl.constexpr,
    NUM_BUCKETS: tl.constexpr, UNROLL: tl.constexpr, CANDIDATES: tl.constexpr,
):  # fmt: skip
    """Pass 3: the bracket ``[lo, hi]`` (int64 keys; none of the row above hi) narrowed until it
    holds at most ``CANDIDATES`` values or one key."""
    buckets = tl.arange(0, NUM_BUCKETS)
    # [j, i]: sub-range i lies at or above sub-range j
    at_or_above = buckets[None, :] >= buckets[:, None]
    above_count = tl.zeros((), tl.int32)
    above_mass = tl.zeros((), tl.float32)
    while (inside_count > CANDIDATES) & (lo < hi):
        shift = tl.zeros((), tl.int64)
        while ((hi - lo) >> shift) >= NUM_BUCKETS:
            shift += 1
        counts, masses = _bucket_pass(
            row_ptr, stride_v, vocab, lo, hi, shift, TOP_P, BLOCK_R, NUM_BUCKETS, UNROLL
        )
        if TOP_P:
            holds = above_mass + tl.sum(tl.where(at_or_above, masses[None, :], 0.0), 1) >= target
        else:
            holds = above_count + tl.sum(tl.where(at_or_above, counts[None, :], 0), 1) >= k
        # The condition holds at lo (sub-range 0); max() keeps that if float32 sums say otherwise.
        chosen = tl.max(tl.where(holds, buckets, 0), 0)
        above = buckets > chosen
        above_count += tl.sum(tl.where(above, counts, 0), 0)
        above_mass += tl.sum(tl.where(above, masses, 0.0), 0)
        inside_count = tl.sum(tl.where(buckets == chosen, counts, 0), 0)
        lo = lo + (chosen.to(tl.int64) << shift)
        hi = tl.minimum(hi, lo + (tl.full((), 1, tl.int64) << shift) - 1)
    return lo, hi


@triton.jit
def _gather(row_ptr, stride_v, vocab, lo, hi, scratch_ptr, BLOCK_V: tl.constexpr, CANDIDATES: tl.constexpr):
    """Pass 2: (count above the bracket ``[lo, hi]``, mass above, count inside, mass inside); the
    values inside go to ``scratch`` in row order (the first ``CANDIDATES`` of them)."""
    lo32 = lo.to(tl.int32)
    hi32 = hi.to(tl.int32)
    above_count = tl.zeros([BLOCK_V], tl.int32)
    above_mass = tl.zeros([BLOCK_V], tl.float32)
    inside_mass = tl.zeros([BLOCK_V], tl.float32)
    written = tl.zeros((), tl.int32)
    for start in range(0, vocab, BLOCK_V):
        _, inside, values, keys = _load_row_block(row_ptr, stride_v, start, vocab, BLOCK_V)
        is_above = inside & (keys > hi32)
        in_bracket = inside & (keys >= lo32) & (keys <= hi32)
        above_count += is_above.to(tl.int32)
        above_mass += tl.where(is_above, values, 0.0)
        inside_mass += tl.where(in_bracket, values, 0.0)
        position = written + tl.cumsum(in_bracket.to(tl.int32), 0) - 1
        tl.store(scratch_ptr + position, values, mask=in_bracket & (position < CANDIDATES))
        written += tl.sum(in_bracket.to(tl.int32), 0)
    return tl.sum(above_count, 0), tl.sum(above_mass, 0), written, tl.sum(inside_mass, 0)


@triton.jit
def _pick(
    k, target, lo, count_above, mass_above, inside_count, inside_mass, scratch_ptr, TOP_P: tl.constexpr,
    CANDIDATES: tl.constexpr,
):  # fmt: skip
    """(tau's key, sum of the kept values) from the gathered bracket starting at key ``lo``."""
    tau_key = lo.to(tl.int32)  # a bracket of one key holds tau and nothing else
    kept_mass = mass_above + inside_mass
    # The candidates were stored by other threads.
    tl.debug_barrier()
    if inside_count <= CANDIDATES:
        slot = tl.arange(0, CANDIDATES)
        valid = slot < inside_count
        # -1 ranks below every value of the row: the candidates come first once sorted.
        ranked = tl.sort(tl.load(scratch_ptr + slot, mask=valid, other=-1.0), descending=True)
        if TOP_P:
            prefix = mass_above + tl.cumsum(tl.where(valid, ranked, 0.0), 0)
            position = tl.sum((valid & (prefix < target)).to(tl.int32), 0)
        else:
            position = (k - count_above - 1).to(tl.int32)
        position = tl.minimum(tl.maximum(position, 0), inside_count - 1)
        tau = tl.sum(tl.where(slot == position, ranked, 0.0), 0)
        tau_key = tau.to(tl.int32, bitcast=True)
        kept_mass = mass_above + tl.sum(tl.where(valid & (ranked >= tau), ranked, 0.0), 0)
    # The next gathering overwrites this scratch row.
    tl.debug_barrier()
    return tau_key, kept_mass


@kernel
@triton.jit
def _renorm_kernel(
    probs_ptr, probs_stride_b, probs_stride_v,
    out_ptr, out_stride_b, out_stride_v,
    param_ptr, param_stride, param_value,
    scratch_ptr, batch, vocab,
    TOP_P: tl.constexpr, PER_ROW: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr,
    NUM_BUCKETS: tl.constexpr, CANDIDATES: tl.constexpr, GROUPS: tl.constexpr,
):  # fmt: skip
    """``param``: the row's k (int) or top_p (float32), from ``param_ptr`` when ``PER_ROW``."""
    program = tl.program_id(0)
    scratch = scratch_ptr + program.to(tl.int64) * CANDIDATES
    for program_row in range(program, batch, tl.num_programs(0)):
        row = tl.zeros((), tl.int64) + program_row
        row_ptr = probs_ptr + row * probs_stride_b
        if PER_ROW:
            param = tl.load(param_ptr + row * param_stride)
        else:
            param = param_value
        total, lane_max = _row_stats(row_ptr, probs_stride_v, vocab, BLOCK_V)
        if TOP_P:
            top_p = tl.zeros((), tl.float32) + param
            k = tl.zeros((), tl.int64)
            target = top_p * total
            keep_all = top_p >= 1.0
        else:
            k = tl.zeros((), tl.int64) + param
            target = total
            keep_all = (k <= 0) | (k >= vocab)
        tau_key = tl.zeros((), tl.int32) + _KEY_MIN
        kept_mass = total
        if not keep_all:
            # The condition holds at key 0 (every valid value is at least 0); negative keys (invalid
            # input) never become tau. 64-bit edges while narrowing: lo plus a sub-range's width may
            # pass 2**31.
            lowest = tl.zeros((), tl.int64)
            hi = tl.maximum(tl.max(lane_max, 0).to(tl.int32, bitcast=True), 0).to(tl.int64)
            lo = tl.minimum(tl.maximum(_first_edge(lane_max, k, target, TOP_P, BLOCK_V, GROUPS), lowest), hi)
            count_above, mass_above, inside_count, inside_mass = _gather(
                row_ptr, probs_stride_v, vocab, lo, hi, scratch, BLOCK_V, CANDIDATES
            )
            if TOP_P:
                holds = mass_above + inside_mass >= target
            else:
                holds = count_above + inside_count >= k
            if (not holds) | ((inside_count > CANDIDATES) & (lo < hi)):
                if not holds:  # float32 sums disagree with the first edge: from the whole row
                    lo = lowest
                    inside_count = tl.zeros((), tl.int32) + vocab
                lo, hi = _narrow(
                    row_ptr, probs_stride_v, vocab, k, target, lo, hi, inside_count, TOP_P, BLOCK_R, NUM_BUCKETS,
                    _UNROLL, CANDIDATES,
                )  # fmt: skip
                count_above, mass_above, inside_count, inside_mass = _gather(
                    row_ptr, probs_stride_v, vocab, lo, hi, scratch, BLOCK_V, CANDIDATES
                )
            tau_key, kept_mass = _pick(
                k, target, lo, count_above, mass_above, inside_count, inside_mass, scratch, TOP_P, CANDIDATES
            )
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
    block_v = vocab_block(config, vocab)
    candidates = min(block_v, _MAX_CANDIDATES)
    grid = min(batch, config.max_grid)
    scratch = torch.empty((grid, candidates), dtype=torch.float32, device=probs.device)
    _renorm_kernel[(grid,)](
        probs, *probs.stride(), out, *out.stride(),
        param, 0 if param is None else param.stride(0), param_value,
        scratch, batch, vocab,
        TOP_P=top_p, PER_ROW=param is not None, BLOCK_V=block_v,
        BLOCK_R=max(block_v // _NUM_BUCKETS, 1), NUM_BUCKETS=_NUM_BUCKETS, CANDIDATES=candidates,
        GROUPS=min(block_v, _MAX_GROUPS), num_warps=vocab_warps(config, block_v),
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
