"""Registry: registration, priorities, intents and fallbacks, overrides, strict mode, cache
invalidation, dispatch by tensor device, concurrency."""

from __future__ import annotations

import logging
import threading

import pytest
import torch
from fake_devices import device
from torch import Tensor

import spec_hal
from spec_hal import registry
from spec_hal.errors import BindingError, FallbackError
from spec_hal.opdef import OpDef, define_op
from spec_hal.registry import Capabilities, DeviceDescriptor, Intent
from spec_hal.testing import emulate, isolated_registry, use_provider


def _fill_reference(src: Tensor, out: Tensor) -> None:
    out.fill_(0)


@define_op(_fill_reference, mutates=("out",), op_class="latency", variant=("src",))
def _test_registry_fill(op: OpDef, src: Tensor, out: Tensor) -> Tensor:
    op.dispatch(src.device, src, out)
    return out


fill = _test_registry_fill


def provider(value: int):
    def fill_value(src: Tensor, out: Tensor) -> None:
        out.fill_(value)

    return fill_value


def run(dtype=torch.int64):
    return int(fill(torch.zeros(2, dtype=dtype), torch.full((3,), -1))[0])


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    for var in ("SPEC_HAL_OPS", "SPEC_HAL_STRICT", "SPEC_HAL_DEVICE"):
        monkeypatch.delenv(var, raising=False)
    with isolated_registry():
        yield


def test_portable_reference_is_registered_for_every_vendor():
    assert run() == 0
    assert [i.provider for i in registry.implementations("_test_registry_fill", "anything")] == ["portable"]


def test_intended_provider_wins_over_higher_priority():
    registry.register_device(
        device("testdev", intents={"_test_registry_fill": Intent("mine", "vendor kernel")})
    )
    registry.register_impl("_test_registry_fill", "testdev", "triton", provider(2))
    registry.register_impl("_test_registry_fill", "testdev", "mine", provider(3), priority=1)
    with emulate("testdev"):
        assert run() == 3
    assert registry.fallbacks() == []


def test_missing_intended_provider_falls_back_by_priority_and_is_recorded_once(caplog):
    registry.register_device(device("testdev", default=Intent("vendor_kernel", "")))
    registry.register_impl("_test_registry_fill", "testdev", "triton", provider(2))
    with emulate("testdev"), caplog.at_level(logging.WARNING, logger="spec_hal"):
        assert run() == 2
        registry.invalidate()  # a re-resolution must not log the same fallback twice ...
        assert run() == 2
    (record,) = registry.fallbacks() or [None]
    assert record is not None and record.intended == "vendor_kernel" and record.chosen == "triton"
    assert "not registered" in record.reason
    assert sum("falls back" in r.message for r in caplog.records) >= 1


def test_fallback_reason_says_why_the_intended_provider_is_unavailable():
    registry.register_device(device("testdev", default=Intent("triton", "")))
    registry.declare_unavailable("testdev", "triton", "Triton is not installed (no module named 'triton')")
    with emulate("testdev"):
        assert run() == 0
    (record,) = registry.fallbacks()
    assert "Triton is not installed" in record.reason and record.chosen == "portable"


def test_declined_variant_falls_back_and_strict_refuses(monkeypatch):
    registry.register_device(device("testdev", default=Intent("triton", "")))
    registry.register_impl(
        "_test_registry_fill",
        "testdev",
        "triton",
        provider(2),
        supports=lambda variant: None if variant in (None, (torch.int64,)) else "int64 only",
    )
    with emulate("testdev"):
        assert run(torch.int64) == 2
        assert run(torch.int32) == 0  # declined: portable
        (record,) = registry.fallbacks()
        assert "int64 only" in record.reason and record.chosen == "portable"
        monkeypatch.setenv("SPEC_HAL_STRICT", "1")
        registry.invalidate()
        assert run(torch.int64) == 2  # intended provider: fine under strict
        with pytest.raises(FallbackError, match="int64 only"):
            run(torch.int32)


def _register_int64_only_kernel() -> None:
    # The bindings of "lazydev": a provider that declines int32 sources.
    registry.register_impl(
        "_test_registry_fill",
        "lazydev",
        "triton",
        provider(2),
        supports=lambda variant: None if variant in (None, (torch.int64,)) else "int64 only",
    )


def test_the_first_call_after_a_lazy_binding_resolves_with_its_variant():
    """A vendor's bindings load on its first call; when they register a provider that declines
    variants, that first call must still be resolved with its own variant (it was read as None,
    before any provider declined anything)."""
    import dataclasses

    descriptor = dataclasses.replace(
        device("lazydev", default=Intent("triton", "")),
        bindings=f"{__name__}:_register_int64_only_kernel",
    )
    registry.register_device(descriptor)
    with emulate("lazydev"):
        assert run(torch.int32) == 0  # declined on the very first call: portable
        assert run(torch.int64) == 2
    (record,) = registry.fallbacks()
    assert record.variant == (torch.int32,) and "int64 only" in record.reason


def test_per_op_override_and_its_errors(monkeypatch):
    registry.register_device(device("testdev", default=Intent("triton", "")))
    registry.register_impl("_test_registry_fill", "testdev", "triton", provider(2))
    with emulate("testdev"):
        with use_provider("_test_registry_fill", "portable"):
            assert run() == 0
        assert run() == 2
        monkeypatch.setenv("SPEC_HAL_OPS", "_test_registry_fill=nonexistent")
        registry.invalidate()
        with pytest.raises(BindingError, match="no provider 'nonexistent'.*available: triton, portable"):
            run()
        monkeypatch.setenv("SPEC_HAL_OPS", "no_such_op=portable")
        registry.invalidate()
        with pytest.raises(BindingError, match="unknown op.*no_such_op"):
            run()
        monkeypatch.setenv("SPEC_HAL_OPS", "garbage")
        registry.invalidate()
        with pytest.raises(ValueError, match="op=provider"):
            run()


def test_cache_invalidated_when_provider_or_device_registered_later():
    registry.register_device(device("testdev", default=Intent("late", "")))
    with emulate("testdev"):
        assert run() == 0  # intended 'late' missing: portable, recorded
        registry.register_impl("_test_registry_fill", "testdev", "late", provider(5))
        assert run() == 5
        registry.register_device(device("testdev", default=Intent("portable", "changed my mind")))
        assert run() == 0
    assert registry.fallbacks() == []  # registration cleared the stale record


def test_dispatch_follows_the_tensor_device_not_the_detected_device(monkeypatch):
    """A GPU-like vendor detected first must not capture CPU tensors."""
    registry.register_device(device("fakegpu", priority=1000, device_type="fakegpu"))
    registry.register_impl("_test_registry_fill", "fakegpu", "gpu_kernel", provider(9))
    registry.register_impl("_test_registry_fill", "cpu", "cpu_kernel", provider(4))
    registry.register_device(
        DeviceDescriptor(
            **{**vars(registry.device("cpu")), "intents": {"_test_registry_fill": Intent("cpu_kernel", "")}}
        )
    )
    registry.reset_detection()
    assert spec_hal.current_device().name == "fakegpu"
    assert registry.vendor_for("cpu").name == "cpu"
    assert run() == 4
    out = torch.empty(3, device="meta")
    fill(torch.zeros(2, device="meta"), out)  # meta runs the portable reference
    assert out.shape == (3,)


def test_unknown_device_type_is_a_clear_error():
    with pytest.raises(BindingError, match="device type 'fakeaccel'"):
        registry.vendor_for("fakeaccel")


def test_device_guard_wraps_providers_of_indexed_devices():
    entered = []

    class Runtime:
        def current_index(self):
            return 0

        def device_guard(self, device):
            import contextlib

            entered.append(device)
            return contextlib.nullcontext()

    descriptor = device("guarded", device_type="cpu", default=Intent("k", ""))
    descriptor = DeviceDescriptor(
        **{**vars(descriptor), "capabilities": Capabilities(needs_device_guard=True)}
    )
    registry.register_device(descriptor)
    registry.register_impl("_test_registry_fill", "guarded", "k", provider(1))
    registry.STATE.runtimes["guarded"] = Runtime()
    with emulate("guarded"):
        fn1 = registry.resolve("_test_registry_fill", torch.device("cpu", 1), torch.int64)
        fn0 = registry.resolve("_test_registry_fill", torch.device("cpu", 0), torch.int64)
        out = torch.zeros(1)
        fn1(torch.zeros(1), out)
        fn0(torch.zeros(1), out)
    registry.STATE.runtimes.pop("guarded")
    assert entered == [torch.device("cpu", 1)]  # index 0 is already current: no guard entered


def test_concurrent_registration_and_dispatch():
    registry.register_device(device("testdev", default=Intent("p0", "")))
    errors = []
    with emulate("testdev"):

        def caller():
            try:
                for _ in range(200):
                    assert run() in (0, 1, 2, 3)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def registrar():
            for i in range(50):
                registry.register_impl("_test_registry_fill", "testdev", f"p{i % 4}", provider(i % 4))

        threads = [threading.Thread(target=caller) for _ in range(3)] + [threading.Thread(target=registrar)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_incompatible_api_version_is_refused():
    from spec_hal.errors import PluginError

    with pytest.raises(PluginError, match="API version 99"):
        registry.register_device(DeviceDescriptor(**{**vars(device("future")), "api_version": 99}))


def test_a_vendor_name_differing_only_in_case_is_refused_naming_both():
    from spec_hal.errors import PluginError

    registry.register_device(device("RTDev"))
    registry.register_device(device("RTDev", priority=-11))  # the same name replaces, as before
    with pytest.raises(PluginError, match="device 'rtdev': vendor 'RTDev' is registered already"):
        registry.register_device(device("rtdev"))
    assert "rtdev" not in registry.devices() and registry.device("RTDev").priority == -11


def test_a_failed_initialization_fails_every_later_use(monkeypatch):
    from spec_hal.errors import PluginError

    def failing_initializer():
        raise PluginError("spec_hal plugin 'broken' (broken:register) failed: SystemExit: 3")

    # A fresh, uninitialised registry state whose initializer fails (as plugins do under strict).
    monkeypatch.setattr(registry.STATE, "initialized", False)
    monkeypatch.setattr(registry.STATE, "init_failure", None)
    monkeypatch.setattr(registry.STATE, "initializer", failing_initializer)
    for _ in range(3):
        with pytest.raises(PluginError, match="plugin 'broken'"):
            run()
    with pytest.raises(PluginError, match="plugin 'broken'"):
        registry.devices()


def test_compiled_call_goes_through_torch_ops_and_matches_eager():
    values = torch.randn(5, 17)
    compiled = torch.compile(lambda v: spec_hal.ops.fast_topk(v, 4), fullgraph=True, backend="aot_eager")
    got_values, got_indices = compiled(values)
    want_values, want_indices = spec_hal.ops.fast_topk(values, 4)
    assert torch.equal(got_indices, want_indices) and torch.equal(got_values, want_values)
    schema = str(torch.ops.spec_hal.fast_topk.default._schema)
    assert "Tensor(a3!) out_values" in schema and "Tensor(a4!) out_indices" in schema


def test_vendor_bindings_register_again_after_an_isolated_block_dropped_them():
    import spec_hal.ops  # noqa: F401  (the CPU bindings register providers of these ops)

    cpu = registry.device("cpu")
    # A state in which the CPU bindings were never loaded ...
    registry.STATE.loaded_bindings.discard("cpu")
    registry.STATE.impls = {
        op: [i for i in impls if i.vendor != "cpu"] for op, impls in registry.STATE.impls.items()
    }
    with isolated_registry():  # ... snapshot it, load the bindings inside the block, drop them on exit
        registry.REGISTRY.load_bindings(cpu)
        assert any(i.provider == "cpu" for i in registry.implementations("assign_extend_cache_locs", "cpu"))
    registry.REGISTRY.load_bindings(cpu)  # the module is cached: its registrations must run again
    assert any(i.provider == "cpu" for i in registry.implementations("assign_extend_cache_locs", "cpu"))


@pytest.mark.parametrize(("count", "guarded"), [(1, False), (2, True)])
def test_no_device_guard_where_the_runtime_has_one_device(count, guarded):
    class Runtime:
        def current_index(self):
            return 0

        def device_count(self):
            return count

    descriptor = device("counted", device_type="cpu", default=Intent("k", ""))
    registry.register_device(
        DeviceDescriptor(**{**vars(descriptor), "capabilities": Capabilities(needs_device_guard=True)})
    )
    fill_one = provider(1)
    registry.register_impl("_test_registry_fill", "counted", "k", fill_one)
    registry.STATE.runtimes["counted"] = Runtime()
    try:
        with emulate("counted"):
            fn = registry.resolve("_test_registry_fill", torch.device("cpu", 0), None)
    finally:
        registry.STATE.runtimes.pop("counted")
    assert (fn is not fill_one) == guarded


# --------------------------------------------------------------------------------------------------
# Nested contexts, re-registration and failing bindings (issue #42)


def test_an_isolated_block_inside_an_emulation_leaves_the_emulation_on():
    registry.register_device(device("testdev", default=Intent("mine", "")))
    registry.register_impl("_test_registry_fill", "testdev", "mine", provider(3))
    with emulate("testdev"):
        with isolated_registry():
            assert run() == 3
        assert run() == 3  # still emulated: the isolated block restores what it found
    assert run() == 0


def test_a_vendor_registered_again_gets_its_new_runtime():
    import spec_hal.runtime as runtime_module

    registry.register_device(device("testdev"))
    first = registry.device("testdev")
    assert registry.runtime_of(first) is runtime_module.HOST_RUNTIME
    with isolated_registry():
        registry.register_device(DeviceDescriptor(**{**vars(first), "runtime": "spec_hal.runtime"}))
        assert registry.runtime_of(registry.device("testdev")) is runtime_module
    assert registry.runtime_of(registry.device("testdev")) is runtime_module.HOST_RUNTIME
    registry.register_device(DeviceDescriptor(**{**vars(first), "runtime": "spec_hal.runtime"}))
    assert registry.runtime_of(registry.device("testdev")) is runtime_module


def test_a_runtime_that_is_data_is_built_by_the_registry_over_torchs_device_module():
    import sys

    from spec_hal.registry import TorchDeviceModule
    from spec_hal.runtime import TorchDeviceRuntime

    with isolated_registry():
        registry.register_device(
            DeviceDescriptor(**{**vars(device("testdev")), "runtime": TorchDeviceModule(extension="json")})
        )
        built = registry.runtime_of(registry.device("testdev"))
        assert isinstance(built, TorchDeviceRuntime)
        assert (built.device_type, built.extension) == ("cpu", "json")
        assert registry.runtime_of(registry.device("testdev")) is built  # built once
        assert built.module is sys.modules["torch"].cpu  # torch.get_device_module("cpu")


#: Calls of the failing bindings loader below (it is named by a qualified name).
LOADER_CALLS: list[int] = []


def failing_bindings() -> None:
    LOADER_CALLS.append(1)
    raise ImportError("no module named 'vendor_runtime'")


def _vendor_with_failing_bindings() -> None:
    descriptor = device("testdev", default=Intent("mine", "vendor kernel"))
    registry.register_device(
        DeviceDescriptor(**{**vars(descriptor), "bindings": f"{__name__}:failing_bindings"})
    )


def test_failing_bindings_are_a_recorded_fallback(caplog):
    _vendor_with_failing_bindings()
    with emulate("testdev"), caplog.at_level(logging.WARNING, logger="spec_hal"):
        assert run() == 0
        registry.invalidate()
        assert run() == 0
    (record,) = registry.fallbacks()
    assert record.chosen == "portable" and "no module named 'vendor_runtime'" in record.reason
    assert sum(r.message.startswith("spec_hal: device testdev: ") for r in caplog.records) == 1  # said once
    assert "failing_bindings" in record.reason
    assert registry.binding_failures() == {
        "testdev": f"bindings {__name__}:failing_bindings raised ImportError: no module named 'vendor_runtime'"
    }


def test_failing_bindings_are_a_named_error_every_time_under_strict(monkeypatch):
    _vendor_with_failing_bindings()
    monkeypatch.setenv("SPEC_HAL_STRICT", "1")
    LOADER_CALLS.clear()
    with emulate("testdev"):
        for _ in range(2):
            with pytest.raises(
                BindingError, match="device 'testdev': bindings .*failing_bindings raised ImportError"
            ):
                run()
    assert len(LOADER_CALLS) == 2  # tried again each time, never marked bound
