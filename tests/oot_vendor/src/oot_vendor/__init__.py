"""A complete out-of-tree spec_hal vendor (the worked example of docs/vendors.md).

Device ``oot`` is emulated on the CPU: its tensors are CPU tensors, so when it is detected (its
probe reads OOT_VENDOR_PRESENT=1) CPU tensors run its providers. It overrides one op, fast_topk,
with its own provider ``oot_kernel``. OOT_VENDOR_WRONG=1 makes that provider deliberately wrong
(ascending instead of descending order) so the conformance suite can be seen to catch it.
"""

from __future__ import annotations

import os

import torch

import spec_hal
from spec_hal import Capabilities, Check, DeviceDescriptor, HostFacts, Intent, ProbeResult

SPEC_HAL_API_VERSION = 1

#: How many times the oot provider ran (the tests read it to prove the plugin's kernel was used).
calls = 0


def probe(facts: HostFacts) -> ProbeResult:
    installed = Check(True, "oot_vendor is installed")
    present = facts.env.get("OOT_VENDOR_PRESENT") == "1"
    return ProbeResult(
        "oot",
        installed,
        Check(present, "OOT_VENDOR_PRESENT=1" if present else "OOT_VENDOR_PRESENT is not 1"),
        Check(True, "no device mask"),
    )


def fast_topk_oot(
    values: torch.Tensor, k: int, dim: int, out_values: torch.Tensor, out_indices: torch.Tensor
) -> None:
    global calls
    calls += 1
    descending = os.environ.get("OOT_VENDOR_WRONG") != "1"
    sorted_values, sorted_indices = torch.sort(values, dim=dim, descending=descending, stable=True)
    out_values.copy_(sorted_values.narrow(dim, 0, k))
    out_indices.copy_(sorted_indices.narrow(dim, 0, k))


DESCRIPTOR = DeviceDescriptor(
    name="oot",
    device_type="cpu",
    priority=500,
    probe=probe,
    dist_backend="gloo",
    capabilities=Capabilities(),
    intents={"fast_topk": Intent("oot_kernel", "the vendor's own sort-based top-k")},
    priority_reason="an out-of-tree test vendor, emulated on the CPU",
)


def register() -> None:
    spec_hal.register_device(DESCRIPTOR)
    spec_hal.register_impl("fast_topk", "oot", "oot_kernel", fast_topk_oot)
