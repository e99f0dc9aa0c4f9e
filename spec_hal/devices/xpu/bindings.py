"""XPU bindings: the shared Triton family (Triton's XPU backend ships with XPU builds of torch)."""

from ...kernels.triton import register_family
from ...kernels.triton.config import XE

register_family("xpu", XE)
