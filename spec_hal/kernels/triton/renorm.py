"""Triton kernels of family D7: ``top_k_renorm_prob`` and ``top_p_renorm_prob`` without a sort.

The kept set is ``{p >= tau}`` with ``tau`` a value of the row (``spec_hal/ops/renorm.py``).
Non-negative float32 values order like their bit patterns read as int32 (*keys*, 31 bits). The
condition on a key x (top-k: at least k values of the row at or above x; top-p: at least
``top_p * total`` of mass at or above x) only weakens as x grows, and ``tau`` is the largest key of
the row where it holds; each pass over the row narrows the keys where it can lie.

Top-k finds ``tau``'s key one digit at a time, most significant first (a radix select): a pass tallies
the values whose key starts with the digits found so far (the *bracket*) by their next digit
(``tl.histogram``), and the highest digit where the condition still holds (counting what lies above
the bracket) is the next digit. After the last digit the tallied bins are single keys, so the kept
mass is exact bookkeeping: the mass above the last bracket plus each kept key's count times its value.

Top-p splits the bracket ``[low, high)`` of keys into ``2**DIGIT`` even steps (*pivots*, the first
``low``) and sums, per pivot, the mass of the values at or above it, compared as floats (a compare, a
select and a float add per value and pivot: nothing to decode, and the adds run on the float pipe).
The highest pivot where the condition holds becomes ``low`` and the next one ``high``; the first
pass, whose first pivot is key 0, also gives the row's total. When one key is left, ``low`` is tau
and its pivot's mass the kept mass.

In split rows (below), once the bracket's exponent is known, the values inside it are stored in the
row's ``out`` lanes (which the last pass overwrites; not where ``out`` is ``probs``), with the mass
above them: later passes read those values alone, a small part of a row. Top-p's pass that narrows
the bracket further stores them. Top-k's first 8-bit digit is the exponent, and a launch of its own
stores them: compares and stores, without the histogram that the next digit's tally would cost over
the whole row (its digit launches then tally the stored values only). Where every chunk of a row
stored few values (:data:`_FINISH_TILE` for the whole row), the last program of that launch to
arrive finds tau from them in its registers, by a bisection of the bracket's keys: the digit
launches after it skip the row, each costing its launch and a read of the row's done mark. Batches
of ``config.row_finish_rows`` rows or more skip that finisher.

A last pass writes ``out = p / sum(kept)`` where ``p >= tau``, 0 elsewhere (``out`` may be ``probs``:
every lane is read before it is written, by the thread that writes it). Rows that keep everything
(``k <= 0``, ``k >= V``, ``top_p >= 1``) only sum the row. Passes after the first read the row again
(from L2 when it is still there): the op's bytes are counted once. Negative keys (negative values,
which the contract rejects) match no digit and fall below every ``tau``.

Two shapes of launch:

* a row that fits one program's registers (``config.row_resident_lanes``), at any batch: one
  program per row reads it once, finds tau by a bisection of the keys over its registers (31 steps,
  each a count or a mass of the values at or above a key), and writes the output from them. With
  few rows, splitting them (below) takes less device time, but a launch per digit: engines call
  these ops eagerly, where those launches' host time outweighs it;
* longer rows, at any batch: each row is split into chunks (at least two where it spans two copy
  tiles), one program per (chunk, row), one launch per digit (and top-k's that keeps the bracket)
  and one that writes. A program tallies its chunk into the row's scratch; the last program of the
  row to arrive (an atomic count) adds the chunks' tallies in chunk order (the same sums every run)
  and stores the row's next digit, which the next launch reads. Rows are split even when there are
  enough of them to fill the device: the kept values that chunks of several blocks store make the
  later passes short, where one program walking its row would read it whole at every pass, from
  memory once the rows in flight outgrow L2.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .config import LaunchConfig
from .device_math import chunk_lanes
from .launch import Launch, LaunchSequence, cdiv, kernel, next_power_of_2
from .launcher import Launcher
from .sizing import warps

#: Bits of a key (the sign bit of a non-negative float is 0).
_KEY_BITS = tl.constexpr(31)
#: One past the largest key: top-p's first bracket is ``[0, _KEY_END)``.
_KEY_END = tl.constexpr(2**31)
#: Digit widths (bits) of (top-k, top-p): top-p's pivots per pass are ``2**DIGIT``. A pass costs a
#: launch, a read of the chunk (or of its kept values) and work per value that grows with the digit's
#: values (``tl.histogram``'s bit ballots, or a compare, a select and an add per pivot).
_DIGIT_BITS = (8, 3)
#: Split rows keep the values of their bracket in ``out`` once this many high bits of tau's key (the
#: exponent's) are known, and read those from then on: the bracket then holds a small part of a row.
_COMPACT_AFTER_BITS = 8
#: ... when a chunk spans this many blocks: a chunk of fewer is read in as few steps as its kept
#: values would be, and storing them costs a scan of every block.
_COMPACT_MIN_BLOCKS = 4
#: Values of a row (over all its chunks) that top-k's keeping launch holds in one program's
#: registers to find tau from them, when every chunk kept few enough: the digit launches after it
#: then skip the row, each a launch whose programs only read the row's done mark.
_FINISH_TILE = 4096
#: Blocks of a mass pass loaded per step (more keep more registers live than the kernel has).
_UNROLL = tl.constexpr(4)
_KEY_MIN = tl.constexpr(-(2**31))
#: A split row's int32 scratch: these slots, then per chunk one slot per digit value or pivot and two
#: more (top-k's mass above the bracket, the total of a row that keeps everything, or top-p's mass
#: above the kept values; then the count of the kept values); float32 values are kept as their bits.
_ARRIVALS = tl.constexpr(0)
#: Top-k's digits found so far; top-p's bracket ``[low, high)`` as ``low`` (here) and ``high - 1``.
_PREFIX = tl.constexpr(1)
_COUNT_ABOVE = tl.constexpr(2)
_HIGH_LAST = tl.constexpr(3)
_TARGET = tl.constexpr(4)
_KEPT_MASS = tl.constexpr(5)
_TAU_KEY = tl.constexpr(6)
#: From the level that keeps the bracket's values in ``out``: the row's mass above them.
_KEPT_ABOVE = tl.constexpr(7)
#: Set when top-k's keeping launch found tau from the kept values (the later digit launches skip
#: the row).
_DONE = tl.constexpr(8)
_STATE_SLOTS = tl.constexpr(9)


@triton.jit
def _load_row_block(row_ptr, stride_v, start, end, BLOCK: tl.constexpr):
    """Lanes ``start + [0, BLOCK)`` of a row, those before ``end``: (indices, in range, values (0
    outside), keys)."""
    offsets = start + tl.arange(0, BLOCK)
    inside, values, keys = _load_lanes(row_ptr, stride_v, offsets, end)
    return offsets, inside, values, keys


@triton.jit
def _load_lanes(row_ptr, stride_v, offsets, end):
    """Lanes ``offsets`` (any shape) of a row, those before ``end``: (in range, values (0 outside),
    keys)."""
    inside = offsets < end
    values = tl.load(row_ptr + offsets.to(tl.int64) * stride_v, mask=inside, other=0.0)
    # -0.0 is a probability of 0: its bits would be the most negative key.
    return inside, values, tl.where(values == 0.0, 0, values.to(tl.int32, bitcast=True))


@triton.jit
def _range_total(row_ptr, stride_v, begin, end, BLOCK_V: tl.constexpr):
    mass = tl.zeros([BLOCK_V], tl.float32)
    for start in range(begin, end, BLOCK_V):
        _, _, values, _ = _load_row_block(row_ptr, stride_v, start, end, BLOCK_V)
        mass += values
    return tl.sum(mass, 0)


@triton.jit
def _count_pass(
    row_ptr, stride_v, begin, end, prefix, kept_ptr, kept_stride, HIGH: tl.constexpr, SHIFT: tl.constexpr,
    BLOCK_V: tl.constexpr, KEEP: tl.constexpr, COUNT: tl.constexpr = True,
):  # fmt: skip
    """Over lanes ``[begin, end)`` of the row, the keys whose bits from ``HIGH`` up equal
    ``prefix``'s (the bracket): with ``COUNT``, the count of each digit (bits ``SHIFT .. HIGH - 1``;
    zeros without); the mass of the keys above the bracket; with ``KEEP``, the number of values of
    the bracket also stored at ``kept_ptr`` (in row order, from slot 0: later passes count those
    instead of the row), else 0."""
    NUM_DIGITS: tl.constexpr = tl.constexpr(1) << (HIGH - SHIFT)
    head = prefix >> HIGH
    counts = tl.zeros([NUM_DIGITS], tl.int32)
    mass_above = tl.zeros([BLOCK_V], tl.float32)
    stored = tl.zeros((), tl.int32)
    for start in range(begin, end, BLOCK_V):
        _, inside, values, keys = _load_row_block(row_ptr, stride_v, start, end, BLOCK_V)
        key_head = keys >> HIGH
        in_bracket = inside & (key_head == head)
        if COUNT:
            digits = (keys >> SHIFT) & (NUM_DIGITS - 1)
            counts += tl.histogram(digits, NUM_DIGITS, mask=in_bracket)
        mass_above += tl.where(inside & (key_head > head), values, 0.0)
        if KEEP:
            flags = in_bracket.to(tl.int32)
            slots = stored + tl.cumsum(flags, 0) - 1
            tl.store(kept_ptr + slots.to(tl.int64) * kept_stride, values, mask=in_bracket)
            stored += tl.sum(flags, 0)
    return counts, tl.sum(mass_above, 0), stored


@triton.jit
def _pivots(low, high, DIGIT: tl.constexpr):
    """The ``2**DIGIT`` keys ``low + (high - low) * j / 2**DIGIT`` (rounded down; int64 scalars in,
    an int64 vector out): the first is ``low``, all are below ``high``."""
    steps = tl.arange(0, tl.constexpr(1) << DIGIT).to(tl.int64)
    return low + (((high - low) * steps) >> DIGIT)


@triton.jit
def _mass_pass(row_ptr, stride_v, begin, end, pivots, BLOCK_R: tl.constexpr, UNROLL: tl.constexpr):
    """Over lanes ``[begin, end)``, the mass of the values at or above each pivot key, compared as the
    floats the keys encode (the lanes past the range load 0.0, which adds nothing). Each step reads
    ``UNROLL`` blocks of ``BLOCK_R`` lanes, all loads issued before the first is used (the
    ``[BLOCK_R, pivots]`` sums keep the block small; one block per step would wait on memory once per
    block). A block is loaded as a ``[BLOCK_R, 1]`` column, in the layout of the sums: a 1-D block
    would be converted to it (through shared memory) on every step."""
    thresholds = pivots.to(tl.int32).to(tl.float32, bitcast=True)[None, :]
    lanes = tl.arange(0, BLOCK_R)[:, None]
    masses = tl.zeros([BLOCK_R, pivots.shape[0]], tl.float32)
    for start in range(begin, end, BLOCK_R * UNROLL):
        for part in tl.static_range(UNROLL):
            _, values, _ = _load_lanes(row_ptr, stride_v, start + part * BLOCK_R + lanes, end)
            masses += tl.where(values >= thresholds, values, 0.0)
    return tl.sum(masses, 0)


@triton.jit
def _compacting_mass_pass(
    row_ptr, stride_v, begin, end, pivots, low, high, kept_ptr, kept_stride, BLOCK_R: tl.constexpr,
    UNROLL: tl.constexpr,
):  # fmt: skip
    """:func:`_mass_pass`, which also stores the values whose keys lie in the bracket ``[low, high)``
    at ``kept_ptr`` (in row order, from slot 0): later passes read those instead of the row, and
    add the mass at or above ``high``. Returns (masses, the values stored, that mass). Compared as
    floats, as the pivots are: a value no pivot counts (NaN) is neither kept nor above."""
    thresholds = pivots.to(tl.int32).to(tl.float32, bitcast=True)[None, :]
    bottom = low.to(tl.int32).to(tl.float32, bitcast=True)
    # A NaN where high is past the largest finite key (up to _KEY_END): no value is at or above it.
    top = tl.minimum(high, _KEY_END - 1).to(tl.int32).to(tl.float32, bitcast=True)
    lanes = tl.arange(0, BLOCK_R)[:, None]
    masses = tl.zeros([BLOCK_R, pivots.shape[0]], tl.float32)
    above = tl.zeros([BLOCK_R, 1], tl.float32)
    stored = tl.zeros((), tl.int32)
    for start in range(begin, end, BLOCK_R * UNROLL):
        for part in tl.static_range(UNROLL):
            inside, values, _ = _load_lanes(row_ptr, stride_v, start + part * BLOCK_R + lanes, end)
            masses += tl.where(values >= thresholds, values, 0.0)
            at_or_above_top = values >= top
            above += tl.where(at_or_above_top, values, 0.0)
            in_bracket = (inside & (values >= bottom) & ~at_or_above_top).to(tl.int32)
            slots = stored + tl.cumsum(in_bracket, 0) - 1
            tl.store(kept_ptr + slots.to(tl.int64) * kept_stride, values, mask=in_bracket != 0)
            stored += tl.sum(in_bracket)
    return tl.sum(masses, 0), stored, tl.sum(above)


@triton.jit
def _top_p_masses(
    row_ptr, stride_v, begin, end, pivots, low, high, kept_ptr, kept_stride, kept, above, LEVEL: tl.constexpr,
    COMPACT_LEVEL: tl.constexpr, BLOCK_R: tl.constexpr, UNROLL: tl.constexpr,
):  # fmt: skip
    """The mass at or above each pivot over lanes ``[begin, end)`` of a row, at digit ``LEVEL``:
    from the row itself up to ``COMPACT_LEVEL`` (-1: always), whose pass also stores the bracket's
    values at ``kept_ptr``; after it, from the ``kept`` values stored there plus ``above``. Returns
    (masses, kept, above), the last two as stored at ``COMPACT_LEVEL``."""
    if (COMPACT_LEVEL >= 0) & (LEVEL > COMPACT_LEVEL):
        masses = above + _mass_pass(kept_ptr, kept_stride, 0, kept, pivots, BLOCK_R, UNROLL)
    elif LEVEL == COMPACT_LEVEL:
        masses, kept, above = _compacting_mass_pass(
            row_ptr, stride_v, begin, end, pivots, low, high, kept_ptr, kept_stride, BLOCK_R, UNROLL
        )
    else:
        masses = _mass_pass(row_ptr, stride_v, begin, end, pivots, BLOCK_R, UNROLL)
    return masses, kept, above


@triton.jit
def _highest_holding(tallies, above, needed):
    """(the highest digit d where ``above`` + the tallies of digits >= d reach ``needed`` and are
    not 0, 0 where none does (the condition holds at the bracket's lower edge: float32 sums may say
    otherwise); the tallies of the digits above d, summed). Not 0: a top-p target that rounds to 0
    would hold above the row's maximum and keep nothing."""
    digit_values = tl.arange(0, tallies.shape[0])
    reached = above + tl.cumsum(tallies, 0, reverse=True)
    chosen = tl.max(tl.where((reached >= needed) & (reached > 0), digit_values, 0), 0)
    return chosen, tl.sum(tl.where(digit_values > chosen, tallies, 0), 0)


@triton.jit
def _top_k_select(counts, mass_above, prefix, count_above, k, HIGH: tl.constexpr, SHIFT: tl.constexpr):
    """From a pass's counts (1 <= k < V): (the prefix with tau's next digit, the count above the new
    bracket, after the last digit (``SHIFT == 0``) the kept mass, else 0)."""
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
def _top_p_select(masses, pivots, high, target):
    """From a pass's masses at its pivots (top_p < 1): (the highest pivot whose mass reaches
    ``target`` and is not 0, the next pivot or ``high``: the new bracket; that pivot's mass). Where
    none does, the first (``low``, which held when it was chosen: float32 sums may say otherwise).
    Not 0: a target that rounds to 0 would hold above the row's maximum and keep nothing."""
    steps = tl.arange(0, masses.shape[0])
    chosen = tl.max(tl.where((masses >= target) & (masses > 0), steps, 0), 0)
    low = tl.sum(tl.where(steps == chosen, pivots, 0), 0)
    high = tl.min(tl.where(steps > chosen, pivots, high), 0)
    return low, high, tl.sum(tl.where(steps == chosen, masses, 0.0), 0)


@triton.jit
def _first(vector):
    """``vector[0]``."""
    return tl.sum(tl.where(tl.arange(0, vector.shape[0]) == 0, vector, 0), 0)


@triton.jit
def _row_parameter(
    param_ptr, param_stride, param_value, row, vocab, TOP_P: tl.constexpr, PER_ROW: tl.constexpr
):
    """(the row's k (int64) or top_p (float32), whether the row keeps everything)."""
    if PER_ROW:
        param = tl.load(param_ptr + row * param_stride)
    else:
        param = param_value
    if TOP_P:
        # A float32 whatever the argument's type (the interpreter may pass a tiny float as float64).
        top_p = (tl.zeros((), tl.float32) + param).to(tl.float32)
        return top_p, top_p >= 1.0
    k = tl.zeros((), tl.int64) + param
    return k, (k <= 0) | (k >= vocab)


@triton.jit
def _write_range(
    row_ptr, stride_v, out_row, out_stride_v, begin, end, tau_key, kept_mass, BLOCK_V: tl.constexpr
):  # fmt: skip
    for start in range(begin, end, BLOCK_V):
        offsets, inside, values, keys = _load_row_block(row_ptr, stride_v, start, end, BLOCK_V)
        _store_renormalised(out_row, out_stride_v, offsets, inside, values, keys >= tau_key, kept_mass)


@triton.jit
def _store_renormalised(out_row, out_stride_v, offsets, inside, values, kept, kept_mass):
    # IEEE division: the reference's p / sum(kept).
    renormalised = tl.where(kept, tl.div_rn(values, kept_mass), 0.0)
    tl.store(out_row + offsets.to(tl.int64) * out_stride_v, renormalised, mask=inside)


# --------------------------------------------------------------------------------------------------
# One program per row, the row held in registers


@triton.jit
def _resident_threshold(values, param, TOP_P: tl.constexpr):
    """(tau as a float32, sum of the kept values) of a row held in registers (``values``, 0.0 in the
    lanes past the row), for 1 <= k < V or top_p < 1: a bisection of the keys. The condition (see
    the module docstring) holds at key 0 and not at the largest key; each step halves the keys
    between, so after 31 steps ``low`` is the largest key where it holds, which is a key of the row
    (the count or the mass changes there). Keys are compared as the floats they encode (the same
    order for non-negative values, and -0.0 counts as 0), so the row is held once, as values.

    A step's compare, select and add over every value bound the row, on the integer and logic pipe:
    the lanes past the row need no mask (every key tried is above 0, so their 0.0 never counts), and
    top-k counts in float32 (exact: a count stays below 2**24), whose adds run on the float pipe."""
    if TOP_P:
        target = param * tl.sum(values, 0)
    low = tl.zeros((), tl.int32)
    high = tl.zeros((), tl.int32) + 0x7FFFFFFF
    for _ in range(_KEY_BITS):
        middle = low + (high - low) // 2  # at least 1: a key above 0.0
        at_or_above = values >= middle.to(tl.float32, bitcast=True)
        if TOP_P:
            mass = tl.sum(tl.where(at_or_above, values, 0.0), 0)
            # Not 0: a target that rounds to 0 would hold above the row's maximum and keep nothing.
            holds = (mass >= target) & (mass > 0)
        else:
            holds = tl.sum(tl.where(at_or_above, 1.0, 0.0), 0) >= param.to(tl.float32)
        low = tl.where(holds, middle, low)
        high = tl.where(holds, high, middle)
    tau = low.to(tl.float32, bitcast=True)
    # The lanes past the row hold 0.0: nothing to add, whatever tau.
    return tau, tl.sum(tl.where(values >= tau, values, 0.0), 0)


@kernel
@triton.jit
def _renorm_resident_kernel(
    probs_ptr, probs_stride_b, probs_stride_v,
    out_ptr, out_stride_b, out_stride_v,
    param_ptr, param_stride, param_value,
    batch, vocab,
    TOP_P: tl.constexpr, PER_ROW: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    """Each row read once into a ``BLOCK_V``-lane register tile (``BLOCK_V >= vocab``), tau found
    there, the output written from it. ``param``: the row's k (int) or top_p (float32), from
    ``param_ptr`` when ``PER_ROW``."""
    for program_row in range(tl.program_id(0), batch, tl.num_programs(0)):
        row = tl.zeros((), tl.int64) + program_row
        row_ptr = probs_ptr + row * probs_stride_b
        param, keep_all = _row_parameter(param_ptr, param_stride, param_value, row, vocab, TOP_P, PER_ROW)
        offsets = tl.arange(0, BLOCK_V)
        inside = offsets < vocab
        values = tl.load(row_ptr + offsets.to(tl.int64) * probs_stride_v, mask=inside, other=0.0)
        if keep_all:
            kept = inside
            kept_mass = tl.sum(values, 0)
        else:
            tau, kept_mass = _resident_threshold(values, param, TOP_P)
            kept = values >= tau
        _store_renormalised(
            out_ptr + row * out_stride_b, out_stride_v, offsets, inside, values, kept, kept_mass
        )


# --------------------------------------------------------------------------------------------------
# Rows split into chunks


@triton.jit
def _load_state(state, slot):
    # Written by other programs (earlier launches, or this launch's other chunks): read from L2.
    return tl.load(state + slot, cache_modifier=".cg")


@triton.jit
def _load_state_float(state, slot):
    return _load_state(state, slot).to(tl.float32, bitcast=True)


@triton.jit
def _store_state_float(state, slot, value):
    tl.store(state + slot, value.to(tl.int32, bitcast=True))


@kernel
@triton.jit
def _renorm_digit_kernel(
    probs_ptr, probs_stride_b, probs_stride_v,
    out_ptr, out_stride_b, out_stride_v,
    param_ptr, param_stride, param_value,
    scratch_ptr, scratch_stride, batch, vocab, chunk, num_chunks,
    TOP_P: tl.constexpr, PER_ROW: tl.constexpr, LEVEL: tl.constexpr, DIGIT: tl.constexpr,
    COMPACT_LEVEL: tl.constexpr, KEEPS: tl.constexpr, STEP: tl.constexpr, CHUNKS: tl.constexpr,
    FINISH_LANES: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    """Digit ``LEVEL`` of each row's tau: program (c, q) tallies chunk c of rows q, q + grid, ...;
    the row's last program to arrive finishes the digit (``CHUNKS``: a power of two >= the chunks;
    ``STEP``: the launch's number among the digit launches). Level 0 also sums the rows that keep
    everything (they skip the later levels). The values of the bracket are kept in the chunk's
    lanes of ``out`` at ``COMPACT_LEVEL`` (-1: never) and read from then on: top-p's pass of that
    level keeps them, top-k's are kept by a launch of their own (``KEEPS``: it tallies nothing, and
    the level's digit launch after it reads them). Where each chunk of a row kept at most
    ``FINISH_LANES`` values, that launch's finisher finds tau from them (0: never), and the top-k
    digit launches after it skip the row."""
    HIGH: tl.constexpr = _KEY_BITS - LEVEL * DIGIT
    SHIFT: tl.constexpr = (HIGH - DIGIT) * (HIGH > DIGIT)
    # Top-k tallies the bracket's next digit (the last one may be narrower); top-p, its pivots.
    TALLIES: tl.constexpr = (tl.constexpr(1) << DIGIT) if TOP_P else (tl.constexpr(1) << (HIGH - SHIFT))
    EXTRA: tl.constexpr = tl.constexpr(1) << DIGIT
    KEPT: tl.constexpr = EXTRA + 1
    SLOTS: tl.constexpr = EXTRA + 2
    COMPACTS: tl.constexpr = COMPACT_LEVEL >= 0
    STORES_KEPT: tl.constexpr = COMPACTS & (LEVEL == COMPACT_LEVEL) & (TOP_P | KEEPS)
    READS_KEPT: tl.constexpr = COMPACTS & (
        (LEVEL > COMPACT_LEVEL) | ((LEVEL == COMPACT_LEVEL) & (not (TOP_P | KEEPS)))
    )
    c = tl.program_id(0)
    begin, end = chunk_lanes(c, chunk, vocab)
    tally_slots = tl.arange(0, TALLIES)
    for program_row in range(tl.program_id(1), batch, tl.num_programs(1)):
        row = tl.zeros((), tl.int64) + program_row
        row_ptr = probs_ptr + row * probs_stride_b
        state = scratch_ptr + row * scratch_stride
        param, keep_all = _row_parameter(param_ptr, param_stride, param_value, row, vocab, TOP_P, PER_ROW)
        active = (LEVEL == 0) | (not keep_all)
        if READS_KEPT and not TOP_P:
            active = active & (_load_state(state, _DONE) == 0)
        if active:
            prefix = _load_state(state, _PREFIX)  # top-p: the bracket's low key
            high = tl.zeros((), tl.int64) + _KEY_END
            if TOP_P and LEVEL > 0:
                high = _load_state(state, _HIGH_LAST).to(tl.int64) + 1
            tallies = state + _STATE_SLOTS + c * SLOTS
            # The chunk's lanes of out: the bracket's values from COMPACT_LEVEL on.
            kept_row = out_ptr + row * out_stride_b + begin.to(tl.int64) * out_stride_v
            kept = tl.zeros((), tl.int32)
            if READS_KEPT:
                kept = _load_state(tallies, KEPT)
            extra = tl.zeros((), tl.float32)
            if keep_all:
                extra = _range_total(row_ptr, probs_stride_v, begin, end, BLOCK_V)
            elif TOP_P:
                low = prefix.to(tl.int64)
                # The row's mass above the kept values is the finisher's to add (once per row).
                masses, kept, extra = _top_p_masses(
                    row_ptr, probs_stride_v, begin, end, _pivots(low, high, DIGIT), low, high, kept_row,
                    out_stride_v, kept, tl.zeros((), tl.float32), LEVEL, COMPACT_LEVEL, BLOCK_R, _UNROLL,
                )  # fmt: skip
                tl.store(tallies + tally_slots, masses.to(tl.int32, bitcast=True))
                if LEVEL != COMPACT_LEVEL:
                    extra = tl.zeros((), tl.float32)
            elif KEEPS:  # tallying while keeping would cost the histogram over the whole row
                _, extra, kept = _count_pass(
                    row_ptr, probs_stride_v, begin, end, prefix, kept_row, out_stride_v, HIGH, SHIFT, BLOCK_V,
                    True, False,
                )  # fmt: skip
            elif READS_KEPT:  # the finisher adds the mass above the kept values
                counts, extra, _ = _count_pass(
                    kept_row, out_stride_v, 0, kept, prefix, kept_row, out_stride_v, HIGH, SHIFT, BLOCK_V, False,
                )  # fmt: skip
                tl.store(tallies + tally_slots, counts)
            else:
                counts, extra, _ = _count_pass(
                    row_ptr, probs_stride_v, begin, end, prefix, kept_row, out_stride_v, HIGH, SHIFT, BLOCK_V,
                    False,
                )  # fmt: skip
                tl.store(tallies + tally_slots, counts)
            if STORES_KEPT:
                tl.store(tallies + KEPT, kept)
            _store_state_float(tallies, EXTRA, extra)
            # Every thread's tallies are stored before the arrival that publishes them.
            tl.debug_barrier()
            arrived = tl.atomic_add(state + _ARRIVALS, 1, sem="acq_rel")
            if arrived == (STEP + 1) * num_chunks - 1:
                if KEEPS:
                    _finish_keeping(
                        state, out_ptr + row * out_stride_b, out_stride_v, chunk, num_chunks, param, prefix, HIGH,
                        SLOTS, CHUNKS, FINISH_LANES,
                    )  # fmt: skip
                else:
                    _finish_digit(
                        state, param, keep_all, prefix, high, num_chunks, TOP_P, LEVEL, DIGIT, STORES_KEPT,
                        READS_KEPT, HIGH, SHIFT, TALLIES, SLOTS, CHUNKS,
                    )  # fmt: skip


@triton.jit
def _finish_digit(
    state, param, keep_all, prefix, high, num_chunks, TOP_P: tl.constexpr, LEVEL: tl.constexpr,
    DIGIT: tl.constexpr, STORES_KEPT: tl.constexpr, READS_KEPT: tl.constexpr, HIGH: tl.constexpr,
    SHIFT: tl.constexpr, TALLIES: tl.constexpr, SLOTS: tl.constexpr, CHUNKS: tl.constexpr,
):  # fmt: skip
    """The row's chunks' tallies added in chunk order, the row's next digit (top-p: bracket) stored
    (and, after the last digit or for a row that keeps everything, tau's key and the kept mass)."""
    chunk_slots = tl.arange(0, CHUNKS)
    in_row = chunk_slots < num_chunks
    firsts = state + _STATE_SLOTS + chunk_slots * SLOTS
    extra = tl.sum(
        tl.load(firsts + SLOTS - 2, mask=in_row, other=0, cache_modifier=".cg").to(tl.float32, bitcast=True),
        0,
    )
    cells = tl.load(
        firsts[:, None] + tl.arange(0, TALLIES)[None, :],
        mask=in_row[:, None],
        other=0,
        cache_modifier=".cg",
    )
    tau_key = tl.zeros((), tl.int32) + _KEY_MIN
    kept_mass = extra  # a row that keeps everything: its total
    if not keep_all:
        above_kept = tl.zeros((), tl.float32)
        if STORES_KEPT:  # the chunks' extras: their masses above the kept values
            _store_state_float(state, _KEPT_ABOVE, extra)
        if READS_KEPT:
            above_kept = _load_state_float(state, _KEPT_ABOVE)
        if TOP_P:
            masses = tl.sum(cells.to(tl.float32, bitcast=True), 0) + above_kept
            if LEVEL == 0:  # the first pivot is key 0: its mass is the row's total
                _store_state_float(state, _TARGET, param * _first(masses))
            low, high, kept_mass = _top_p_select(
                masses, _pivots(prefix.to(tl.int64), high, DIGIT), high, _load_state_float(state, _TARGET)
            )
            tl.store(state + _HIGH_LAST, (high - 1).to(tl.int32))
            prefix = low.to(tl.int32)
        else:
            prefix, count_above, kept_mass = _top_k_select(
                tl.sum(cells, 0),
                extra + above_kept,
                prefix,
                _load_state(state, _COUNT_ABOVE).to(tl.int64),
                param,
                HIGH,
                SHIFT,
            )
            tl.store(state + _COUNT_ABOVE, count_above.to(tl.int32))
        tl.store(state + _PREFIX, prefix)
        tau_key = prefix
    if keep_all | (SHIFT == 0):
        tl.store(state + _TAU_KEY, tau_key)
        _store_state_float(state, _KEPT_MASS, kept_mass)


@triton.jit
def _finish_keeping(
    state, out_row, out_stride_v, chunk, num_chunks, k, prefix, HIGH: tl.constexpr, SLOTS: tl.constexpr,
    CHUNKS: tl.constexpr, FINISH_LANES: tl.constexpr,
):  # fmt: skip
    """After top-k's keeping launch: the row's mass above its kept values (the chunks' extras, in
    chunk order) stored. Where no chunk kept more than ``FINISH_LANES`` values, tau is found here:
    the kept values (the bracket's, keys ``[low, low + 2**HIGH)``) are read into a
    ``[CHUNKS, FINISH_LANES]`` tile and the bracket's keys bisected over it, as a resident row's are
    (the count above the bracket added: the condition holds at ``low`` and not at the bracket's end,
    so after ``HIGH`` steps ``low`` is tau's key). Tau, the kept mass and the row's done mark are
    stored: the digit launches after this one skip the row."""
    chunk_slots = tl.arange(0, CHUNKS)
    in_row = chunk_slots < num_chunks
    firsts = state + _STATE_SLOTS + chunk_slots * SLOTS
    extras = tl.load(firsts + SLOTS - 2, mask=in_row, other=0, cache_modifier=".cg")
    above = tl.sum(extras.to(tl.float32, bitcast=True), 0)
    _store_state_float(state, _KEPT_ABOVE, above)
    if FINISH_LANES > 0:
        kept = tl.load(firsts + SLOTS - 1, mask=in_row, other=0, cache_modifier=".cg")
        if tl.max(kept, 0) <= FINISH_LANES:
            lanes = tl.arange(0, FINISH_LANES)
            offsets = chunk_slots.to(tl.int64)[:, None] * chunk + lanes[None, :]
            # -1.0 past each chunk's kept values: below every key tried, never counted or added.
            values = tl.load(
                out_row + offsets * out_stride_v,
                mask=lanes[None, :] < kept[:, None],
                other=-1.0,
                cache_modifier=".cg",
            )
            count_above = _load_state(state, _COUNT_ABOVE).to(tl.int64)
            low = (prefix >> HIGH << HIGH).to(tl.int64)
            high = low + (tl.constexpr(1) << HIGH)
            for _ in range(HIGH):
                middle = low + (high - low) // 2
                at_or_above = values >= middle.to(tl.int32).to(tl.float32, bitcast=True)
                counted = tl.sum(tl.sum(at_or_above.to(tl.int32), 1), 0)
                holds = count_above + counted >= k
                low = tl.where(holds, middle, low)
                high = tl.where(holds, high, middle)
            tau_key = low.to(tl.int32)
            tau = tau_key.to(tl.float32, bitcast=True)
            kept_mass = above + tl.sum(tl.sum(tl.where(values >= tau, values, 0.0), 1), 0)
            tl.store(state + _TAU_KEY, tau_key)
            _store_state_float(state, _KEPT_MASS, kept_mass)
            tl.store(state + _DONE, 1)


@kernel
@triton.jit
def _renorm_write_kernel(
    probs_ptr, probs_stride_b, probs_stride_v,
    out_ptr, out_stride_b, out_stride_v,
    scratch_ptr, scratch_stride, batch, vocab, chunk,
    BLOCK_V: tl.constexpr,
):  # fmt: skip
    """Program (c, q) writes chunk c of rows q, q + grid, ... from the row's tau and kept mass."""
    begin, end = chunk_lanes(tl.program_id(0), chunk, vocab)
    for program_row in range(tl.program_id(1), batch, tl.num_programs(1)):
        row = tl.zeros((), tl.int64) + program_row
        state = scratch_ptr + row * scratch_stride
        _write_range(
            probs_ptr + row * probs_stride_b, probs_stride_v, out_ptr + row * out_stride_b, out_stride_v,
            begin, end, _load_state(state, _TAU_KEY), _load_state_float(state, _KEPT_MASS), BLOCK_V,
        )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Launchers


#: The two launch shapes (see the module docstring).
RESIDENT, SPLIT = "resident", "split"


@functools.lru_cache(maxsize=1024)
def _plan(config: LaunchConfig, vocab: int) -> tuple[str, int, int, int]:
    """(launch shape, lanes per tile, warps, lanes of a row per program). A row whose tile (the row
    rounded up to a power of two) fits ``config.row_resident_lanes``: one program per row holding it
    in that tile, at any batch. Else each row in chunks of ``config.row_chunk_blocks`` copy tiles (a
    row of one tile is one chunk, the row itself, in a tile of the row rounded up to a power of two).
    The plan depends on the row alone, never on the batch: the chunks' masses are added in chunk
    order, so other chunks would give other last bits (and top-p, at a near-tie, another kept set)."""
    row_tile = next_power_of_2(vocab)
    if row_tile <= config.row_resident_lanes:
        return RESIDENT, row_tile, warps(row_tile, 4, config.warp_size, config.row_num_warps), vocab
    block_v = min(next_power_of_2(config.copy_block_bytes // 4), row_tile)
    chunk = min(config.row_chunk_blocks * block_v, vocab)
    return SPLIT, block_v, warps(block_v, 4, config.warp_size, config.copy_num_warps), chunk


class _Launches(NamedTuple):
    """The launches of one renorm layout (:func:`_launches`)."""

    shape: str
    #: In order: split rows launch once per digit (top-k once more, to keep its bracket's values, where
    #: its chunks keep them), then once to write.
    launches: tuple[Launch, ...]
    #: Lanes of a row per program.
    chunk: int
    #: Split rows: programs per row, and the int32 columns of a row's scratch (0 otherwise).
    num_chunks: int = 0
    scratch_columns: int = 0
    #: Split rows: the digit launches (all but the write), which take the same arguments.
    digits: LaunchSequence | None = None


@functools.lru_cache(maxsize=1024)
def _launches(
    config: LaunchConfig, batch: int, vocab: int, top_p: bool, per_row: bool, in_place: bool
) -> _Launches:
    """The launches of :func:`_plan`'s shape for this layout. Split rows keep their bracket's values
    in ``out`` once the key's high bits are found (unless ``out`` is ``probs``), so that later passes
    read those instead of the row."""
    shape, block_v, num_warps, chunk = _plan(config, vocab)
    if shape == RESIDENT:
        resident = _renorm_resident_kernel.at(
            (min(batch, config.max_grid),), TOP_P=top_p, PER_ROW=per_row, BLOCK_V=block_v, num_warps=num_warps
        )
        return _Launches(shape, (resident,), chunk)
    digit = _DIGIT_BITS[top_p]
    num_chunks = cdiv(vocab, chunk)
    grid = (num_chunks, min(batch, config.max_grid))
    compact_level = _compact_level(in_place, digit, chunk // block_v)
    finishes = batch < config.row_finish_rows
    # (level, whether the launch only keeps the bracket's values): top-k keeps them in a launch of
    # their own, before the compact level's digit.
    steps = [
        (level, keeps)
        for level in range(cdiv(_KEY_BITS.value, digit))
        for keeps in ((True, False) if level == compact_level and not top_p else (False,))
    ]
    digits = tuple(
        _renorm_digit_kernel.at(
            grid,
            TOP_P=top_p,
            PER_ROW=per_row,
            LEVEL=level,
            DIGIT=digit,
            COMPACT_LEVEL=compact_level,
            KEEPS=keeps,
            STEP=step,
            CHUNKS=next_power_of_2(num_chunks),
            FINISH_LANES=_finish_lanes(next_power_of_2(num_chunks)) if finishes and keeps else 0,
            BLOCK_V=block_v,
            BLOCK_R=max(block_v >> digit, 1),
            num_warps=num_warps,
        )  # fmt: skip
        for step, (level, keeps) in enumerate(steps)
    )
    write = _renorm_write_kernel.at(grid, BLOCK_V=block_v, num_warps=num_warps)
    scratch_columns = _STATE_SLOTS.value + num_chunks * ((1 << digit) + 2)
    return _Launches(shape, (*digits, write), chunk, num_chunks, scratch_columns, LaunchSequence(digits))


def _finish_lanes(chunks: int) -> int:
    """Lanes per chunk of the tile in which top-k's keeping launch finds tau from the kept values:
    :data:`_FINISH_TILE` over the chunks (both powers of two; 0: never)."""
    return _FINISH_TILE // chunks


def _compact_level(in_place: bool, digit: int, blocks_per_chunk: int) -> int:
    """The digit level at which the bracket's values are kept in ``out`` (-1: never; top-p's pass of
    that level keeps them, top-k's launch before it), later passes reading those: once the bracket is :data:`_COMPACT_AFTER_BITS` bits of the key deep (top-k's
    8-bit digits: the exponent), in chunks of at least :data:`_COMPACT_MIN_BLOCKS` blocks."""
    if in_place or blocks_per_chunk < _COMPACT_MIN_BLOCKS:
        return -1
    return cdiv(_COMPACT_AFTER_BITS, digit)


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
    # Split rows keep values in out unless it is probs. Meta tensors (launches captured for
    # compilation) hold no data: every pointer is 0.
    in_place = out is probs or out.data_ptr() == probs.data_ptr() != 0
    shape, launches, chunk, num_chunks, scratch_columns, digits = _launches(
        config, batch, vocab, top_p, param is not None, in_place
    )
    param_args = (param, 0 if param is None else param.stride()[0], param_value)
    if digits is None:
        launches[0](probs, *probs.stride(), out, *out.stride(), *param_args, batch, vocab)
        return
    write = launches[-1]
    scratch = torch.zeros(batch, scratch_columns, dtype=torch.int32, device=probs.device)
    digits(
        probs, *probs.stride(), out, *out.stride(), *param_args, scratch, scratch.stride()[0], batch, vocab, chunk,
        num_chunks,
    )  # fmt: skip
    write(
        probs, *probs.stride(), out, *out.stride(), scratch, scratch.stride()[0], batch, vocab, chunk,
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


#: The family's launchers of this module.
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("top_k_renorm_prob", _top_k_renorm_prob, tile="vocabulary"),
    Launcher("top_p_renorm_prob", _top_p_renorm_prob, tile="vocabulary"),
)
