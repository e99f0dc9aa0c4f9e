"""MUSA bindings: the shared Triton family where MUSA's Triton supports it."""

from ...kernels import bind_triton_family


def register() -> None:
    bind_triton_family("musa", "MUSA")
