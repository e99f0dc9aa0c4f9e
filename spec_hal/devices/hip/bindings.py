"""HIP bindings: the shared Triton family with CDNA launch configurations (wavefront 64)."""

from ...kernels import bind_triton_family


def register() -> None:
    bind_triton_family("hip", "CDNA")
