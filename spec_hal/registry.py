"""Devices, implementations, resolution and the binding cache.

The registry knows three things:

* **devices**: one :class:`DeviceDescriptor` per vendor (built in under ``spec_hal/devices/`` or
  registered by a plugin), with its probe, its torch device type, its runtime and the provider it
  *intends* for each op;
* **implementations**: for each op, providers registered per vendor (``portable`` is registered
  once for every vendor by the op's definition);
* **bindings**: which provider serves (op, vendor, variant), resolved on the first call and cached.

A tensor's device type is not its vendor (ROCm tensors say ``cuda``): :func:`vendor_for` maps a
device type to the active vendor. Resolution takes the intended provider if it is registered and
accepts the variant; otherwise it walks the rest by priority (vendor kernel, Triton family,
portable) and records a *fallback*, which ``SPEC_HAL_STRICT=1`` turns into an error.

Writes take a lock; the hot path (a dict lookup in each op's binding cache) takes none.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from . import config
from ._version import API_VERSION
from .detect import HostFacts, ProbeResult, safe_probe
from .errors import BindingError, DeviceSelectionError, FallbackError, PluginError

if TYPE_CHECKING:
    import torch

    from .opdef import OpDef

logger = logging.getLogger("spec_hal")

#: Provider names with a fixed meaning. Vendors may register other names (their own kernels).
PORTABLE = "portable"
TRITON = "triton"
#: The pseudo-vendor under which an op's portable reference is registered for every vendor.
ANY_VENDOR = "*"

#: Default provider priorities: the resolution walk is vendor kernel, then Triton, then portable.
PRIORITY_VENDOR_KERNEL = 300
PRIORITY_TRITON = 200
PRIORITY_PORTABLE = 0

#: Answer of a provider's ``supports`` check: None accepts the variant, a string is why it declines.
Decline = str | None
Variant = Hashable


class Runtime(Protocol):
    """Device-neutral runtime helpers a vendor provides (``spec_hal.runtime`` calls these)."""

    def synchronize(self, device: torch.device) -> None: ...

    def current_stream(self, device: torch.device) -> Any: ...

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None: ...

    def device_guard(self, device: torch.device) -> Any: ...

    def current_index(self) -> int: ...

    def is_capturing(self, device: torch.device) -> bool: ...

    def capture_graph(
        self, fn: Callable[[], None], device: torch.device, generators: Sequence[torch.Generator] = ()
    ) -> Callable[[], None]: ...


@dataclass(frozen=True)
class Capabilities:
    """What a device supports, as data (not as ``if vendor == ...`` elsewhere)."""

    graph_capture: bool = False
    triton: bool = False
    record_stream: bool = False
    #: Launches need the tensors' device made current (multi-device accelerators).
    needs_device_guard: bool = False


@dataclass(frozen=True)
class Intent:
    """The provider a vendor means to serve an op with, and why (required for ``portable``)."""

    provider: str
    reason: str = ""


@dataclass(frozen=True)
class DeviceDescriptor:
    """A vendor: how to find it, which torch device type its tensors have, what it binds.

    ``runtime`` and ``bindings`` are qualified names (``"pkg.module:attr"``), imported on first use so
    that describing a vendor never imports its software stack; ``bindings`` names a ``register()``
    function (a bare module name is imported for its side effects, once).
    """

    name: str
    device_type: str
    priority: int
    probe: Callable[[HostFacts], ProbeResult]
    dist_backend: str
    capabilities: Capabilities = Capabilities()
    runtime: str = "spec_hal.devices._runtime:HOST_RUNTIME"
    bindings: str | None = None
    #: Provider per op; ops not listed get ``default_intent``.
    intents: Mapping[str, Intent] = field(default_factory=dict)
    default_intent: Intent = Intent(PORTABLE, "no accelerated provider for this op on this device")
    #: Why this vendor sits where it does in the detection order (shown by ``spec-hal info``).
    priority_reason: str = ""
    #: Limits and gaps worth knowing (shown by ``spec-hal info``), e.g. "no graph capture on torch < X".
    notes: tuple[str, ...] = ()
    api_version: int = API_VERSION

    def intent(self, op: str) -> Intent:
        return self.intents.get(op, self.default_intent)


@dataclass(frozen=True)
class Implementation:
    """One provider of one op for one vendor (or ``ANY_VENDOR``)."""

    op: str
    vendor: str
    provider: str
    fn: Callable[..., None]
    priority: int
    supports: Callable[[Variant], Decline] | None = None

    def declines(self, variant: Variant) -> Decline:
        return None if self.supports is None else self.supports(variant)


@dataclass(frozen=True)
class Fallback:
    op: str
    vendor: str
    variant: Variant
    intended: str
    chosen: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {
            "op": self.op,
            "vendor": self.vendor,
            "variant": repr(self.variant),
            "intended": self.intended,
            "chosen": self.chosen,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Detection:
    """The outcome of detection: the chosen vendor, why, and every probe."""

    device: DeviceDescriptor
    reason: str
    probes: tuple[ProbeResult, ...]
    overridden: bool


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.devices: dict[str, DeviceDescriptor] = {}
        self.impls: dict[str, list[Implementation]] = {}
        self.ops: dict[str, OpDef] = {}
        self.fallbacks: dict[tuple[str, str, Variant], Fallback] = {}
        self.loaded_bindings: set[str] = set()
        self.detection: Detection | None = None
        self.vendor_by_type: dict[str, DeviceDescriptor] = {}
        self.emulated_cpu_vendor: str | None = None
        self.runtimes: dict[str, Runtime] = {}
        self.unavailable: dict[tuple[str, str], str] = {}
        self.initialized = False


_state = _State()


# --------------------------------------------------------------------------------------------------
# Registration (public API, used by built-in vendors and plugins alike)


def register_device(descriptor: DeviceDescriptor) -> None:
    """Add or replace a vendor. An incompatible ``api_version`` is a :class:`PluginError`."""
    if descriptor.api_version != API_VERSION:
        raise PluginError(
            f"device {descriptor.name!r} implements spec_hal API version {descriptor.api_version}, "
            f"this spec_hal implements version {API_VERSION}"
        )
    with _state.lock:
        _state.devices[descriptor.name] = descriptor
        _state.detection = None
        _state.vendor_by_type.clear()
        _state.loaded_bindings.discard(descriptor.name)
        _invalidate_locked(registry_changed=True)


def register_impl(
    op: str,
    vendor: str,
    provider: str,
    fn: Callable[..., None],
    *,
    priority: int | None = None,
    supports: Callable[[Variant], Decline] | None = None,
) -> None:
    """Register ``fn`` as ``provider`` of ``op`` on ``vendor``.

    ``fn`` takes the op's provider arguments (the portable reference's signature) and writes its
    outputs. ``supports(variant)`` returns None to accept a variant or a reason to decline it.
    ``priority`` defaults by provider: portable 0, triton 200, any other (a vendor kernel) 300.
    """
    if priority is None:
        priority = {PORTABLE: PRIORITY_PORTABLE, TRITON: PRIORITY_TRITON}.get(
            provider, PRIORITY_VENDOR_KERNEL
        )
    impl = Implementation(op, vendor, provider, fn, priority, supports)
    with _state.lock:
        impls = [i for i in _state.impls.get(op, []) if (i.vendor, i.provider) != (vendor, provider)]
        impls.append(impl)
        impls.sort(key=lambda i: -i.priority)
        _state.impls[op] = impls
        _invalidate_locked(registry_changed=True)


def declare_unavailable(vendor: str, provider: str, reason: str) -> None:
    """Record why ``provider`` cannot be registered for ``vendor`` here (e.g. Triton not installed);
    the reason appears in the fallback records of the ops that intended it."""
    with _state.lock:
        _state.unavailable[(vendor, provider)] = reason
        _invalidate_locked(registry_changed=True)


def register_op(op: OpDef) -> None:
    """Called by :func:`spec_hal.opdef.define_op`; makes the op's binding cache invalidatable."""
    with _state.lock:
        _state.ops[op.name] = op


def _invalidate_locked(*, registry_changed: bool = False) -> None:
    for op in _state.ops.values():
        op.clear_bindings()
    if registry_changed:  # old fallback records may no longer be true
        _state.fallbacks.clear()


def invalidate() -> None:
    """Drop every cached binding and fallback record (re-resolved on next call)."""
    with _state.lock:
        _invalidate_locked()


def reset_detection() -> None:
    """Forget detection and the device-type map (tests, or after changing ``SPEC_HAL_DEVICE``)."""
    with _state.lock:
        _state.detection = None
        _state.vendor_by_type.clear()
        _invalidate_locked()


# --------------------------------------------------------------------------------------------------
# Initialisation: built-in vendors, then plugins (lazily, so ``import spec_hal`` stays cheap)


def _ensure_initialized() -> None:
    if _state.initialized:
        return
    with _state.lock:
        if _state.initialized:
            return
        _state.initialized = True
        from .devices import BUILTIN_DESCRIPTORS
        from .plugins import load_plugins

        for descriptor in BUILTIN_DESCRIPTORS:
            _state.devices.setdefault(descriptor.name, descriptor)
        load_plugins()


def devices() -> dict[str, DeviceDescriptor]:
    """Every registered vendor by name."""
    _ensure_initialized()
    return dict(_state.devices)


def device(name: str) -> DeviceDescriptor:
    known = devices()
    try:
        return known[name]
    except KeyError:
        raise DeviceSelectionError(
            f"unknown device {name!r}; known devices: {', '.join(sorted(known))}"
        ) from None


# --------------------------------------------------------------------------------------------------
# Detection


def _probe_all(facts: HostFacts) -> list[tuple[DeviceDescriptor, ProbeResult]]:
    ordered = sorted(devices().values(), key=lambda d: -d.priority)
    return [(d, safe_probe(d.name, d.probe, facts)) for d in ordered]


def detect(facts: HostFacts | None = None) -> Detection:
    """Probe every vendor in priority order and choose one (cached unless ``facts`` is given).

    ``SPEC_HAL_DEVICE`` overrides the choice; an unknown name, or a known one whose device is not
    usable, is a :class:`DeviceSelectionError` listing the known and the usable devices.
    """
    if facts is None and _state.detection is not None:
        return _state.detection
    results = _probe_all(facts or HostFacts())
    usable = [d.name for d, r in results if r.usable]
    override = config.device_override()
    if override is not None:
        known = [d.name for d, _ in results]
        chosen = next((d for d, _ in results if d.name == override), None)
        if chosen is None:
            raise DeviceSelectionError(
                f"{config.ENV_DEVICE}={override!r} is not a known device; known: {', '.join(known)}; "
                f"present: {', '.join(usable) or 'none'}"
            )
        probe = next(r for d, r in results if d.name == override)
        if not probe.usable:
            raise DeviceSelectionError(
                f"{config.ENV_DEVICE}={override!r}: that device is not usable here ({probe.reason}); "
                f"present: {', '.join(usable) or 'none'}; known: {', '.join(known)}"
            )
        detection = Detection(
            chosen, f"forced by {config.ENV_DEVICE}={override}", tuple(r for _, r in results), True
        )
    else:
        chosen_pair = next(((d, r) for d, r in results if r.usable), None)
        if chosen_pair is None:  # the CPU descriptor is always usable; a plugin may have replaced it
            raise DeviceSelectionError("no usable device, not even the CPU")
        d, r = chosen_pair
        skipped = [f"{other.name} ({res.reason})" for other, res in results if other.priority > d.priority]
        why = f"highest-priority usable device (priority {d.priority})"
        if skipped:
            why += "; higher priorities not usable: " + "; ".join(skipped)
        detection = Detection(d, why, tuple(r for _, r in results), False)
    if facts is None:
        with _state.lock:
            _state.detection = detection
    return detection


def current_device() -> DeviceDescriptor:
    """The vendor spec_hal chose for this process (probing only; no device is initialised)."""
    return detect().device


def vendor_for(device_type: str) -> DeviceDescriptor:
    """The active vendor for tensors of ``device_type`` (``cuda`` maps to ``hip`` on ROCm torch)."""
    found = _state.vendor_by_type.get(device_type)
    if found is not None:
        return found
    with _state.lock:
        if device_type == "cpu" and _state.emulated_cpu_vendor is not None:
            found = _state.devices[_state.emulated_cpu_vendor]
        else:
            found = _vendor_for_locked(device_type)
        _state.vendor_by_type[device_type] = found
        return found


def _vendor_for_locked(device_type: str) -> DeviceDescriptor:
    candidates = sorted(
        (d for d in devices().values() if d.device_type == device_type), key=lambda d: -d.priority
    )
    if not candidates:
        known = sorted({d.device_type for d in devices().values()})
        raise BindingError(
            f"no spec_hal device handles tensors of device type {device_type!r}; known: {known}"
        )
    chosen = detect().device
    if chosen.device_type == device_type:
        return chosen
    if len(candidates) == 1:
        return candidates[0]
    # Several vendors share the type (cuda: hip, musa-through-torchada, cuda): the installed one wins.
    facts = HostFacts()
    for candidate in candidates:
        if safe_probe(candidate.name, candidate.probe, facts).installed.ok:
            return candidate
    return candidates[-1]


def runtime_of(descriptor: DeviceDescriptor) -> Runtime:
    found = _state.runtimes.get(descriptor.name)
    if found is None:
        found = _load_qualified(descriptor.runtime)
        _state.runtimes[descriptor.name] = found
    return found


def _load_qualified(qualified: str) -> Any:
    module_name, _, attr = qualified.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


# --------------------------------------------------------------------------------------------------
# Resolution


def _ensure_bindings(descriptor: DeviceDescriptor) -> None:
    if descriptor.bindings is None or descriptor.name in _state.loaded_bindings:
        return
    with _state.lock:
        if descriptor.name in _state.loaded_bindings:
            return
        _state.loaded_bindings.add(descriptor.name)
        # A "module:function" is called every time bindings are (re)loaded: a cached module import
        # alone would not register again after isolated_registry() dropped its registrations.
        target = _load_qualified(descriptor.bindings)
        if callable(target):
            target()


def implementations(op: str, vendor: str) -> list[Implementation]:
    """Providers registered for ``op`` on ``vendor`` (portable included), highest priority first."""
    return [i for i in _state.impls.get(op, []) if i.vendor in (vendor, ANY_VENDOR)]


@dataclass(frozen=True)
class Choice:
    """The outcome of resolving one (op, vendor, variant)."""

    impl: Implementation
    intent: Intent
    fallback: Fallback | None
    skipped: tuple[tuple[str, str], ...]  # (provider, why not chosen)


def choose(op: str, descriptor: DeviceDescriptor, variant: Variant) -> Choice:
    """Pick the provider for (op, vendor, variant) without caching or side effects."""
    _ensure_initialized()
    _ensure_bindings(descriptor)
    candidates = implementations(op, descriptor.name)
    if not candidates:
        raise BindingError(f"op {op!r} has no implementation for device {descriptor.name!r}")
    overrides = config.op_overrides()
    unknown = sorted(set(overrides) - set(_state.ops))
    if unknown:
        raise BindingError(
            f"{config.ENV_OPS} names unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(_state.ops))}"
        )
    override = overrides.get(op)
    if override is not None:
        return _choose_override(op, descriptor, variant, candidates, override)
    intent = descriptor.intent(op)
    intended = next((i for i in candidates if i.provider == intent.provider), None)
    skipped: list[tuple[str, str]] = []
    if intended is not None:
        declined = intended.declines(variant)
        if declined is None:
            others = tuple(
                (i.provider, f"intended provider is {intent.provider!r}")
                for i in candidates
                if i is not intended
            )
            return Choice(intended, intent, None, others)
        why = f"intended provider {intent.provider!r} declined: {declined}"
    else:
        why = f"intended provider {intent.provider!r} is not registered for {descriptor.name!r}"
        unavailable = _state.unavailable.get((descriptor.name, intent.provider))
        if unavailable:
            why += f": {unavailable}"
    skipped.append((intent.provider, why))
    for impl in candidates:
        if impl is intended:
            continue
        declined = impl.declines(variant)
        if declined is None:
            fallback = Fallback(op, descriptor.name, variant, intent.provider, impl.provider, why)
            return Choice(impl, intent, fallback, tuple(skipped))
        skipped.append((impl.provider, f"declined: {declined}"))
    raise BindingError(
        f"op {op!r} on device {descriptor.name!r}: no provider accepts variant {variant!r} ("
        + "; ".join(f"{p}: {w}" for p, w in skipped)
        + ")"
    )


def _choose_override(
    op: str, descriptor: DeviceDescriptor, variant: Variant, candidates: list[Implementation], provider: str
) -> Choice:
    impl = next((i for i in candidates if i.provider == provider), None)
    if impl is None:
        names = ", ".join(i.provider for i in candidates)
        raise BindingError(
            f"{config.ENV_OPS}: op {op!r} has no provider {provider!r} on device {descriptor.name!r}; available: {names}"
        )
    declined = impl.declines(variant)
    if declined is not None:
        raise BindingError(
            f"{config.ENV_OPS}: provider {provider!r} of op {op!r} declines variant {variant!r}: {declined}"
        )
    intent = Intent(provider, f"forced by {config.ENV_OPS}")
    return Choice(
        impl, intent, None, tuple((i.provider, "not the override") for i in candidates if i is not impl)
    )


def resolve(op: str, device: torch.device, variant: Variant) -> Callable[..., None]:
    """Resolve and return the callable serving (op, device, variant); records any fallback.

    Called by :class:`spec_hal.opdef.OpDef` on a binding-cache miss; the caller caches the result.
    """
    _ensure_initialized()
    if config.op_overrides().get(op) is None and device.type == "meta":
        # Meta tensors run the portable reference: it is how tests prove graph safety without a GPU.
        portable = next((i for i in _state.impls.get(op, []) if i.provider == PORTABLE), None)
        if portable is None:
            raise BindingError(f"op {op!r} has no portable reference to run on meta tensors")
        return portable.fn
    descriptor = vendor_for(device.type)
    choice = choose(op, descriptor, variant)
    if choice.fallback is not None:
        _record_fallback(choice.fallback)
    fn = choice.impl.fn
    if descriptor.capabilities.needs_device_guard and device.index is not None:
        fn = _guarded(fn, runtime_of(descriptor), device)
    return fn


def _guarded(fn: Callable[..., None], runtime: Runtime, device: torch.device) -> Callable[..., None]:
    index = device.index

    def launch_on_device(*args: Any) -> None:
        if runtime.current_index() == index:
            return fn(*args)
        with runtime.device_guard(device):
            return fn(*args)

    launch_on_device.__wrapped__ = fn  # type: ignore[attr-defined]
    return launch_on_device


def _record_fallback(fallback: Fallback) -> None:
    key = (fallback.op, fallback.vendor, fallback.variant)
    if config.strict():
        raise FallbackError(
            f"{config.ENV_STRICT}=1: op {fallback.op!r} on {fallback.vendor!r} would fall back to "
            f"{fallback.chosen!r} ({fallback.reason})"
        )
    with _state.lock:
        if key in _state.fallbacks:
            return
        _state.fallbacks[key] = fallback
    logger.warning(
        "spec_hal: op %s on %s falls back to %s (%s)",
        fallback.op,
        fallback.vendor,
        fallback.chosen,
        fallback.reason,
    )


def fallbacks() -> list[Fallback]:
    """Fallbacks recorded so far in this process (each once)."""
    return list(_state.fallbacks.values())


def ops() -> dict[str, OpDef]:
    """Every device op defined so far (importing ``spec_hal.ops`` defines them all)."""
    return dict(_state.ops)


# --------------------------------------------------------------------------------------------------
# Emulation (tests only: see spec_hal.testing.emulate)


@contextmanager
def _emulate_cpu_as(vendor: str) -> Iterator[DeviceDescriptor]:
    descriptor = device(vendor)
    with _state.lock:
        previous = _state.emulated_cpu_vendor
        _state.emulated_cpu_vendor = vendor
        _state.vendor_by_type.pop("cpu", None)
        _invalidate_locked()
    try:
        yield descriptor
    finally:
        with _state.lock:
            _state.emulated_cpu_vendor = previous
            _state.vendor_by_type.pop("cpu", None)
            _invalidate_locked()


@contextmanager
def _isolated() -> Iterator[None]:
    """Snapshot devices and implementations; restore them (and drop bindings) on exit."""
    _ensure_initialized()
    with _state.lock:
        saved_devices = dict(_state.devices)
        saved_impls = {op: list(impls) for op, impls in _state.impls.items()}
        saved_loaded = set(_state.loaded_bindings)
        saved_unavailable = dict(_state.unavailable)
    try:
        yield
    finally:
        with _state.lock:
            _state.devices = saved_devices
            _state.impls = saved_impls
            _state.loaded_bindings = saved_loaded
            _state.unavailable = saved_unavailable
            _state.detection = None
            _state.vendor_by_type.clear()
            _state.emulated_cpu_vendor = None
            _invalidate_locked(registry_changed=True)
