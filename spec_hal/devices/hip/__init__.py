"""AMD ROCm (HIP): a ROCm build of torch; tensors say ``cuda``, so HIP is checked before CUDA."""

from ...detect import Check, HostFacts, ProbeResult, visible_from_env
from ...kernels.triton.config import LaunchConfig
from ...registry import TRITON, Capabilities, DeviceDescriptor, Intent, TorchDeviceModule
from .. import compiled_ahead_of_time


def probe(facts: HostFacts) -> ProbeResult:
    hip = facts.torch_version("hip")
    installed = Check(
        hip is not None,
        f"torch built for ROCm {hip}" if hip else "torch is not a ROCm build (torch.version.hip is None)",
    )
    gpu_ids = [
        text
        for path in facts.glob("/sys/class/kfd/kfd/topology/nodes/*/gpu_id")
        if (text := facts.read_text(path)) and text.strip() not in ("", "0")
    ]
    if gpu_ids:
        present = Check(True, f"KFD topology lists {len(gpu_ids)} GPU node(s)")
    else:
        present = Check(False, "no GPU node in /sys/class/kfd/kfd/topology (amdgpu driver not loaded)")
    visible = visible_from_env(
        facts, ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"], "GPU"
    )
    return ProbeResult("hip", installed, present, visible)


#: Wavefronts of 64 lanes (CDNA); block and warp counts for MI200/MI300, untuned without hardware.
#: A row-walking program keeps 512 threads (8 wavefronts), as many as NVIDIA's 16 warps of 32.
TRITON_CONFIG = LaunchConfig(
    "cdna", num_warps=4, warp_size=64, block=1024, copy_num_warps=8, copy_block_bytes=8192, row_num_warps=8
)

#: The chips ``spec-hal compile`` builds the Triton family for (CDNA2 to CDNA4).
COMPILE_TARGETS = ("gfx90a", "gfx942", "gfx950")

DESCRIPTOR = DeviceDescriptor(
    name="hip",
    device_type="cuda",
    priority=100,
    probe=probe,
    dist_backend="nccl",  # the name torch.distributed accepts on ROCm builds (RCCL behind it)
    capabilities=Capabilities(graph_capture=True, triton=True, record_stream=True, needs_device_guard=True),
    runtime=TorchDeviceModule(),  # ROCm builds of torch reach HIP through the 'cuda' device module
    families={"triton": TRITON_CONFIG},
    default_intent=Intent(TRITON, "the shared Triton family"),
    notes=(
        "launch configuration 'cdna': wavefront 64, block and warp counts for MI200/MI300",
        "graph capture through hipGraph (torch.cuda.graphs on ROCm builds)",
        "tensors say device type 'cuda': the registry maps them to hip on ROCm builds of torch",
    ),
    priority_reason="first: ROCm answers torch.cuda.* and its tensors say 'cuda'",
    triton_backend="hip",
    compile_targets=COMPILE_TARGETS,
    evidence=(
        compiled_ahead_of_time(COMPILE_TARGETS),
        "emulated: Triton interpreter with the cdna configuration; portable providers on CPU tensors",
    ),
    profiler_activity="CUDA",  # ROCm builds of torch record HIP kernels under this activity too
)
