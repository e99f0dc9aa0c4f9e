"""CPU bindings: one module per op family registers its CPU providers (the portable reference is
registered for every vendor by the op's definition; a family module binds a CPU-specific provider
only where it is much faster than the portable one)."""

from . import index, kv, mamba, sampling, simulated, tree  # noqa: F401
