"""HIP bindings: the shared Triton family with CDNA launch configurations (wavefront 64)."""

from ...kernels.triton import register_family
from ...kernels.triton.config import CDNA

register_family("hip", CDNA)
