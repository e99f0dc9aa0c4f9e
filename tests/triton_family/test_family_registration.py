"""Every vendor that declares Triton registers the same Triton providers (one kernel copy)."""

from triton_family.interpreted import TRITON_VENDORS

from spec_hal import registry


def test_every_triton_vendor_registers_the_same_providers():
    registered = {}
    for vendor in TRITON_VENDORS:
        descriptor = registry.device(vendor)
        assert descriptor.capabilities.triton
        registry._ensure_bindings(descriptor)
        registered[vendor] = sorted(
            op
            for op in registry.ops()
            if any(i.provider == "triton" for i in registry.implementations(op, vendor))
        )
    assert registered["cuda"], "no Triton provider registered"
    assert all(ops == registered["cuda"] for ops in registered.values())
