"""Kernel families shared by several vendors (one copy each; vendors choose launch configurations)."""

from __future__ import annotations

from .. import registry


def bind_triton_family(vendor: str, config_name: str) -> None:
    """Register the shared Triton family for ``vendor`` with the named launch configuration
    (``spec_hal.kernels.triton.config``); where Triton is not installed, say so to the registry,
    which then records each Triton-intended op's fallback with that reason."""
    try:
        from .triton import config, register_family
    except ImportError as exc:
        registry.declare_unavailable(vendor, registry.TRITON, f"Triton is not installed ({exc})")
        return
    register_family(vendor, getattr(config, config_name))
