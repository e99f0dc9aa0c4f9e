"""Launch configurations: the only thing a vendor chooses about the shared Triton kernels."""

from __future__ import annotations

from dataclasses import dataclass


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
        max_grid: largest grid dimension the device accepts (programs loop beyond it).
    """

    name: str
    num_warps: int = 4
    warp_size: int = 32
    block: int = 1024
    copy_num_warps: int = 8
    copy_block_bytes: int = 4096
    max_grid: int = 65535


#: Copies: 8 KiB tiles with 4 warps reached 95% of the H200's copy bandwidth in the mamba state
#: scatter and the KV move, where 8 warps reached 63-83% (``tools/config_sweep.py``, 2026-11-29).
HOPPER = LaunchConfig("hopper", num_warps=4, block=1024, copy_num_warps=4, copy_block_bytes=8192)
CDNA = LaunchConfig("cdna", num_warps=4, warp_size=64, block=1024, copy_num_warps=8, copy_block_bytes=8192)
MUSA = LaunchConfig("musa", num_warps=4, block=512, copy_num_warps=4, copy_block_bytes=4096)
XE = LaunchConfig("xe", num_warps=8, block=512, copy_num_warps=8, copy_block_bytes=4096)
#: Small blocks keep the CPU interpreter (TRITON_INTERPRET=1) fast in emulated runs.
INTERPRETER = LaunchConfig("interpreter", num_warps=1, block=64, copy_num_warps=1, copy_block_bytes=256)
