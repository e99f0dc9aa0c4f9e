"""Out-of-tree vendors, discovered through the entry-point group ``spec_hal.devices``.

An entry point names either a :class:`~spec_hal.registry.DeviceDescriptor` or a ``register()``
function whose module declares ``SPEC_HAL_API_VERSION``; the function makes the same registration
calls the built-in vendors make (``register_device``, ``register_impl``). See docs/vendors.md.

``SPEC_HAL_DEVICE`` filters plugins by entry-point name (in any case) *before* importing them, so
two vendor packages that cannot be imported together still coexist. A plugin that fails to import,
raises (``sys.exit`` and ``KeyboardInterrupt`` included), or declares another API version is
reported (a warning on the ``spec_hal`` logger, or a :class:`PluginError` under
``SPEC_HAL_STRICT=1``, which every later use of the registry raises again) and never breaks
``import spec_hal``: plugins load on first use, not at import.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points

from . import config
from ._version import API_VERSION
from .errors import PluginError

logger = logging.getLogger("spec_hal")

ENTRY_POINT_GROUP = "spec_hal.devices"


@dataclass(frozen=True)
class PluginReport:
    name: str
    target: str
    status: str  # "loaded", "skipped" or "failed"
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "target": self.target, "status": self.status, "detail": self.detail}


_reports: list[PluginReport] = []


def reports() -> list[PluginReport]:
    """What happened to each plugin found (empty until spec_hal first initialises)."""
    return list(_reports)


def _load_one(name: str, target: str, load: object) -> str:
    from .registry import DeviceDescriptor, register_device

    obj = load()  # type: ignore[operator]
    if isinstance(obj, DeviceDescriptor):
        register_device(obj)
        return f"registered device {obj.name!r}"
    if not callable(obj):
        raise PluginError(f"entry point {target!r} is neither a DeviceDescriptor nor a register() function")
    module = sys.modules.get(getattr(obj, "__module__", ""), None)
    declared = getattr(module, "SPEC_HAL_API_VERSION", None)
    if declared != API_VERSION:
        raise PluginError(
            f"declares spec_hal API version {declared!r}, this spec_hal implements {API_VERSION} "
            "(set SPEC_HAL_API_VERSION in the plugin module)"
        )
    obj()
    return "register() ran"


def load_plugins() -> None:
    """Load every plugin of the entry-point group once (called by the registry on first use)."""
    _reports.clear()
    enabled = config.plugins_enabled()
    wanted = config.device_override()  # lower-cased
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if not enabled:  # listed, never imported: info says what is switched off
            _reports.append(
                PluginReport(
                    ep.name, ep.value, "skipped", f"{config.as_set(config.ENV_PLUGINS)} disables plugins"
                )
            )
            continue
        if wanted is not None and ep.name.lower() != wanted:
            _reports.append(
                PluginReport(ep.name, ep.value, "skipped", f"{config.ENV_DEVICE}={wanted} filters it out")
            )
            continue
        try:
            detail = _load_one(ep.name, ep.value, ep.load)
        # A plugin calling sys.exit (or raising KeyboardInterrupt) while it imports is a failed
        # plugin too: it must not end the engine's process from inside an op call.
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            message = f"{type(exc).__name__}: {exc}"
            _reports.append(PluginReport(ep.name, ep.value, "failed", message))
            if config.strict():
                raise PluginError(f"spec_hal plugin {ep.name!r} ({ep.value}) failed: {message}") from exc
            logger.warning("spec_hal: plugin %s (%s) failed to load: %s", ep.name, ep.value, message)
            continue
        _reports.append(PluginReport(ep.name, ep.value, "loaded", detail))
