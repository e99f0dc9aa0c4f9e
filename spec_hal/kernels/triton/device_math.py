"""Device arithmetic shared by the family's kernels (``@triton.jit`` helpers)."""

import torch
import triton
import triton.language as tl  # noqa: F401  (the interpreter looks tl up in the jit function's globals)


@triton.jit
def floor_div(numerator, divisor):
    """Floor division by a positive ``divisor`` for any sign of ``numerator`` (torch's rounding):
    Triton's ``//`` truncates toward zero (like C), one above the floor for an inexact negative
    quotient. One division (by a constant where ``divisor`` is constexpr)."""
    quotient = numerator // divisor
    return quotient - (quotient * divisor > numerator).to(quotient.dtype)


@triton.jit
def chunk_lanes(chunk_id, chunk, n):
    """(first lane, one past the last) of chunk ``chunk_id`` of a row of ``n`` lanes cut into chunks
    of ``chunk`` lanes (the last one may be shorter)."""
    begin = chunk_id * chunk
    return begin, tl.minimum(begin + chunk, n)


# --------------------------------------------------------------------------------------------------
# Keyed draws: Philox4x32-10 (the op contract of ``keyed_uniform`` gives the layout of the key)

_PHILOX_M0 = tl.constexpr(0xD2511F53)
_PHILOX_M1 = tl.constexpr(0xCD9E8D57)
_PHILOX_W0 = tl.constexpr(0x9E3779B9)
_PHILOX_W1 = tl.constexpr(0xBB67AE85)
#: Lanes one Philox evaluation draws: its four 32-bit words.
KEYED_GROUP = 4


@triton.jit
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Random123's Philox4x32 with 10 rounds over uint32 counters (any shape) and a uint32 key."""
    for _ in tl.static_range(10):
        high0 = tl.umulhi(c0, _PHILOX_M0)
        low0 = c0 * _PHILOX_M0
        high1 = tl.umulhi(c2, _PHILOX_M1)
        low1 = c2 * _PHILOX_M1
        c0, c1, c2, c3 = high1 ^ c1 ^ k0, low1, high0 ^ c3 ^ k1, low0
        k0 = k0 + _PHILOX_W0
        k1 = k1 + _PHILOX_W1
    return c0, c1, c2, c3


@triton.jit
def keyed_row(seeds_ptr, seeds_stride, positions_ptr, positions_stride, row, step, domain):
    """Row ``row``'s key: (seed low, seed high, counter words 1, 2 and 3), uint32 each."""
    seed = tl.load(seeds_ptr + row * seeds_stride).to(tl.uint64, bitcast=True)
    position = tl.load(positions_ptr + row * positions_stride).to(tl.uint64, bitcast=True)
    step64 = tl.zeros((), tl.uint64) + step
    return (
        (seed & 0xFFFFFFFF).to(tl.uint32),
        (seed >> 32).to(tl.uint32),
        (position & 0xFFFFFFFF).to(tl.uint32),
        ((position >> 32) | (step64 << 16)).to(tl.uint32),
        (tl.zeros((), tl.uint32) + domain).to(tl.uint32),
    )


@triton.jit
def keyed_uniform_block(key_low, key_high, counter1, counter2, counter3, start, BLOCK: tl.constexpr):
    """float32 uniforms of lanes ``start + [0, BLOCK)`` of a row's key (``start`` a multiple of 4,
    ``BLOCK`` at least 4): one Philox evaluation per four lanes, its words interleaved into them."""
    groups = (start // 4 + tl.arange(0, BLOCK // 4)).to(tl.uint32)
    zero = tl.zeros([BLOCK // 4], tl.uint32)
    w0, w1, w2, w3 = philox4x32_10(
        groups, zero + counter1, zero + counter2, zero + counter3, zero + key_low, zero + key_high
    )
    words = tl.interleave(tl.interleave(w0, w2), tl.interleave(w1, w3))
    return ((words >> 9) * 2 + 1).to(tl.float32) * 5.9604644775390625e-08  # 2**-24


# --------------------------------------------------------------------------------------------------
# The race over a vocabulary row (vocab.py's top-k walks and softmax.py's sampling): keys that
# order like floats, the best of a row, the race's noise

#: Exp(1) noise is clamped to this before dividing (the reference's ``clamp_min``).
FLOAT32_TINY = tl.constexpr(torch.finfo(torch.float32).tiny)
KEY32_MIN = tl.constexpr(-(2**31))
KEY32_MAX = tl.constexpr(2**31 - 1)
KEY64_MIN = tl.constexpr(-(2**63))
KEY64_MAX = tl.constexpr(2**63 - 1)
#: Above every lane index: a lane that holds no best entry.
NO_INDEX = tl.constexpr(2**31 - 1)


@triton.jit
def ordered_key(x, WIDE: tl.constexpr):
    """An integer ordering like the float ``x`` (fp32, or fp64 when ``WIDE``): negative floats have
    their magnitude bits flipped; NaN is the largest key, -0 and +0 are both 0."""
    if WIDE:
        bits = x.to(tl.int64, bitcast=True)
        key = tl.where(bits < 0, bits ^ KEY64_MAX, bits)
        key = tl.where(x != x, KEY64_MAX, key)
    else:
        bits = x.to(tl.int32, bitcast=True)
        key = tl.where(bits < 0, bits ^ KEY32_MAX, bits)
        key = tl.where(x != x, KEY32_MAX, key)
    return tl.where(x == 0, 0, key)


@triton.jit
def first_best(best_key, best_index):
    """The lowest index holding the largest key, over lanes each holding its best key and index."""
    top = tl.max(best_key, 0)
    return tl.min(tl.where(best_key == top, best_index, NO_INDEX), 0)


@triton.jit
def race_noise(
    noise_ptr, row_offset, noise_stride, key, offsets, inside, start, KEYED: tl.constexpr, BLOCK: tl.constexpr
):  # fmt: skip
    """Exp(1) noise of lanes ``start + [0, BLOCK)``: loaded from the row's noise (``row_offset`` into
    the noise), or (``KEYED``) the keyed draws ``-log(u)`` of the row's ``key`` (:func:`keyed_row`),
    computed here."""
    if KEYED:
        key_low, key_high, counter1, counter2, counter3 = key
        noise = -tl.log(keyed_uniform_block(key_low, key_high, counter1, counter2, counter3, start, BLOCK))
    else:
        noise = tl.load(noise_ptr + row_offset + offsets.to(tl.int64) * noise_stride, mask=inside, other=1.0)
    return noise


@triton.jit
def row_key(seeds_ptr, positions_ptr, row, step, KEYED: tl.constexpr):
    """The keyed draws' key of row ``row`` (contiguous ``[B]`` seeds and positions), or placeholders."""
    if KEYED:
        key = keyed_row(seeds_ptr, 1, positions_ptr, 1, row, step, 1)  # DRAFT_PROPOSAL
    else:
        zero = tl.zeros((), tl.uint32)
        key = (zero, zero, zero, zero, zero)
    return key


@triton.jit
def single_best(keys, ids, TOP: tl.constexpr):
    """The best of lanes (keys, ids) as a ``[TOP]`` set (``TOP == 1``): the largest key, its lowest id."""
    top_keys = tl.zeros([TOP], keys.dtype) + tl.max(keys, 0)
    return top_keys, tl.zeros([TOP], tl.int32) + first_best(keys, ids)
