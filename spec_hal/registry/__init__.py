"""Devices, providers, resolution and the binding cache. The registry knows no vendor by name.

* **devices**: one :class:`DeviceDescriptor` per vendor, registered with :func:`register_device` by
  the composition root (built-in vendors) or by a plugin, through the same call;
* **providers**: for each op, the implementations registered per vendor (``portable``, the op's
  reference, serves every vendor);
* **bindings**: which provider serves (op, vendor, variant), resolved on the first call and cached
  by the op object.

Modules: :mod:`.model` (the frozen data), :mod:`.state` (registration and the composition hooks),
:mod:`.detection` (which vendor), :mod:`.resolution` (which provider). :data:`REGISTRY` is the
object tests and tools use for what goes beyond registration: loading a vendor's bindings,
emulating a vendor on CPU tensors, forcing a provider, isolating registrations.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .detection import current_device, detect, vendor_for
from .model import (
    ANY_VENDOR,
    PORTABLE,
    PRIORITY_PORTABLE,
    PRIORITY_TRITON,
    PRIORITY_VENDOR_KERNEL,
    TRITON,
    BindableOp,
    Capabilities,
    Choice,
    Decline,
    Detection,
    DeviceDescriptor,
    Fallback,
    Implementation,
    Intent,
    Runtime,
    TorchDeviceModule,
    Variant,
)
from .resolution import choose, fallbacks, implementations, resolve
from .state import (
    STATE,
    binding_failures,
    declare_intent,
    declare_unavailable,
    device,
    devices,
    ensure_bindings,
    ensure_initialized,
    intent_of,
    invalidate,
    invalidate_locked,
    register_device,
    register_impl,
    register_op,
    reset_detection,
    runtime_of,
    set_family_binder,
    set_initializer,
)


def ops() -> dict[str, BindableOp]:
    """Every device op defined so far (importing ``spec_hal.ops`` defines them all)."""
    return dict(STATE.ops)


class Registry:
    """The registry's public handle for tests and tools (registration itself is the module-level API)."""

    def load_bindings(self, vendor: str | DeviceDescriptor) -> DeviceDescriptor:
        """Bind ``vendor``'s families and providers now (normally done on its first resolution)."""
        descriptor = device(vendor) if isinstance(vendor, str) else vendor
        ensure_initialized()
        ensure_bindings(descriptor)
        return descriptor

    @contextmanager
    def emulate_cpu_as(self, vendor: str) -> Iterator[DeviceDescriptor]:
        """Route CPU tensors to ``vendor``'s providers inside the block (see ``spec_hal.testing``)."""
        descriptor = device(vendor)
        with STATE.lock:
            previous = STATE.emulated_cpu_vendor
            STATE.emulated_cpu_vendor = vendor
            STATE.vendor_by_type.pop("cpu", None)
            invalidate_locked()
        try:
            yield descriptor
        finally:
            with STATE.lock:
                STATE.emulated_cpu_vendor = previous
                STATE.vendor_by_type.pop("cpu", None)
                invalidate_locked()

    @contextmanager
    def force_provider(self, op: str, provider: str) -> Iterator[None]:
        """Resolve ``op`` to ``provider`` inside the block (no environment variable is touched)."""
        if op not in STATE.ops:
            raise KeyError(f"op: unknown op {op!r}; known: {', '.join(sorted(STATE.ops))}")
        with STATE.lock:
            previous = STATE.forced.get(op)
            STATE.forced[op] = provider
            invalidate_locked()
        try:
            yield
        finally:
            with STATE.lock:
                if previous is None:
                    STATE.forced.pop(op, None)
                else:
                    STATE.forced[op] = previous
                invalidate_locked()

    @contextmanager
    def isolated(self) -> Iterator[None]:
        """Snapshot devices, providers and the emulated vendor; restore exactly those (and drop
        bindings) on exit, so that the block nests inside :meth:`emulate_cpu_as` and vice versa."""
        ensure_initialized()
        with STATE.lock:
            saved = (
                dict(STATE.devices),
                {op: list(impls) for op, impls in STATE.impls.items()},
                set(STATE.loaded_bindings),
                dict(STATE.unavailable),
                dict(STATE.family_intents),
                dict(STATE.provider_intents),
                dict(STATE.runtimes),
                dict(STATE.binding_failures),
                STATE.emulated_cpu_vendor,  # an emulation around the block outlives it
            )
        try:
            yield
        finally:
            with STATE.lock:
                (
                    STATE.devices,
                    STATE.impls,
                    STATE.loaded_bindings,
                    STATE.unavailable,
                    STATE.family_intents,
                    STATE.provider_intents,
                    STATE.runtimes,
                    STATE.binding_failures,
                    STATE.emulated_cpu_vendor,
                ) = saved
                STATE.detection = None
                STATE.vendor_by_type.clear()
                invalidate_locked(registry_changed=True)

    invalidate = staticmethod(invalidate)
    reset_detection = staticmethod(reset_detection)


REGISTRY = Registry()

__all__ = [
    "ANY_VENDOR",
    "PORTABLE",
    "PRIORITY_PORTABLE",
    "PRIORITY_TRITON",
    "PRIORITY_VENDOR_KERNEL",
    "REGISTRY",
    "TRITON",
    "BindableOp",
    "Capabilities",
    "Choice",
    "Decline",
    "Detection",
    "DeviceDescriptor",
    "Fallback",
    "Implementation",
    "Intent",
    "Registry",
    "Runtime",
    "TorchDeviceModule",
    "Variant",
    "binding_failures",
    "choose",
    "current_device",
    "declare_intent",
    "declare_unavailable",
    "detect",
    "device",
    "devices",
    "ensure_bindings",
    "ensure_initialized",
    "fallbacks",
    "implementations",
    "intent_of",
    "invalidate",
    "ops",
    "register_device",
    "register_impl",
    "register_op",
    "reset_detection",
    "resolve",
    "runtime_of",
    "set_family_binder",
    "set_initializer",
    "vendor_for",
]
