"""HIP bindings: the shared Triton family with CDNA launch configurations (when present)."""
