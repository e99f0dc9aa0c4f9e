"""The shared Triton kernel family (importable only where Triton is installed)."""
