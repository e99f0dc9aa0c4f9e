"""NVIDIA CUDA: detection through NVML (never the CUDA runtime, which would poison fork())."""

from ...kernels.triton.config import LaunchConfig
from ...registry import TRITON, Capabilities, DeviceDescriptor, Intent, register_device
from .detection import probe

#: Copies: 8 KiB tiles with 4 warps (the H200 sweep in docs/performance.md); the renormalisation
#: splits rows below 1024 of them (the H200 sweep in docs/bench/sweep-renorm-h200-6cc870c.json), and
#: top-k's keeping launch finds tau below 1024 rows only (docs/bench/notes.md, on the finisher).
TRITON_CONFIG = LaunchConfig(
    "hopper",
    num_warps=4,
    block=1024,
    copy_num_warps=4,
    copy_block_bytes=8192,
    row_programs=1024,
    row_finish_rows=1024,
)

DESCRIPTOR = DeviceDescriptor(
    name="cuda",
    device_type="cuda",
    priority=80,
    probe=probe,
    dist_backend="nccl",
    capabilities=Capabilities(graph_capture=True, triton=True, record_stream=True, needs_device_guard=True),
    runtime="spec_hal.devices.cuda.runtime:RUNTIME",
    families={"triton": TRITON_CONFIG},
    default_intent=Intent(TRITON, "the shared Triton family"),
    notes=(
        "launch configuration 'hopper' (TRITON_CONFIG in spec_hal/devices/cuda)",
        "detection reads NVML, never the CUDA runtime: fork() stays safe",
    ),
    priority_reason="after hip and musa, whose stacks also answer torch.cuda.*",
)


def register() -> None:
    """Register this vendor through the public API (the composition root calls it)."""
    register_device(DESCRIPTOR)
