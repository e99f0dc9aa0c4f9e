"""Every vendor that declares Triton registers the same Triton providers (one kernel copy)."""

from triton_family.interpreted import TRITON_VENDORS

from spec_hal import registry


def test_every_triton_vendor_registers_the_same_providers():
    registered = {}
    for vendor in TRITON_VENDORS:
        descriptor = registry.device(vendor)
        assert descriptor.capabilities.triton
        registry.REGISTRY.load_bindings(descriptor)
        registered[vendor] = sorted(
            op
            for op in registry.ops()
            if any(i.provider == "triton" for i in registry.implementations(op, vendor))
        )
    assert registered["cuda"], "no Triton provider registered"
    assert all(ops == registered["cuda"] for ops in registered.values())


def test_the_family_coverage_is_its_launcher_table():
    from spec_hal.kernels.triton import family

    for vendor in TRITON_VENDORS:
        descriptor = registry.REGISTRY.load_bindings(vendor)
        with_triton = {
            op
            for op in registry.ops()
            if any(i.provider == "triton" for i in registry.implementations(op, vendor))
        }
        assert with_triton == set(family.LAUNCHERS)
        for op in (set(registry.ops()) - with_triton) | (set(family.LEFT_TO_TORCH) - set(descriptor.intents)):
            intent = registry.intent_of(descriptor, op)
            assert intent.provider == "portable" and intent.reason, (vendor, op)
        for op in family.LAUNCHERS:
            if op not in descriptor.intents:  # a vendor's own exception (MUSA's KV move) wins
                expected = "portable" if op in family.LEFT_TO_TORCH else "triton"
                assert registry.intent_of(descriptor, op).provider == expected, (vendor, op)


def test_only_a_vendor_with_a_vocabulary_tile_intends_the_vocabulary_walks():
    from spec_hal.kernels.triton import family

    walks = ("fast_sample", "renorm_draft_probs", "sample_draft_proposal")
    assert set(walks) <= set(family.LEFT_TO_TORCH)
    intended = {}
    for vendor in TRITON_VENDORS:
        descriptor = registry.REGISTRY.load_bindings(vendor)
        expected = "triton" if descriptor.families["triton"].vocab_block_bytes else "portable"
        intended[vendor] = expected
        assert {registry.intent_of(descriptor, op).provider for op in walks} == {expected}, vendor
    assert intended["cuda"] == "triton"
