"""NPU bindings: torch_npu kernels where they exist (when present)."""
