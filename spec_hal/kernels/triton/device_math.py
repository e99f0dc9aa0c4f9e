"""Device arithmetic shared by the family's kernels (``@triton.jit`` helpers)."""

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
