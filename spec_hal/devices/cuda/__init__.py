"""NVIDIA CUDA: detection through NVML (never the CUDA runtime, which would poison fork())."""

from ...registry import Capabilities, DeviceDescriptor
from .._triton_intents import PORTABLE_ON_TRITON_VENDORS, TRITON_DEFAULT
from .detection import probe

DESCRIPTOR = DeviceDescriptor(
    name="cuda",
    device_type="cuda",
    priority=80,
    probe=probe,
    dist_backend="nccl",
    capabilities=Capabilities(graph_capture=True, triton=True, record_stream=True, needs_device_guard=True),
    runtime="spec_hal.devices.cuda.runtime:RUNTIME",
    bindings="spec_hal.devices.cuda.bindings:register",
    intents=PORTABLE_ON_TRITON_VENDORS,
    default_intent=TRITON_DEFAULT,
    notes=(
        "launch configuration 'hopper' (spec_hal/kernels/triton/config.py)",
        "detection reads NVML, never the CUDA runtime: fork() stays safe",
    ),
    priority_reason="after hip and musa, whose stacks also answer torch.cuda.*",
)
