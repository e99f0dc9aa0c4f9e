"""The shared Triton kernel family: one copy of each kernel, registered per vendor with that
vendor's :class:`~spec_hal.kernels.triton.config.LaunchConfig`.

Each family module (``index``, ``kv``, ``mamba``, ``tree``, ``sampling``, ``simulated``) defines its
kernels, the providers that launch them (with the op's provider signature), and
``register(vendor, config)``. Vendor bindings call :func:`register_family`; importing this package
needs Triton, so a vendor binds the family only where Triton is installed (the registry then records
a fallback for each op whose intended provider is ``triton``).
"""

from __future__ import annotations

import importlib
import os

import triton  # noqa: F401  (fail here, clearly, when Triton is absent)

from .config import INTERPRETER, LaunchConfig

FAMILIES = ("index", "kv", "mamba", "tree", "sampling", "simulated")


def interpreted() -> bool:
    """Kernels run on CPU tensors through Triton's interpreter (emulated runs, CI)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def register_family(vendor: str, config: LaunchConfig) -> list[str]:
    """Register every Triton provider of every family module present for ``vendor``; returns the ops."""
    if interpreted():
        config = INTERPRETER
    registered: list[str] = []
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{family}":
                raise
            continue
        registered += module.register(vendor, config)
    return registered
