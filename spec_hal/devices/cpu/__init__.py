"""The CPU package: always present; binds CPU providers per op family (``bindings``)."""

from ...detect import Check, HostFacts, ProbeResult
from ...registry import PORTABLE, Capabilities, DeviceDescriptor, Intent


def probe(facts: HostFacts) -> ProbeResult:
    ok = Check(True, "the CPU is always available")
    return ProbeResult("cpu", ok, ok, ok)


DESCRIPTOR = DeviceDescriptor(
    name="cpu",
    device_type="cpu",
    priority=0,
    probe=probe,
    dist_backend="gloo",
    capabilities=Capabilities(),
    bindings="spec_hal.devices.cpu.bindings:register",
    default_intent=Intent(
        PORTABLE, "the portable reference is vectorised torch: already the CPU implementation"
    ),
    intents={
        # Ragged index built once on the host with repeat_interleave (~10 ops instead of ~30).
        **dict.fromkeys(
            (
                "assign_extend_cache_locs",
                "assign_req_to_token_pool",
                "fill_accept_out_cache_loc",
                "get_target_cache_loc",
                "filter_finished_cache_loc",
            ),
            Intent("cpu", "ragged index built once on the host (the data is on the host)"),
        ),
        "generate_draft_decode_kv_indices": Intent("cpu", "fills only the used columns of each KV-index row"),
        "top_k_renorm_prob": Intent("cpu", "a top-k of the batch's largest k instead of a sort of every row"),
        "keyed_uniform": Intent("cpu", "Philox in numpy's unsigned words: no 16-bit limbs"),
    },
    priority_reason="always usable: chosen when no accelerator is",
    evidence=("hardware (every CI run)",),
)
