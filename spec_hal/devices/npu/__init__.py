"""Huawei Ascend NPU through torch_npu. The probe never imports torch_npu: without Ascend's CANN
libraries that import fails, and through torch's backend autoload so would ``import torch``."""

from ...detect import Check, HostFacts, ProbeResult, visible_from_env
from ...registry import PORTABLE, Capabilities, DeviceDescriptor, Intent


def probe(facts: HostFacts) -> ProbeResult:
    has_module = facts.find_module("torch_npu")
    installed = Check(
        has_module,
        "torch_npu importable (not imported by the probe)" if has_module else "torch_npu is not installed",
    )
    nodes = sorted(facts.glob("/dev/davinci[0-9]*"))
    present = Check(
        bool(nodes), f"device nodes {', '.join(nodes)}" if nodes else "no /dev/davinci* device node"
    )
    visible = visible_from_env(facts, ["ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES"], "NPU")
    return ProbeResult("npu", installed, present, visible)


DESCRIPTOR = DeviceDescriptor(
    name="npu",
    device_type="npu",
    priority=70,
    probe=probe,
    dist_backend="hccl",
    capabilities=Capabilities(graph_capture=True, triton=False, record_stream=True, needs_device_guard=True),
    runtime="spec_hal.devices.npu.runtime:RUNTIME",
    bindings="spec_hal.devices.npu.bindings",
    default_intent=Intent(
        PORTABLE, "portable torch written without host syncs; no torch_npu kernel bound yet"
    ),
    priority_reason="own device type 'npu'; no overlap with the CUDA family",
)
