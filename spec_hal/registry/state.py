"""The registry's mutable state and the registration calls (the public API of vendors and plugins).

One process-wide :data:`STATE`. Writes take its lock; the hot path (a dict lookup in each op's
binding cache) takes none. Every change that can alter a resolution bumps ``generation`` and drops
the ops' binding caches, so a binding resolved while the registry changed is never cached.

The registry knows no vendor by name: whoever composes the library (``spec_hal``'s composition
root) installs the function that registers vendors with :func:`set_initializer` and the one that
binds a vendor's kernel families with :func:`set_family_binder`.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from .. import config
from .._version import API_VERSION
from ..errors import BindingError, DeviceSelectionError, PluginError
from .model import (
    PORTABLE,
    PRIORITY_PORTABLE,
    PRIORITY_TRITON,
    PRIORITY_VENDOR_KERNEL,
    TRITON,
    BindableOp,
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


class State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.devices: dict[str, DeviceDescriptor] = {}
        self.impls: dict[str, list[Implementation]] = {}
        self.ops: dict[str, BindableOp] = {}
        self.fallbacks: dict[tuple[str, str, Variant], Fallback] = {}
        self.loaded_bindings: set[str] = set()
        self.detection: Detection | None = None
        self.vendor_by_type: dict[str, DeviceDescriptor] = {}
        self.emulated_cpu_vendor: str | None = None
        self.runtimes: dict[str, Runtime] = {}
        #: Vendors whose families or ``bindings`` raised when last loaded: name -> what raised.
        self.binding_failures: dict[str, str] = {}
        self.unavailable: dict[tuple[str, str], str] = {}
        #: Intents a kernel family bound for a vendor states: (vendor, op) -> intent.
        self.family_intents: dict[tuple[str, str], Intent] = {}
        #: Intents stated with a provider's registration (``register_impl(..., intended=)``); they
        #: rank above a family's, whenever either is stated.
        self.provider_intents: dict[tuple[str, str], Intent] = {}
        #: Providers forced by :func:`spec_hal.testing.use_provider` (op -> provider).
        self.forced: dict[str, str] = {}
        self.generation = 0
        self.initialized = False
        #: What the initializer raised (a plugin failing under SPEC_HAL_STRICT=1): raised again by
        #: every later use, never forgotten while the registry is half-built.
        self.init_failure: Exception | None = None
        self.initializer: Callable[[], None] | None = None
        self.family_binder: Callable[[DeviceDescriptor], None] | None = None


STATE = State()
logger = logging.getLogger("spec_hal")


def _new_lock_in_child() -> None:
    # A fork while another thread held the lock would leave the child's copy locked for good.
    STATE.lock = threading.RLock()


os.register_at_fork(after_in_child=_new_lock_in_child)


# --------------------------------------------------------------------------------------------------
# Composition hooks


def set_initializer(initializer: Callable[[], None]) -> None:
    """Install the function that registers the vendors (built-in and plugins) on first use."""
    STATE.initializer = initializer


def set_family_binder(binder: Callable[[DeviceDescriptor], None]) -> None:
    """Install the function that binds the kernel families a descriptor names (``families``)."""
    STATE.family_binder = binder


def ensure_initialized() -> None:
    if STATE.initialized and STATE.init_failure is None:
        return
    with STATE.lock:
        if not STATE.initialized:
            STATE.initialized = True
            if STATE.initializer is not None:
                try:
                    STATE.initializer()
                except Exception as error:
                    STATE.init_failure = error
                    raise
        earlier = STATE.init_failure
        if earlier is not None:  # a fresh error each time: re-raising one object grows its traceback
            raise PluginError(f"spec_hal failed to initialise earlier: {earlier}") from earlier


# --------------------------------------------------------------------------------------------------
# Registration (public API, used by built-in vendors and plugins alike)


def register_device(descriptor: DeviceDescriptor) -> None:
    """Add or replace a vendor. An incompatible ``api_version``, or a name that differs from a
    registered vendor's only in case, is a :class:`PluginError`."""
    if descriptor.api_version != API_VERSION:
        raise PluginError(
            f"device {descriptor.name!r} implements spec_hal API version {descriptor.api_version}, "
            f"this spec_hal implements version {API_VERSION}"
        )
    with STATE.lock:
        # SPEC_HAL_DEVICE selects without regard to case: two names one case apart would be ambiguous.
        clash = next(
            (
                name
                for name in STATE.devices
                if name != descriptor.name and name.lower() == descriptor.name.lower()
            ),
            None,
        )
        if clash is not None:
            raise PluginError(
                f"device {descriptor.name!r}: vendor {clash!r} is registered already; device names "
                "that differ only in case cannot both be registered (SPEC_HAL_DEVICE ignores case)"
            )
        STATE.devices[descriptor.name] = descriptor
        STATE.runtimes.pop(descriptor.name, None)  # the new descriptor may name another runtime
        STATE.binding_failures.pop(descriptor.name, None)
        STATE.detection = None
        STATE.vendor_by_type.clear()
        STATE.loaded_bindings.discard(descriptor.name)
        invalidate_locked(registry_changed=True)


def default_priority(provider: str) -> int:
    return {PORTABLE: PRIORITY_PORTABLE, TRITON: PRIORITY_TRITON}.get(provider, PRIORITY_VENDOR_KERNEL)


def register_impl(
    op: str,
    vendor: str,
    provider: str,
    fn: Callable[..., None],
    *,
    priority: int | None = None,
    supports: Callable[[Variant], Decline] | None = None,
    intended: str | None = None,
) -> None:
    """Register ``fn`` as ``provider`` of ``op`` on ``vendor``.

    ``fn`` takes the op's provider arguments (the reference's signature; checked here when the op
    is defined) and writes its outputs. ``supports(variant)`` returns None to accept a variant or a
    reason to decline it. ``priority`` defaults by provider: portable 0, triton 200, any other (a
    vendor kernel) 300. ``intended`` makes the provider the vendor's intended one for ``op``, with
    that reason (a descriptor's own ``intents`` entry still wins): a vendor's bindings say so where
    they register the provider.
    """
    defined = STATE.ops.get(op)
    if defined is not None:
        defined.check_provider(provider, fn)
    impl = Implementation(
        op, vendor, provider, fn, default_priority(provider) if priority is None else priority, supports
    )
    with STATE.lock:
        impls = [i for i in STATE.impls.get(op, []) if (i.vendor, i.provider) != (vendor, provider)]
        impls.append(impl)
        impls.sort(key=lambda i: -i.priority)
        STATE.impls[op] = impls
        if intended is not None:
            STATE.provider_intents[(vendor, op)] = Intent(provider, intended)
        invalidate_locked(registry_changed=True)


def declare_unavailable(vendor: str, provider: str, reason: str) -> None:
    """Record why ``provider`` cannot be registered for ``vendor`` here (e.g. Triton not installed);
    the reason appears in the fallback records of the ops that intended it."""
    with STATE.lock:
        STATE.unavailable[(vendor, provider)] = reason
        invalidate_locked(registry_changed=True)


def declare_intent(vendor: str, op: str, intent: Intent) -> None:
    """What a kernel family bound for ``vendor`` intends for ``op`` (a descriptor's own ``intents``
    entry still wins): family binders call this for the ops they serve or leave to another provider."""
    with STATE.lock:
        STATE.family_intents[(vendor, op)] = intent
        invalidate_locked(registry_changed=True)


def intent_of(descriptor: DeviceDescriptor, op: str) -> Intent:
    """The provider ``descriptor``'s vendor intends for ``op``: its own ``intents`` entry, else one
    stated with a provider's registration (``intended=``), else its bound family's, else its
    ``default_intent``."""
    stated = descriptor.intents.get(op)
    if stated is not None:
        return stated
    key = (descriptor.name, op)
    return STATE.provider_intents.get(key) or STATE.family_intents.get(key, descriptor.default_intent)


def register_op(op: BindableOp) -> None:
    """Called when an op is defined; makes its binding cache invalidatable."""
    with STATE.lock:
        STATE.ops[op.name] = op


def invalidate_locked(*, registry_changed: bool = False) -> None:
    STATE.generation += 1
    for op in STATE.ops.values():
        op.clear_bindings()
    if registry_changed:  # old fallback records may no longer be true
        STATE.fallbacks.clear()


def invalidate() -> None:
    """Drop every cached binding (re-resolved on next call)."""
    with STATE.lock:
        invalidate_locked()


def reset_detection() -> None:
    """Forget detection and the device-type map (tests, or after changing ``SPEC_HAL_DEVICE``)."""
    with STATE.lock:
        STATE.detection = None
        STATE.vendor_by_type.clear()
        invalidate_locked()


# --------------------------------------------------------------------------------------------------
# Vendors


def devices() -> dict[str, DeviceDescriptor]:
    """Every registered vendor by name."""
    ensure_initialized()
    return dict(STATE.devices)


def device(name: str) -> DeviceDescriptor:
    """The vendor named ``name``, in any case (as ``SPEC_HAL_DEVICE`` reads it: names that differ
    only in case cannot both be registered)."""
    known = devices()
    found = known.get(name) or next((d for n, d in known.items() if n.lower() == name.lower()), None)
    if found is None:
        raise DeviceSelectionError(f"unknown device {name!r}; known devices: {', '.join(sorted(known))}")
    return found


def load_qualified(qualified: str) -> Any:
    module_name, _, attr = qualified.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


#: What builds a :class:`TorchDeviceModule` runtime. ``spec_hal.runtime`` imports the registry, so
#: the registry names it, as the default runtime is named, and imports it on first use.
TORCH_DEVICE_RUNTIME = "spec_hal.runtime:TorchDeviceRuntime"


def runtime_of(descriptor: DeviceDescriptor) -> Runtime:
    found = STATE.runtimes.get(descriptor.name)
    if found is None:
        named = descriptor.runtime
        if isinstance(named, TorchDeviceModule):
            found = load_qualified(TORCH_DEVICE_RUNTIME)(descriptor.device_type, named.extension)
        else:
            found = load_qualified(named)
        STATE.runtimes[descriptor.name] = found
    return found


def ensure_bindings(descriptor: DeviceDescriptor) -> None:
    """Bind ``descriptor``'s kernel families and run its ``bindings``, once per registration.

    A loader that raises leaves the vendor unbound (tried again on the next resolution) and its
    error recorded (:func:`binding_failures`): under ``SPEC_HAL_STRICT=1`` a :class:`BindingError`
    each time; otherwise the ops resolve without the vendor's providers, a recorded fallback where
    one was intended."""
    if descriptor.name in STATE.loaded_bindings:
        return
    with STATE.lock:
        if descriptor.name in STATE.loaded_bindings:
            return
        try:
            _load_bindings(descriptor)
        except Exception as error:
            failure = f"{_loader_name(descriptor)} raised {type(error).__name__}: {error}"
            again = STATE.binding_failures.get(descriptor.name) == failure
            STATE.binding_failures[descriptor.name] = failure
            if config.strict():
                raise BindingError(f"{config.ENV_STRICT}=1: device {descriptor.name!r}: {failure}") from error
            if not again:  # each op's first resolution retries: one warning per distinct failure
                logger.warning("spec_hal: device %s: %s (its ops fall back)", descriptor.name, failure)
            return
        STATE.binding_failures.pop(descriptor.name, None)
        STATE.loaded_bindings.add(descriptor.name)


def _load_bindings(descriptor: DeviceDescriptor) -> None:
    if descriptor.families and STATE.family_binder is not None:
        STATE.family_binder(descriptor)
    if descriptor.bindings is not None:
        # A "module:function" is called every time bindings are (re)loaded: a cached module
        # import alone would not register again after an isolated registry dropped them.
        target = load_qualified(descriptor.bindings)
        if callable(target):
            target()


def _loader_name(descriptor: DeviceDescriptor) -> str:
    if descriptor.bindings is None:
        return f"the kernel families {', '.join(descriptor.families)}"
    return f"bindings {descriptor.bindings}"


def binding_failures() -> dict[str, str]:
    """Vendors whose bindings raised when last loaded, with what they raised."""
    return dict(STATE.binding_failures)
