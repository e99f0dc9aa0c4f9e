"""Intel XPU through native ``torch.xpu``; intel-extension-for-pytorch is optional (it pins one torch)."""

import torch

from ...detect import Check, HostFacts, ProbeResult, visible_from_env
from ...kernels.triton.config import LaunchConfig
from ...registry import TRITON, Capabilities, DeviceDescriptor, Intent, TorchDeviceModule


def _xpu_available() -> bool:
    # torch.xpu.is_available() counts devices through SYCL; it does not run torch's lazy XPU init.
    return bool(torch.xpu.is_available())


def probe(facts: HostFacts) -> ProbeResult:
    xpu = facts.torch_version("xpu")
    ipex = facts.find_module("intel_extension_for_pytorch")
    if xpu is not None:
        installed = Check(True, f"torch built with XPU support ({xpu})")
    elif ipex:
        installed = Check(True, "intel_extension_for_pytorch importable")
    else:
        installed = Check(False, "torch has no XPU build (torch.version.xpu is None) and no IPEX")
    if not installed.ok:
        present = Check(False, "not probed: no XPU software")
    elif _xpu_available():
        present = Check(True, "torch.xpu.is_available() is True")
    else:
        present = Check(False, "torch.xpu.is_available() is False")
    visible = visible_from_env(facts, ["ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR"], "XPU")
    return ProbeResult("xpu", installed, present, visible)


TRITON_CONFIG = LaunchConfig("xe", num_warps=8, block=512, copy_num_warps=8, copy_block_bytes=4096)

DESCRIPTOR = DeviceDescriptor(
    name="xpu",
    device_type="xpu",
    priority=60,
    probe=probe,
    dist_backend="xccl",
    capabilities=Capabilities(
        graph_capture=hasattr(torch.xpu, "XPUGraph"), triton=True, record_stream=True, needs_device_guard=True
    ),
    runtime=TorchDeviceModule(),
    families={"triton": TRITON_CONFIG},
    default_intent=Intent(TRITON, "the shared Triton family"),
    priority_reason="own device type 'xpu'; no overlap with the CUDA family",
    notes=(
        "launch configuration 'xe'",
        "graph capture only where the running torch has torch.xpu.XPUGraph",
        "intel-extension-for-pytorch is optional: it pins one torch version",
    ),
    triton_backend="xpu",
    evidence=("emulated: Triton interpreter with the xe configuration; portable providers on CPU tensors",),
    profiler_activity="XPU",
)
