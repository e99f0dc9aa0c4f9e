"""CUDA probe: torch build metadata, NVML device count, CUDA_VISIBLE_DEVICES. No CUDA runtime call."""

from __future__ import annotations

import ctypes

from ...detect import Check, HostFacts, ProbeResult, visible_from_env


def nvml_device_count() -> int:
    """GPUs NVML reports, or -1 when NVML is unavailable. NVML does not create a CUDA context."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return -1
    try:
        if nvml.nvmlInit_v2() != 0:
            return -1
        count = ctypes.c_uint(0)
        status = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
        nvml.nvmlShutdown()
        return int(count.value) if status == 0 else -1
    except (AttributeError, OSError):
        return -1


def probe(facts: HostFacts) -> ProbeResult:
    cuda = facts.torch_version("cuda")
    hip = facts.torch_version("hip")
    if hip is not None:
        installed = Check(False, f"torch is a ROCm build (hip {hip}); that is the hip device")
    elif cuda is None:
        installed = Check(False, "torch is not a CUDA build (torch.version.cuda is None)")
    else:
        installed = Check(True, f"torch built for CUDA {cuda}")
    count = nvml_device_count()
    if count > 0:
        present = Check(True, f"NVML reports {count} GPU(s)")
    elif count == 0:
        present = Check(False, "NVML reports no GPU")
    else:
        nodes = [n for n in facts.glob("/dev/nvidia[0-9]*")]
        present = (
            Check(True, f"NVML unavailable; device nodes {', '.join(sorted(nodes))}")
            if nodes
            else Check(False, "no NVML library and no /dev/nvidia* device node")
        )
    visible = visible_from_env(facts, ["CUDA_VISIBLE_DEVICES"], "GPU")
    return ProbeResult("cuda", installed, present, visible)
