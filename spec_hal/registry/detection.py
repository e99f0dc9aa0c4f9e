"""Detection wiring: which registered vendor this process uses, and which vendor a tensor's device
type belongs to (ROCm tensors say ``cuda``)."""

from __future__ import annotations

from .. import config
from ..detect import HostFacts, ProbeResult, safe_probe
from ..errors import BindingError, DeviceSelectionError
from .model import Detection, DeviceDescriptor
from .state import STATE, devices


def _probe_all(facts: HostFacts) -> list[tuple[DeviceDescriptor, ProbeResult]]:
    ordered = sorted(devices().values(), key=lambda d: -d.priority)
    return [(d, safe_probe(d.name, d.probe, facts)) for d in ordered]


def _named(
    results: list[tuple[DeviceDescriptor, ProbeResult]], name: str
) -> tuple[DeviceDescriptor, ProbeResult] | None:
    # Device names are matched without regard to case (SPEC_HAL_DEVICE is read lower-cased).
    wanted = name.lower()
    return next(((d, r) for d, r in results if d.name.lower() == wanted), None)


def detect(facts: HostFacts | None = None, *, honour_override: bool = True) -> Detection:
    """Probe every vendor in priority order and choose one (cached unless ``facts`` is given or
    the override is not honoured).

    ``SPEC_HAL_DEVICE`` overrides the choice; an unknown name, or a known one whose device is not
    usable, is a :class:`DeviceSelectionError` listing the known and the usable devices. With
    ``honour_override=False`` the choice is the one without it (``spec-hal info`` explains a bad
    setting so).
    """
    if facts is None and honour_override and STATE.detection is not None:
        return STATE.detection
    results = _probe_all(facts or HostFacts())
    usable = [d.name for d, r in results if r.usable]
    known = [d.name for d, _ in results]
    override = config.device_override() if honour_override else None
    if override is not None:
        named = _named(results, override)
        if named is None:
            raise DeviceSelectionError(
                f"{config.ENV_DEVICE}={override!r} is not a known device; known: {', '.join(known)}; "
                f"present: {', '.join(usable) or 'none'}"
            )
        chosen, probe = named
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
        d, _ = chosen_pair
        skipped = [f"{other.name} ({res.reason})" for other, res in results if other.priority > d.priority]
        why = f"highest-priority usable device (priority {d.priority})"
        if skipped:
            why += "; higher priorities not usable: " + "; ".join(skipped)
        detection = Detection(d, why, tuple(r for _, r in results), False)
    if facts is None and honour_override:
        with STATE.lock:
            STATE.detection = detection
    return detection


def current_device() -> DeviceDescriptor:
    """The vendor spec_hal chose for this process (probing only; no device is initialised)."""
    return detect().device


def vendor_for(device_type: str) -> DeviceDescriptor:
    """The active vendor for tensors of ``device_type`` (``cuda`` maps to ``hip`` on ROCm torch)."""
    found = STATE.vendor_by_type.get(device_type)
    if found is not None:
        return found
    with STATE.lock:
        if device_type == "cpu" and STATE.emulated_cpu_vendor is not None:
            found = STATE.devices[STATE.emulated_cpu_vendor]
        else:
            found = _vendor_for_locked(device_type)
        STATE.vendor_by_type[device_type] = found
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
