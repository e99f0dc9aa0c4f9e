"""CUDA bindings: the shared Triton family with Hopper/Ampere launch configurations (when present)."""
