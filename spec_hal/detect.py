"""Device probes: is a vendor's software installed, is its hardware present, is it visible here?

A probe answers three questions, each with a human reason, and never raises and never creates a
device context: it reads environment variables, device nodes and sysfs, module specs (without
importing the module) and torch's build metadata. That keeps ``import spec_hal;
spec_hal.current_device()`` safe before ``fork()``.

Probes read the host through :class:`HostFacts`, so tests can describe any machine (two vendors at
once, a package without a device) without mocking the file system.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Check:
    """One probe answer: ``ok`` and why."""

    ok: bool
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "reason": self.reason}


@dataclass(frozen=True)
class ProbeResult:
    """The three answers of one vendor's probe. The vendor is usable when all three are ok."""

    vendor: str
    installed: Check
    present: Check
    visible: Check

    @property
    def usable(self) -> bool:
        return self.installed.ok and self.present.ok and self.visible.ok

    @property
    def reason(self) -> str:
        """The first failing answer's reason, or why the vendor is usable."""
        for check in (self.installed, self.present, self.visible):
            if not check.ok:
                return check.reason
        return self.visible.reason

    def to_json(self) -> dict[str, object]:
        return {
            "vendor": self.vendor,
            "usable": self.usable,
            "installed": self.installed.to_json(),
            "present": self.present.to_json(),
            "visible": self.visible.to_json(),
        }


def _find_module(name: str) -> bool:
    """True if ``name`` is importable, without importing it (a faked module in sys.modules counts)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _torch_version(attr: str) -> str | None:
    """``torch.version.<attr>`` (cuda, hip, xpu): the build torch was compiled for, or None."""
    try:
        import torch
    except Exception:  # a broken torch must not break probing
        return None
    return getattr(torch.version, attr, None)


@dataclass(frozen=True)
class HostFacts:
    """What probes may read about the host. Every field is replaceable in tests."""

    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    glob: Callable[[str], Sequence[str]] = glob.glob
    find_module: Callable[[str], bool] = _find_module
    torch_version: Callable[[str], str | None] = _torch_version
    read_text: Callable[[str], str | None] = field(default=lambda path: _read_text(path))


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def visible_from_env(facts: HostFacts, variables: Sequence[str], what: str) -> Check:
    """Visibility from the vendor's device-mask variables: an empty mask or ``-1`` hides every device."""
    for name in variables:
        value = facts.env.get(name)
        if value is None:
            continue
        value = value.strip()
        if value == "" or value.split(",")[0].strip() == "-1":
            return Check(False, f"{name}={value!r} hides every {what}")
        return Check(True, f"{name}={value!r} leaves {what}s visible")
    return Check(True, f"no device mask set ({', '.join(variables)})")


def safe_probe(vendor: str, probe: Callable[[HostFacts], ProbeResult], facts: HostFacts) -> ProbeResult:
    """Run a probe; a probe that raises is reported as not installed, never propagated."""
    try:
        result = probe(facts)
    except Exception as exc:  # probes must never break detection
        failed = Check(False, f"probe raised {type(exc).__name__}: {exc}")
        return ProbeResult(vendor, failed, Check(False, "not probed"), Check(False, "not probed"))
    if result.vendor != vendor:
        return ProbeResult(vendor, result.installed, result.present, result.visible)
    return result
