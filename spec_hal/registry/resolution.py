"""Resolution: which provider serves (op, vendor, variant), and the fallbacks it records.

The intended provider wins when it is registered and accepts the variant; otherwise the walk takes
the rest by priority (vendor kernel, Triton family, portable) and records a *fallback*, which
``SPEC_HAL_STRICT=1`` turns into an error. Op objects call :func:`resolve` on a binding-cache miss
and cache what it returns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import BindingError, FallbackError
from .detection import vendor_for
from .model import (
    ANY_VENDOR,
    PORTABLE,
    Choice,
    DeviceDescriptor,
    Fallback,
    Implementation,
    Intent,
    Runtime,
    Variant,
)
from .state import STATE, ensure_bindings, ensure_initialized, intent_of, runtime_of

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("spec_hal")


def implementations(op: str, vendor: str) -> list[Implementation]:
    """Providers registered for ``op`` on ``vendor`` (portable included), highest priority first."""
    return [i for i in STATE.impls.get(op, []) if i.vendor in (vendor, ANY_VENDOR)]


def _override(op: str) -> tuple[str, str] | None:
    """The provider forced for ``op`` and by what, or None."""
    forced = STATE.forced.get(op)
    if forced is not None:
        return forced, "forced by spec_hal.testing.use_provider"
    overrides = config.op_overrides()
    unknown = sorted(set(overrides) - set(STATE.ops))
    if unknown:
        raise BindingError(
            f"{config.ENV_OPS} names unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(STATE.ops))}"
        )
    provider = overrides.get(op)
    return None if provider is None else (provider, f"forced by {config.ENV_OPS}")


def choose(op: str, descriptor: DeviceDescriptor, variant: Variant) -> Choice:
    """Pick the provider for (op, vendor, variant) without caching or side effects."""
    ensure_initialized()
    ensure_bindings(descriptor)
    candidates = implementations(op, descriptor.name)
    if not candidates:
        raise BindingError(f"op {op!r} has no implementation for device {descriptor.name!r}")
    override = _override(op)
    if override is not None:
        return _choose_override(op, descriptor, variant, candidates, *override)
    intent = intent_of(descriptor, op)
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
        unavailable = STATE.unavailable.get((descriptor.name, intent.provider))
        if unavailable:
            why += f": {unavailable}"
        failed = STATE.binding_failures.get(descriptor.name)
        if failed:
            why += f" ({failed})"
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
    op: str,
    descriptor: DeviceDescriptor,
    variant: Variant,
    candidates: list[Implementation],
    provider: str,
    forced_by: str,
) -> Choice:
    impl = next((i for i in candidates if i.provider == provider), None)
    if impl is None:
        names = ", ".join(i.provider for i in candidates)
        raise BindingError(
            f"{forced_by}: op {op!r} has no provider {provider!r} on device {descriptor.name!r}; available: {names}"
        )
    declined = impl.declines(variant)
    if declined is not None:
        raise BindingError(
            f"{forced_by}: provider {provider!r} of op {op!r} declines variant {variant!r}: {declined}"
        )
    return Choice(
        impl,
        Intent(provider, forced_by),
        None,
        tuple((i.provider, "not the override") for i in candidates if i is not impl),
    )


def resolve(op: str, device: torch.device, variant: Variant) -> Callable[..., None]:
    """Resolve and return the callable serving (op, device, variant); records any fallback."""
    ensure_initialized()
    if device.type == "meta" and _override(op) is None:
        # Meta tensors run the portable reference: it is how tests prove graph safety without a GPU.
        portable = next((i for i in STATE.impls.get(op, []) if i.provider == PORTABLE), None)
        if portable is None:
            raise BindingError(f"op {op!r} has no portable reference to run on meta tensors")
        return portable.fn
    descriptor = vendor_for(device.type)
    choice = choose(op, descriptor, variant)
    if choice.fallback is not None:
        _record_fallback(choice.fallback)
    fn = choice.impl.fn
    if descriptor.capabilities.needs_device_guard and device.index is not None:
        runtime = runtime_of(descriptor)
        count = getattr(runtime, "device_count", None)  # optional in a plugin's runtime
        if count is None or count() > 1:  # with one device it is always the current one
            fn = _guarded(fn, runtime, device)
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
    with STATE.lock:
        if key in STATE.fallbacks:
            return
        STATE.fallbacks[key] = fallback
    logger.warning(
        "spec_hal: op %s on %s falls back to %s (%s)",
        fallback.op,
        fallback.vendor,
        fallback.chosen,
        fallback.reason,
    )


def fallbacks() -> list[Fallback]:
    """Fallbacks recorded so far in this process (each once)."""
    return list(STATE.fallbacks.values())
