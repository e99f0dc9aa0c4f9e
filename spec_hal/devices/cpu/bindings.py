"""CPU bindings: one module per op family holds its CPU providers (the portable reference is
registered for every vendor by the op's definition; a family module binds a CPU-specific provider
only where it is much faster than the portable one). Only family A has CPU-specific providers."""

from . import index


def register() -> None:
    index.register()
