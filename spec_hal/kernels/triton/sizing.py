"""How the Triton family sizes its launches: programs, warps, tiles and scan chunks from the shapes
and the vendor's :class:`~spec_hal.kernels.triton.config.LaunchConfig`. Host-side only, one place,
so that tuning a heuristic never means hunting through the kernel modules. The functions are pure
and run on every launch: they are cached by their arguments."""

from __future__ import annotations

import functools

from .config import LaunchConfig
from .device_math import KEYED_GROUP
from .launch import cdiv, next_power_of_2

# --------------------------------------------------------------------------------------------------
# Latency-bound launches (index plumbing, tree walks)

#: Programs a latency-bound launch aims at (about half the H200's SMs). Beyond, requests (or entries)
#: are packed several per program: every program of a ragged op sums all earlier lengths itself, so
#: more programs would mostly multiply that L2 traffic.
LATENCY_PROGRAMS = 64
#: Lanes per thread of a latency-bound tile (sets its warps: a few lanes each, no idle warps).
LATENCY_LANES_PER_THREAD = 4
#: Most lanes per thread of one scan chunk (registers: one chunk of int64 lengths).
SCAN_LANES_PER_THREAD = 16
#: Lanes per thread of a bandwidth-bound copy tile.
COPY_LANES_PER_THREAD = 8


def pow2(n: int) -> int:
    return next_power_of_2(max(n, 1))


def warps(lanes: int, lanes_per_thread: int, warp_size: int, most: int) -> int:
    """Warps (a power of two, 1 .. most) giving each thread about ``lanes_per_thread`` of ``lanes``."""
    wanted = max(lanes // (lanes_per_thread * warp_size), 1)
    return min(1 << (wanted.bit_length() - 1), most)


@functools.lru_cache(maxsize=1024)
def latency_warps(config: LaunchConfig, lanes: int) -> int:
    return warps(lanes, LATENCY_LANES_PER_THREAD, config.warp_size, config.num_warps)


@functools.lru_cache(maxsize=1024)
def scanning_warps(config: LaunchConfig, lanes: int, count: int) -> int:
    """Warps of a latency-bound program of ``lanes`` lanes that also scans ``count`` lengths."""
    scan_warps = warps(count, SCAN_LANES_PER_THREAD, config.warp_size, config.num_warps)
    return max(latency_warps(config, lanes), scan_warps)


@functools.lru_cache(maxsize=1024)
def copy_warps(config: LaunchConfig, lanes: int) -> int:
    return warps(lanes, COPY_LANES_PER_THREAD, config.warp_size, config.copy_num_warps)


@functools.lru_cache(maxsize=1024)
def rows_per_program(count: int, lanes_per_row: int, config: LaunchConfig) -> int:
    """Requests (or entries) per program of a latency-bound launch over ``count`` of them, each a row
    of ``lanes_per_row`` lanes (powers of two): at least a warp's lanes, at most ``config.block``."""
    rows = max(pow2(cdiv(count, LATENCY_PROGRAMS)), config.warp_size // lanes_per_row)
    return max(min(rows, config.block // lanes_per_row), 1)


@functools.lru_cache(maxsize=1024)
def scan_shape(count: int, config: LaunchConfig, num_warps: int) -> tuple[int, int]:
    """(SCAN_BLOCK, SCAN_CHUNKS) of :func:`_exclusive_offsets` over ``count`` entries: chunks of at
    most ``config.block`` entries and a few per thread, as many as cover ``count``."""
    most = min(config.block, SCAN_LANES_PER_THREAD * config.warp_size * num_warps)
    block = min(pow2(count), pow2(most))
    return block, max(cdiv(count, block), 1)


def scan_args(count: int, config: LaunchConfig, num_warps: int) -> dict[str, int]:
    block, chunks = scan_shape(count, config, num_warps)
    return {"SCAN_BLOCK": block, "SCAN_CHUNKS": chunks}


@functools.lru_cache(maxsize=1024)
def request_warps(config: LaunchConfig, tile_elements: int) -> int:
    """Warps of a one-request program whose largest register tile has ``tile_elements`` lanes: one
    warp up to 16 lanes per thread (its reductions stay in warp shuffles), more for larger trees."""
    return max(1, min(config.num_warps, tile_elements // (16 * config.warp_size)))


# --------------------------------------------------------------------------------------------------
# Passes over the vocabulary


@functools.lru_cache(maxsize=1024)
def walk_tile(config: LaunchConfig, vocab: int, copy_tile: bool = False) -> tuple[int, int]:
    """(fp32 lanes per step, warps) of a program walking a row of ``vocab``: the vendor's vocabulary
    tile (``config.vocab_block_bytes``), or its copy tile where it sets none or ``copy_tile``. Its
    warps: the tile's, fewer where a thread would get under 16 bytes (one warp for small
    vocabularies: the walk is then all that counts)."""
    if config.vocab_block_bytes and not copy_tile:
        block_bytes, most = config.vocab_block_bytes, config.vocab_num_warps or config.copy_num_warps
    else:
        block_bytes, most = config.copy_block_bytes, config.copy_num_warps
    # At least a Philox evaluation's four lanes: the keyed races draw a tile's noise four lanes at once.
    block_v = max(min(next_power_of_2(block_bytes // 4), next_power_of_2(vocab)), KEYED_GROUP)
    return block_v, max(1, min(most, block_v // (4 * config.warp_size)))


# --------------------------------------------------------------------------------------------------
# The KV move

#: Lanes of a chunk (whole segments moved from registers); a longer segment is held or staged.
#: segment_lens=None with more than MAX_LANES lanes is the two-launch move.
MIN_LANES = 16
MAX_LANES = 64
#: Longest segment held in registers (in column slices) rather than staged through scratch.
MAX_HELD_LANES = 512
#: Blocks (tiles of buffers) per program: at least two, the second loaded while the first is
#: stored; more, which spreads a program's dependent index loads over more bytes, once a launch has
#: about TARGET_PROGRAMS programs (several per SM); at most MAX_BLOCKS, so that the last
#: programs of a large move are short (a short tail).
MIN_BLOCKS = 2
MAX_BLOCKS = 8
TARGET_PROGRAMS = 2048
#: Largest scratch buffer of the two-launch move of one large segment (buffers are moved in groups).
MAX_STAGE_BYTES = 256 << 20
VECTOR_BYTES = 16


def pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)
