"""CUDA bindings: the shared Triton family with Hopper launch configurations."""

from ...kernels import bind_triton_family


def register() -> None:
    bind_triton_family("cuda", "HOPPER")
