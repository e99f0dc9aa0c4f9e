"""MUSA bindings: the shared Triton family where MUSA's Triton supports it."""

from ...kernels.triton import register_family
from ...kernels.triton.config import MUSA

register_family("musa", MUSA)
