"""Huawei Ascend NPU through torch_npu. The probe never imports torch_npu: without Ascend's CANN
libraries that import fails, and through torch's backend autoload so would ``import torch``
(set ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` on such machines)."""

from ...detect import Check, HostFacts, ProbeResult, visible_from_env
from ...registry import PORTABLE, Capabilities, DeviceDescriptor, Intent, TorchDeviceModule


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
    runtime=TorchDeviceModule(extension="torch_npu"),
    bindings="spec_hal.devices.npu.bindings:register",
    default_intent=Intent(
        PORTABLE,
        "portable torch: vectorised, no host sync, no data-dependent shape (no boolean-mask indexing, "
        "nonzero or .item(), which force Ascend to sync and recompile); no torch_npu kernel is bound yet",
    ),
    notes=(
        "the shared Triton family is not bound: triton-ascend is a separate backend with its own grid limits",
        "sglang's NPU cache_loc_update returns int32; spec_hal keeps the spec's int64 outputs on every vendor",
        "graph capture through torch.npu.NPUGraph (aclgraph); certify on hardware with tox -e npu",
        "never install torch_npu where CANN is absent: torch's backend autoload then breaks import torch",
    ),
    priority_reason="own device type 'npu'; no overlap with the CUDA family",
    evidence=("emulated: portable providers on CPU tensors",),
)
