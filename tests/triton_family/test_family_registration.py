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


def test_the_family_coverage_is_its_launcher_records():
    from spec_hal.kernels.triton import family

    covered = {launcher.op for launcher in family.LAUNCHERS}
    assert len(covered) == len(family.LAUNCHERS), "an op with two launcher records"
    for vendor in TRITON_VENDORS:
        descriptor = registry.REGISTRY.load_bindings(vendor)
        config = descriptor.families["triton"]
        with_triton = {
            op
            for op in registry.ops()
            if any(i.provider == "triton" for i in registry.implementations(op, vendor))
        }
        assert with_triton == covered
        for op in set(registry.ops()) - covered:
            intent = registry.intent_of(descriptor, op)
            assert intent.provider == "portable" and intent.reason, (vendor, op)
        for launcher in family.LAUNCHERS:
            if launcher.op not in descriptor.intents:  # a vendor's own exception (MUSA's KV move) wins
                intended = not launcher.wants_vocabulary_tile or config.vocab_block_bytes
                intent = registry.intent_of(descriptor, launcher.op)
                assert intent.provider == ("triton" if intended else "portable"), (vendor, launcher.op)
                assert intent.reason, (vendor, launcher.op)


def test_an_op_without_a_kernel_states_why_torch_serves_it():
    """The op object's ``portable_reason`` is the intent's reason on every vendor binding the family
    (the family's own words where the op gives none)."""
    from spec_hal import ops
    from spec_hal.kernels.triton import family

    covered = {launcher.op for launcher in family.LAUNCHERS}
    with_reason = {name for name, op in registry.ops().items() if getattr(op, "portable_reason", None)}
    assert with_reason and not with_reason & covered
    for vendor in TRITON_VENDORS:
        descriptor = registry.REGISTRY.load_bindings(vendor)
        for name in with_reason:
            assert registry.intent_of(descriptor, name).reason == getattr(ops, name).portable_reason


def test_only_a_vendor_with_a_vocabulary_tile_intends_the_walks_that_want_one():
    from spec_hal.kernels.triton import family

    walks = [launcher.op for launcher in family.LAUNCHERS if launcher.wants_vocabulary_tile]
    assert {"fast_sample", "renorm_draft_probs", "sample_draft_proposal"} <= set(walks)
    intended = {}
    for vendor in TRITON_VENDORS:
        descriptor = registry.REGISTRY.load_bindings(vendor)
        expected = "triton" if descriptor.families["triton"].vocab_block_bytes else "portable"
        intended[vendor] = expected
        assert {registry.intent_of(descriptor, op).provider for op in walks} == {expected}, vendor
    assert intended["cuda"] == "triton"
    assert intended["hip"] == "portable"  # the cdna configuration has no vocabulary tile of its own


def test_an_intent_stated_with_a_registration_outranks_the_family_bound_later():
    """A plugin registering its provider with ``intended=`` before its vendor binds the Triton family
    keeps that intent: the family's own (portable for an op it has no kernel for) ranks below."""
    import dataclasses

    from spec_hal import ops
    from spec_hal.kernels.triton.config import INTERPRETER
    from spec_hal.testing import isolated_registry

    def own_select(*args):
        raise AssertionError("not called")

    with isolated_registry():
        descriptor = dataclasses.replace(
            registry.device("xpu"), name="later_bound", families={"triton": INTERPRETER}
        )
        registry.register_device(descriptor)
        ops.select_top_k_tokens.register_impl(
            "later_bound", "own", own_select, intended="the vendor's own gather"
        )
        registry.REGISTRY.load_bindings(descriptor)  # binds the family, which leaves the op to torch
        intent = registry.intent_of(descriptor, "select_top_k_tokens")
        assert (intent.provider, intent.reason) == ("own", "the vendor's own gather")
        assert registry.intent_of(descriptor, "organize_draft_results").provider == "portable"
