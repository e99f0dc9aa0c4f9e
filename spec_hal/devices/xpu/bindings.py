"""XPU bindings: the shared Triton family with Xe launch configurations (when present)."""
