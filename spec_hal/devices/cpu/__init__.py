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
    priority_reason="always usable: chosen when no accelerator is",
    evidence=("hardware (every CI run)",),
)
