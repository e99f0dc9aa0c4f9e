"""Moore Threads MUSA through torch_musa (or the torchada compatibility layer); before CUDA."""

from ...detect import Check, HostFacts, ProbeResult, visible_from_env
from ...kernels.triton.config import LaunchConfig
from ...registry import PORTABLE, TRITON, Capabilities, DeviceDescriptor, Intent, TorchDeviceModule


def probe(facts: HostFacts) -> ProbeResult:
    found = [name for name in ("torch_musa", "torchada") if facts.find_module(name)]
    installed = Check(
        bool(found),
        f"{' and '.join(found)} importable" if found else "neither torch_musa nor torchada is installed",
    )
    nodes = sorted(facts.glob("/dev/mtgpu*")) or sorted(facts.glob("/dev/musa*"))
    present = Check(
        bool(nodes),
        f"device nodes {', '.join(nodes)}" if nodes else "no /dev/mtgpu* or /dev/musa* device node",
    )
    visible = visible_from_env(facts, ["MUSA_VISIBLE_DEVICES"], "GPU")
    return ProbeResult("musa", installed, present, visible)


TRITON_CONFIG = LaunchConfig("musa", num_warps=4, block=512, copy_num_warps=4, copy_block_bytes=4096)

DESCRIPTOR = DeviceDescriptor(
    name="musa",
    device_type="musa",
    priority=90,
    probe=probe,
    dist_backend="mccl",
    capabilities=Capabilities(graph_capture=True, triton=True, record_stream=True, needs_device_guard=True),
    runtime=TorchDeviceModule(extension="torch_musa"),
    families={"triton": TRITON_CONFIG},
    intents={
        "move_kv_cache": Intent(
            PORTABLE, "the pointer-table KV move (int64 -> pointer loads) is not certified on MUSA's Triton"
        ),
    },
    default_intent=Intent(TRITON, "the shared Triton family"),
    notes=(
        "launch configuration 'musa'",
        "not certified on MUSA hardware: the Triton family runs there only as far as MUSA's Triton supports it; per-op exceptions are intents",
    ),
    priority_reason="before cuda: torch_musa/torchada make torch.cuda.* calls work on MUSA GPUs",
    triton_backend="musa",
    evidence=("emulated: Triton interpreter with the musa configuration; portable providers on CPU tensors",),
)
