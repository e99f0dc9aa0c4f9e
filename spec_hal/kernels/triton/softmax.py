"""Triton kernels of ``renorm_draft_probs`` and ``sample_draft_proposal`` (the references:
``spec_hal/ops/sampling``): the softmax over the vocabulary, and for sampling the race over the q it
writes. Their launches and providers are in ``vocab.py``, beside the other walks over a vocabulary
row.

A pass of running maxima and rescaled sums of ``exp`` (online softmax, per block), then a pass
writing ``exp(x - max) / sum``; ``x = logits / temperature`` is an IEEE division, like the
reference's. Sampling runs the race over the q it writes (greedy rows: over q itself, without
reading their noise), keeping per lane the best key, its id and its q, so ``q_x`` is the written
value of ``q`` at ``x``.

A long row's sum is taken over chunks fixed by its length (``vocab._softmax_chunks``), one chunk's
online softmax at a time, and folded in chunk order (:func:`_fold_chunk_stats`). Where the rows are
few and long enough that each would take ``vocab._SOFTMAX_FEWEST_CHUNKS`` chunks or more (8 for
``renorm_draft_probs``; 2 for ``sample_draft_proposal``, whose race makes one program's walk
slower), those chunks are split over programs: a launch stores each chunk's max and sum, a second
folds them and writes q over its chunk, and for sampling stores its chunk's best race entry, which
``fast_topk``'s merge folds (reading ``q_x`` back from the written q). A program walking a whole row
folds the same chunks in the same order, so a row's q (and its token) has the same bits whether the
batch around it made the launch split or not.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .device_math import (
    FLOAT32_TINY,
    KEY32_MIN,
    chunk_lanes,
    first_best,
    ordered_key,
    race_noise,
    row_key,
    single_best,
)
from .launch import kernel


@triton.jit
def _scaled_logits(logits_row, stride_v, start, vocab, temperature, HAS_TEMPERATURES: tl.constexpr,
                   BLOCK: tl.constexpr):  # fmt: skip
    """(indices, in range, fp32 logits / temperature) of lanes ``start + [0, BLOCK)``; -inf past V."""
    offsets = start + tl.arange(0, BLOCK)
    inside = offsets < vocab
    x = tl.load(logits_row + offsets.to(tl.int64) * stride_v, mask=inside, other=float("-inf")).to(tl.float32)
    if HAS_TEMPERATURES:
        x = tl.div_rn(x, temperature)
    return offsets, inside, x


@triton.jit
def _online_softmax(logits_row, stride_v, begin, end, temperature, HAS_TEMPERATURES: tl.constexpr,
                    BLOCK: tl.constexpr):  # fmt: skip
    """(max, sum of ``exp(x - max)``) over lanes ``[begin, end)`` of a row of ``x = logits /
    temperature``: running maxima and rescaled sums, a block at a time (the max is -inf and the sum
    0 where every x is -inf)."""
    running_max = tl.full((), float("-inf"), tl.float32)
    running_sum = tl.zeros((), tl.float32)
    for start in range(begin, end, BLOCK):
        _, _, x = _scaled_logits(logits_row, stride_v, start, end, temperature, HAS_TEMPERATURES, BLOCK)
        new_max = tl.maximum(running_max, tl.max(x, 0))
        # Exponents relative to 0 while every logit so far is -inf (exp(-inf - -inf) is NaN).
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        running_sum = running_sum * tl.exp(running_max - shift) + tl.sum(tl.exp(x - shift), 0)
        running_max = new_max
    return running_max, running_sum


@triton.jit
def _fold_chunk_stats(maxima, sums, num_chunks, CHUNKS: tl.constexpr):
    """The row's (max, sum of ``exp(x - max)``) from its chunks' (``[CHUNKS]`` vectors, entries past
    ``num_chunks`` -inf and 0): the sums rescaled and added one chunk at a time, in chunk order, so
    that the walk of a whole row and a split row's fold add the same numbers in the same order."""
    row_max = tl.max(maxima, 0)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)
    chunks = tl.arange(0, CHUNKS)
    row_sum = tl.zeros((), tl.float32)
    for chunk_id in range(num_chunks):
        at = chunks == chunk_id  # one entry each: the sums read it exactly
        chunk_max = tl.sum(tl.where(at, maxima, 0.0), 0)
        row_sum += tl.sum(tl.where(at, sums, 0.0), 0) * tl.exp(chunk_max - shift)
    return shift, row_sum


@triton.jit
def _row_softmax_stats(
    logits_row, stride_v, vocab, chunk, num_chunks, temperature, HAS_TEMPERATURES: tl.constexpr,
    CHUNKS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """(shift, sum of ``exp(x - shift)``) of a whole row, computed as a split row's are: each chunk's
    online softmax, then :func:`_fold_chunk_stats`. The chunks are a function of the vocabulary (never
    of the batch), so a row gets the same bits whether its walk is split or not."""
    if CHUNKS == 1:
        row_max, row_sum = _online_softmax(
            logits_row, stride_v, 0, vocab, temperature, HAS_TEMPERATURES, BLOCK
        )
        shift = tl.where(row_max == float("-inf"), 0.0, row_max)
    else:
        chunks = tl.arange(0, CHUNKS)
        maxima = tl.full([CHUNKS], float("-inf"), tl.float32)
        sums = tl.zeros([CHUNKS], tl.float32)
        for chunk_id in range(num_chunks):
            begin, end = chunk_lanes(chunk_id, chunk, vocab)
            chunk_max, chunk_sum = _online_softmax(
                logits_row, stride_v, begin, end, temperature, HAS_TEMPERATURES, BLOCK
            )
            maxima = tl.where(chunks == chunk_id, chunk_max, maxima)
            sums = tl.where(chunks == chunk_id, chunk_sum, sums)
        shift, row_sum = _fold_chunk_stats(maxima, sums, num_chunks, CHUNKS)
    return shift, row_sum


@triton.jit
def _row_temperature(temperatures_ptr, temperatures_stride, row, HAS_TEMPERATURES: tl.constexpr):
    """The row's temperature (1.0 without temperatures)."""
    temperature = 1.0
    if HAS_TEMPERATURES:
        temperature = tl.load(temperatures_ptr + row * temperatures_stride)
    return temperature


@triton.jit
def _write_softmax_range(
    logits_row, logits_stride_v, begin, end, temperature, shift, inverse, q_row, q_stride_v, greedy, noise_ptr,
    noise_stride_b, noise_stride_v, seeds_ptr, positions_ptr, step, row, HAS_TEMPERATURES: tl.constexpr,
    SAMPLE: tl.constexpr, KEYED: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """``q = exp(x - shift) * inverse`` written over lanes ``[begin, end)``; ``SAMPLE``: per lane the
    best race key there (``greedy``: of q itself, without reading row ``row`` of the noise), its
    index and its q. ``KEYED``: the noise is the row's keyed draws, computed here."""
    key = row_key(seeds_ptr, positions_ptr, row, step, KEYED)
    best_key = tl.zeros([BLOCK], tl.int32) + KEY32_MIN
    best_index = tl.zeros([BLOCK], tl.int32) - 1
    best_q = tl.zeros([BLOCK], tl.float32)
    for start in range(begin, end, BLOCK):
        offsets, inside, x = _scaled_logits(
            logits_row, logits_stride_v, start, end, temperature, HAS_TEMPERATURES, BLOCK
        )
        q = tl.exp(x - shift) * inverse
        tl.store(q_row + offsets.to(tl.int64) * q_stride_v, q, mask=inside)
        if SAMPLE:
            noise = race_noise(
                noise_ptr,
                row * noise_stride_b,
                noise_stride_v,
                key,
                offsets,
                inside & ~greedy,
                start,
                KEYED,
                BLOCK,
            )
            score = tl.where(greedy, q, tl.div_rn(q, tl.maximum(noise, FLOAT32_TINY)))
            keys = tl.where(inside, ordered_key(score, False), KEY32_MIN)
            better = keys > best_key  # as _lane_best, carrying q along
            best_key = tl.where(better, keys, best_key)
            best_index = tl.where(better, offsets, best_index)
            best_q = tl.where(better, q, best_q)
    return best_key, best_index, best_q


@triton.jit
def _row_greedy(top_ks_ptr, top_ks_stride, row, HAS_TOP_KS: tl.constexpr):
    """Whether the row samples greedily (``top_ks <= 1``)."""
    greedy = tl.zeros((), tl.int1)
    if HAS_TOP_KS:
        greedy = tl.load(top_ks_ptr + row * top_ks_stride) <= 1
    return greedy


@kernel
@triton.jit
def _softmax_kernel(
    logits_ptr, logits_stride_b, logits_stride_v,
    temperatures_ptr, temperatures_stride,
    top_ks_ptr, top_ks_stride,
    noise_ptr, noise_stride_b, noise_stride_v, seeds_ptr, positions_ptr, step,
    q_ptr, q_stride_b, q_stride_v,
    q_x_ptr, q_x_stride, x_ptr, x_stride,
    batch, vocab, chunk, num_chunks,
    HAS_TEMPERATURES: tl.constexpr, SAMPLE: tl.constexpr, KEYED: tl.constexpr, HAS_TOP_KS: tl.constexpr,
    CHUNKS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """``q = softmax(logits / temperatures)`` per row (its sum over ``num_chunks`` chunks of ``chunk``
    lanes, as split rows sum it); ``SAMPLE``: also ``x`` (the race over q, or argmax q where
    ``top_ks <= 1``) and ``q_x = q[x]``."""
    for row in range(tl.program_id(0), batch, tl.num_programs(0)):
        row64 = tl.zeros((), tl.int64) + row
        logits_row = logits_ptr + row64 * logits_stride_b
        temperature = _row_temperature(temperatures_ptr, temperatures_stride, row64, HAS_TEMPERATURES)
        shift, row_sum = _row_softmax_stats(
            logits_row,
            logits_stride_v,
            vocab,
            chunk,
            num_chunks,
            temperature,
            HAS_TEMPERATURES,
            CHUNKS,
            BLOCK,
        )
        best_key, best_index, best_q = _write_softmax_range(
            logits_row, logits_stride_v, 0, vocab, temperature, shift, 1.0 / row_sum, q_ptr + row64 * q_stride_b,
            q_stride_v, _row_greedy(top_ks_ptr, top_ks_stride, row64, HAS_TOP_KS), noise_ptr, noise_stride_b,
            noise_stride_v, seeds_ptr, positions_ptr, step, row64, HAS_TEMPERATURES, SAMPLE, KEYED, BLOCK,
        )  # fmt: skip
        if SAMPLE:
            token = first_best(best_key, best_index)
            # The lane holding the token (lane ids are the indices modulo BLOCK) kept its q.
            tl.store(q_x_ptr + row64 * q_x_stride, tl.sum(tl.where(best_index == token, best_q, 0.0), 0))
            tl.store(x_ptr + row64 * x_stride, token.to(tl.int64))


@kernel
@triton.jit
def _softmax_stats_kernel(
    logits_ptr, logits_stride_b, logits_stride_v,
    temperatures_ptr, temperatures_stride,
    scratch_ptr, scratch_stride, stats_column, batch, vocab, chunk,
    HAS_TEMPERATURES: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Split rows, first launch: program (c, r) stores the max and the sum of exp (relative to it) of
    chunk c of rows r, r + grid, ... in the row's int32 scratch from ``stats_column`` on (the maxima
    of its chunks, then the sums, as float32 bits)."""
    chunk_id = tl.program_id(0)
    begin, end = chunk_lanes(chunk_id, chunk, vocab)
    for row in range(tl.program_id(1), batch, tl.num_programs(1)):
        row64 = tl.zeros((), tl.int64) + row
        temperature = _row_temperature(temperatures_ptr, temperatures_stride, row64, HAS_TEMPERATURES)
        chunk_max, chunk_sum = _online_softmax(
            logits_ptr + row64 * logits_stride_b, logits_stride_v, begin, end, temperature, HAS_TEMPERATURES, BLOCK
        )  # fmt: skip
        stats_row = scratch_ptr + row64 * scratch_stride + stats_column + chunk_id
        tl.store(stats_row, chunk_max.to(tl.int32, bitcast=True))
        tl.store(stats_row + tl.num_programs(0), chunk_sum.to(tl.int32, bitcast=True))


@kernel
@triton.jit
def _softmax_chunk_kernel(
    logits_ptr, logits_stride_b, logits_stride_v,
    temperatures_ptr, temperatures_stride,
    top_ks_ptr, top_ks_stride,
    noise_ptr, noise_stride_b, noise_stride_v, seeds_ptr, positions_ptr, step,
    q_ptr, q_stride_b, q_stride_v,
    scratch_ptr, scratch_stride, stats_column, batch, vocab, chunk,
    HAS_TEMPERATURES: tl.constexpr, SAMPLE: tl.constexpr, KEYED: tl.constexpr, HAS_TOP_KS: tl.constexpr,
    CHUNKS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Split rows, second launch: program (c, r) folds the row's chunk stats (:func:`_fold_chunk_stats`,
    as the walk of a whole row does) into its max and sum, and writes q over chunk c; ``SAMPLE``: stores
    the chunk's best race key and its index at the start of the row's scratch (``[2, chunks]``: the
    sets of :func:`_top_merge_kernel`, one entry a chunk)."""
    chunk_id = tl.program_id(0)
    num_chunks = tl.num_programs(0)
    begin, end = chunk_lanes(chunk_id, chunk, vocab)
    chunks = tl.arange(0, CHUNKS)
    for row in range(tl.program_id(1), batch, tl.num_programs(1)):
        row64 = tl.zeros((), tl.int64) + row
        scratch_row = scratch_ptr + row64 * scratch_stride
        stats = scratch_row + stats_column + chunks
        in_row = chunks < num_chunks
        maxima = tl.load(stats, mask=in_row, other=0).to(tl.float32, bitcast=True)
        maxima = tl.where(in_row, maxima, float("-inf"))
        sums = tl.load(stats + num_chunks, mask=in_row, other=0).to(tl.float32, bitcast=True)
        shift, row_sum = _fold_chunk_stats(maxima, sums, num_chunks, CHUNKS)
        best_key, best_index, _ = _write_softmax_range(
            logits_ptr + row64 * logits_stride_b, logits_stride_v, begin, end,
            _row_temperature(temperatures_ptr, temperatures_stride, row64, HAS_TEMPERATURES), shift, 1.0 / row_sum,
            q_ptr + row64 * q_stride_b, q_stride_v, _row_greedy(top_ks_ptr, top_ks_stride, row64, HAS_TOP_KS),
            noise_ptr, noise_stride_b, noise_stride_v, seeds_ptr, positions_ptr, step, row64, HAS_TEMPERATURES,
            SAMPLE, KEYED, BLOCK,
        )  # fmt: skip
        if SAMPLE:
            best_keys, best_ids = single_best(best_key, best_index, 1)
            tl.store(scratch_row + chunk_id + tl.arange(0, 1), best_keys)
            tl.store(scratch_row + num_chunks + chunk_id + tl.arange(0, 1), best_ids)
