"""NVIDIA CUDA: detection through NVML (never the CUDA runtime, which would poison fork())."""

from ...kernels.triton.config import LaunchConfig
from ...registry import TRITON, Capabilities, DeviceDescriptor, Intent, TorchDeviceModule
from .. import compiled_ahead_of_time
from .detection import probe

#: The chips ``spec-hal compile`` builds the Triton family for.
COMPILE_TARGETS = ("sm_80", "sm_90", "sm_100")

#: Copies: 8 KiB tiles with 4 warps (from an H200 sweep); the renormalisation splits rows longer
#: than registers hold into chunks of 4 of them, whatever the batch (a row's masses must not follow
#: the batch), and top-k's keeping launch finds tau below 1024 rows only
#: (docs/bench/history/notes.md, on the finisher). The walks over the vocabulary take 32 KiB tiles
#: with 16 warps; fast_topk and fast_sample keep the copy tile from 512 programs on (the H200 sweep
#: in docs/bench/history/sweep-vocab-tile-h200-bda43c5.json); the tree sampling verify keeps the
#: vocabulary tile at any batch (its sums over V follow the tile). With this vocabulary tile the
#: launchers that want one beat torch on the H200 (docs/performance.md): cuda intends them.
TRITON_CONFIG = LaunchConfig(
    "hopper",
    num_warps=4,
    block=1024,
    copy_num_warps=4,
    copy_block_bytes=8192,
    row_programs=1024,
    row_finish_rows=1024,
    vocab_block_bytes=32768,
    vocab_num_warps=16,
    copy_tile_programs=512,
)

DESCRIPTOR = DeviceDescriptor(
    name="cuda",
    device_type="cuda",
    priority=80,
    probe=probe,
    dist_backend="nccl",
    capabilities=Capabilities(graph_capture=True, triton=True, record_stream=True, needs_device_guard=True),
    runtime=TorchDeviceModule(),
    families={"triton": TRITON_CONFIG},
    default_intent=Intent(TRITON, "the shared Triton family"),
    notes=(
        "launch configuration 'hopper' (TRITON_CONFIG in spec_hal/devices/cuda)",
        "detection reads NVML, never the CUDA runtime: fork() stays safe",
    ),
    priority_reason="after hip and musa, whose stacks also answer torch.cuda.*",
    triton_backend="cuda",
    compile_targets=COMPILE_TARGETS,
    evidence=(
        "hardware: H200, H100 (tools/h200_run.sh)",
        compiled_ahead_of_time(COMPILE_TARGETS),
        "Triton interpreter",
    ),
    profiler_activity="CUDA",
)
