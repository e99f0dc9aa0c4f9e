"""Exceptions raised by spec_hal.

Argument errors use the builtin classes the op contracts promise (``TypeError`` for a wrong dtype,
``ValueError`` for everything else); the classes here cover the library's own machinery.
"""

from __future__ import annotations


class SpecHalError(RuntimeError):
    """Base class of spec_hal's own errors (not argument errors)."""


class DeviceSelectionError(SpecHalError):
    """``SPEC_HAL_DEVICE`` (or an explicit device name) names an unknown or absent device."""


class BindingError(SpecHalError):
    """No provider can run an op for a device, or an override names an unknown op or provider."""


class FallbackError(BindingError):
    """Under ``SPEC_HAL_STRICT=1``: the intended provider of an op is missing or declined."""


class PluginError(SpecHalError):
    """An out-of-tree vendor plugin failed to load or declares an incompatible API (strict mode)."""


class ConfigError(SpecHalError):
    """A ``SPEC_HAL_*`` environment variable holds a value it does not accept."""
