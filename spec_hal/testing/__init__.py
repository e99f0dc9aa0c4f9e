"""Helpers for tests only. Nothing here is used by the library's normal path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .. import registry


@contextmanager
def emulate(vendor: str) -> Iterator[registry.DeviceDescriptor]:
    """Route CPU tensors to ``vendor``'s providers while the context is active (tests only).

    Use it to run a vendor's torch code on CPU tensors (with its module faked) or the shared Triton
    family under ``TRITON_INTERPRET=1``. Results obtained this way are *emulated*, never a hardware
    result. Bindings are re-resolved on entry and exit.
    """
    with registry._emulate_cpu_as(vendor) as descriptor:
        yield descriptor


@contextmanager
def isolated_registry() -> Iterator[None]:
    """Undo every device and implementation registered inside the block (tests of vendor code)."""
    with registry._isolated():
        yield


@contextmanager
def use_provider(op: str, provider: str) -> Iterator[None]:
    """Force ``provider`` for ``op`` inside the block (as ``SPEC_HAL_OPS`` would), then restore."""
    import os

    from .. import config

    previous = os.environ.get(config.ENV_OPS)
    overrides = config.op_overrides()
    overrides[op] = provider
    os.environ[config.ENV_OPS] = ",".join(f"{k}={v}" for k, v in overrides.items())
    registry.invalidate()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(config.ENV_OPS, None)
        else:
            os.environ[config.ENV_OPS] = previous
        registry.invalidate()
