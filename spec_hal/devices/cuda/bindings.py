"""CUDA bindings: the shared Triton family with Hopper launch configurations."""

from ...kernels import bind_triton_family

bind_triton_family("cuda", "HOPPER")
