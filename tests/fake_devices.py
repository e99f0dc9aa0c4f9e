"""Test devices: descriptors of vendors that are always usable and map to CPU tensors (imported
by the registry and op-object tests as ``fake_devices``)."""

from __future__ import annotations

from spec_hal.detect import Check, ProbeResult
from spec_hal.registry import DeviceDescriptor, Intent


def usable(name):
    def probe(facts):
        ok = Check(True, "test device")
        return ProbeResult(name, ok, ok, ok)

    return probe


def device(
    name, *, intents=None, priority=-10, device_type="cpu", default=Intent("portable", "test default")
):
    return DeviceDescriptor(
        name=name,
        device_type=device_type,
        priority=priority,
        probe=usable(name),
        dist_backend="gloo",
        intents=intents or {},
        default_intent=default,
    )
