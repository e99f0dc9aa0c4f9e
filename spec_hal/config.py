"""Environment variables read by spec_hal, in one place.

They are read when they take effect (detection, resolution, debug checks), never cached at import,
so a test or an engine can set them before first use.
"""

from __future__ import annotations

import os

from .errors import ConfigError

ENV_DEVICE = "SPEC_HAL_DEVICE"  # force the device, in any case: cuda, hip, ..., cpu, or a plugin's name
ENV_OPS = "SPEC_HAL_OPS"  # per-op provider override: "op=provider,op2=provider"
ENV_STRICT = "SPEC_HAL_STRICT"  # 1: a fallback from the intended provider is an error
ENV_DEBUG = "SPEC_HAL_DEBUG"  # 1: value checks also on accelerator tensors (host sync)
ENV_PLUGINS = "SPEC_HAL_PLUGINS"  # 0: do not load out-of-tree vendor plugins
ENV_USE_MODELSCOPE = "SPEC_HAL_USE_MODELSCOPE"  # 1: load_token_map resolves org/repo/file through ModelScope

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
#: The variables that hold a boolean, with their value when unset.
BOOLEAN_VARIABLES = {ENV_STRICT: False, ENV_DEBUG: False, ENV_PLUGINS: True, ENV_USE_MODELSCOPE: False}


def _flag(name: str) -> bool:
    """A boolean variable; any other value is a :class:`ConfigError` (``SPEC_HAL_STRICT=2`` silently
    read as off would hide the very fallbacks it was set to catch)."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:  # unset or empty
        return BOOLEAN_VARIABLES[name]
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(
        f"{name}={raw!r}: expected a boolean ({', '.join(sorted(_TRUE))} or {', '.join(sorted(_FALSE))})"
    )


def as_set(name: str) -> str:
    """``NAME=value`` as the environment sets it (messages quote the user's own spelling)."""
    return f"{name}={os.environ.get(name, '').strip()}"


def check_booleans() -> None:
    """Read every boolean variable now: a command refuses a bad value before it runs."""
    for name in BOOLEAN_VARIABLES:
        _flag(name)


def strict() -> bool:
    return _flag(ENV_STRICT)


#: ``SPEC_HAL_DEBUG`` as :func:`debug` read it; None before it is asked and after :func:`reload`. The
#: accelerators' value-check gate reads it here and calls :func:`debug` only while it is None, so
#: that a warm op call enters no function of this module.
debug_read: bool | None = None


def debug() -> bool:
    """``SPEC_HAL_DEBUG``, read on the first call that asks and kept (every accelerator op call
    asks: an environment read each time would cost more than the checks it gates); :func:`reload`
    reads it again."""
    global debug_read
    if debug_read is None:
        debug_read = _flag(ENV_DEBUG)
    return debug_read


def reload() -> None:
    """Read the cached variables again at their next use (after changing ``SPEC_HAL_DEBUG``)."""
    global debug_read
    debug_read = None


def use_modelscope() -> bool:
    return _flag(ENV_USE_MODELSCOPE)


def plugins_enabled() -> bool:
    return _flag(ENV_PLUGINS)


def device_override() -> str | None:
    value = os.environ.get(ENV_DEVICE, "").strip().lower()
    return value or None


def op_overrides() -> dict[str, str]:
    """Parse ``SPEC_HAL_OPS``; a malformed entry is a ValueError naming it."""
    raw = os.environ.get(ENV_OPS, "").strip()
    overrides: dict[str, str] = {}
    if not raw:
        return overrides
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry:
            continue
        op, sep, provider = entry.partition("=")
        if not sep or not op.strip() or not provider.strip():
            raise ValueError(f"{ENV_OPS}: entry {entry!r} is not of the form op=provider")
        overrides[op.strip()] = provider.strip()
    return overrides
