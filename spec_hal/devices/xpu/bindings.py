"""XPU bindings: the shared Triton family (Triton's XPU backend ships with XPU builds of torch)."""

from ...kernels import bind_triton_family


def register() -> None:
    bind_triton_family("xpu", "XE")
