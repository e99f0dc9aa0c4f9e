"""AMD ROCm (HIP): a ROCm build of torch; tensors say ``cuda``, so HIP is checked before CUDA."""

from ...detect import Check, HostFacts, ProbeResult, visible_from_env
from ...registry import PORTABLE, Capabilities, DeviceDescriptor, Intent


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


DESCRIPTOR = DeviceDescriptor(
    name="hip",
    device_type="cuda",
    priority=100,
    probe=probe,
    dist_backend="rccl",
    capabilities=Capabilities(graph_capture=True, triton=True, record_stream=True, needs_device_guard=True),
    runtime="spec_hal.devices.hip.runtime:RUNTIME",
    bindings="spec_hal.devices.hip.bindings",
    intents={"fast_topk": Intent(PORTABLE, "torch.topk / torch.max are already one launch")},
    default_intent=Intent(PORTABLE, "the shared Triton family does not cover this op yet"),
    priority_reason="first: ROCm answers torch.cuda.* and its tensors say 'cuda'",
)
