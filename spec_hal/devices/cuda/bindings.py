"""CUDA bindings: the shared Triton family with Hopper launch configurations."""

from ...kernels.triton import register_family
from ...kernels.triton.config import HOPPER

register_family("cuda", HOPPER)
