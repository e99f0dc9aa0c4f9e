"""Helpers for tests only. Nothing here is used by the library's normal path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..registry import REGISTRY, DeviceDescriptor


@contextmanager
def emulate(vendor: str) -> Iterator[DeviceDescriptor]:
    """Route CPU tensors to ``vendor``'s providers while the context is active (tests only).

    Use it to run a vendor's torch code on CPU tensors (with its module faked) or the shared Triton
    family under ``TRITON_INTERPRET=1``. Results obtained this way are *emulated*, never a hardware
    result. Bindings are re-resolved on entry and exit.
    """
    with REGISTRY.emulate_cpu_as(vendor) as descriptor:
        yield descriptor


@contextmanager
def isolated_registry() -> Iterator[None]:
    """Undo every device and implementation registered inside the block (tests of vendor code)."""
    with REGISTRY.isolated():
        yield


@contextmanager
def use_provider(op: str, provider: str) -> Iterator[None]:
    """Run ``op`` with ``provider`` inside the block, then restore the binding. Unlike
    ``SPEC_HAL_OPS`` it touches no environment variable and leaves every other op's binding alone."""
    with REGISTRY.force_provider(op, provider):
        yield
