"""Launch configurations: the only thing a vendor chooses about the shared Triton kernels (each
vendor package holds its own; the interpreter's lives here)."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class LaunchConfig:
    """Per-vendor launch parameters the Triton family reads (kernels are never forked per vendor).

    Attributes:
        name: label shown by ``spec-hal info`` and the benchmarks.
        num_warps: warps per program for latency-bound kernels.
        warp_size: threads per warp (32 on NVIDIA/MUSA/Intel, 64 on AMD CDNA wavefronts).
        block: elements per program for 1-D index kernels (a power of two).
        copy_num_warps: warps per program for bandwidth-bound copies (KV move, state scatter).
        copy_block_bytes: bytes per program per row tile of bandwidth-bound copies.
        row_num_warps: warps per program of kernels where one program holds a whole row in
            registers (the top-k/top-p renormalisation): few such programs run at once, so each
            takes the most warps and loads in flight it can.
        row_programs: programs that fill the device: kernels that split each row into chunks (one
            program each) make about this many.
        row_resident_lanes: the most lanes of the register tile in which such a kernel holds a
            whole row in one program (read once, every pass over registers, written from there)
            with ``row_num_warps`` warps; the tile is the row rounded up to a power of two, and
            longer rows are split into chunks. 0: never.
        row_chunk_blocks: copy tiles per chunk (one program each) of the rows longer than
            ``row_resident_lanes``. A function of nothing but the row: a row's masses are added chunk
            by chunk, so a chunking that followed the batch would change a row's last bits with the
            batch around it. From ``_COMPACT_MIN_BLOCKS`` (4) tiles, later passes read the chunk's
            kept values alone.
        row_finish_rows: the batch from which top-k's split rows no longer find tau in the launch
            that keeps their bracket's values (its last program of each row bisects the kept
            values alone, which pays while few rows leave the device idle; with many rows those
            bisections outlast the digit launches they spare). 0: never; the default: at any batch.
        split_row_lanes: the shortest row that the walks over a row split into chunks, one program
            each, where the rows are fewer than ``row_programs``: ``fast_topk`` and ``fast_sample``
            and the softmax of ``sample_draft_proposal`` (at least two chunks a row), and of
            ``renorm_draft_probs`` (at least eight: fewer than about ``row_programs / 8`` rows).
            The split costs another launch (two for the sampling softmax) and a scratch tensor of
            host time; a shorter row's walk by one program takes less device time than that saves.
        vocab_block_bytes: bytes per program per step of the walks over a row of the vocabulary
            (``fast_topk``, ``fast_sample``, ``renorm_draft_probs``, ``sample_draft_proposal``, and
            the pass over V of the tree and chain speculative sampling).
            A program walking a row waits on each step's loads before the next, so where programs
            are few (each row one) a wider tile than the copies' keeps more bytes in flight. 0: the
            copy tile.
        vocab_num_warps: warps per program of that tile (0: ``copy_num_warps``).
        copy_tile_programs: the fewest programs (in the copy tile: rows, or chunks of split rows)
            from which the walks that do more than stream at each step (``fast_topk`` and
            ``fast_sample``, which reduce their best set) walk in the copy tile all the same: that
            work costs more over the wider tile, and that many programs keep memory busy with the
            narrower one. Their keys are exact, so either tile gives the same ids. The default:
            never.
        max_grid: largest grid dimension the device accepts (programs loop beyond it).
    """

    name: str
    num_warps: int = 4
    warp_size: int = 32
    block: int = 1024
    copy_num_warps: int = 8
    copy_block_bytes: int = 4096
    row_num_warps: int = 16
    row_programs: int = 256
    row_resident_lanes: int = 32768
    row_chunk_blocks: int = 4
    row_finish_rows: int = 1 << 30
    split_row_lanes: int = 65536
    vocab_block_bytes: int = 0
    vocab_num_warps: int = 0
    copy_tile_programs: int = 1 << 30
    max_grid: int = 65535
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Launch sizing caches by configuration on every launch: hash the fields once.
        object.__setattr__(
            self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
        )
        object.__setattr__(self, "_hash_call", self._hash.__int__)

    # hash() reads the class's __hash__ and calls what it gives with no argument: here the stored
    # hash's own __int__, found and called by C code alone. A ``def __hash__`` would run a Python
    # frame in this module on every launch.
    __hash__ = property(operator.attrgetter("_hash_call"))  # type: ignore[assignment]


#: Small blocks keep the CPU interpreter (TRITON_INTERPRET=1) fast in emulated runs.
INTERPRETER = LaunchConfig(
    "interpreter",
    num_warps=1,
    block=64,
    copy_num_warps=1,
    copy_block_bytes=256,
    row_num_warps=1,
    row_programs=8,
    row_resident_lanes=256,
    split_row_lanes=256,
)
