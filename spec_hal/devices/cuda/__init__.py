"""NVIDIA CUDA: detection through NVML (never the CUDA runtime, which would poison fork())."""

from ...registry import PORTABLE, Capabilities, DeviceDescriptor, Intent
from .detection import probe

DESCRIPTOR = DeviceDescriptor(
    name="cuda",
    device_type="cuda",
    priority=80,
    probe=probe,
    dist_backend="nccl",
    capabilities=Capabilities(graph_capture=True, triton=True, record_stream=True, needs_device_guard=True),
    runtime="spec_hal.devices.cuda.runtime:RUNTIME",
    bindings="spec_hal.devices.cuda.bindings",
    intents={
        "fast_topk": Intent(PORTABLE, "torch.topk / torch.max are already one launch"),
    },
    default_intent=Intent(PORTABLE, "the shared Triton family does not cover this op yet"),
    priority_reason="after hip and musa, whose stacks also answer torch.cuda.*",
)
