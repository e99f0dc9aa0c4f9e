"""MUSA bindings: the Triton family where MUSA's Triton supports it (when present)."""
