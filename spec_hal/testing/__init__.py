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
