"""Built-in vendor packages. Each is data: a ``DESCRIPTOR`` (probe, capabilities, intents, the
kernel families it binds with their launch configurations), which the composition root
(:mod:`spec_hal.composition`) registers through the public API, exactly as an out-of-tree plugin
registers its own. Runtimes and bindings are imported on first use. Vendor packages never import
each other.

Detection order (highest priority first) and why:

| priority | vendor | why here |
|---|---|---|
| 100 | hip  | ROCm builds of torch answer ``torch.cuda.*`` and their tensors say ``cuda``: check before CUDA |
| 90  | musa | torch_musa / torchada make ``torch.cuda.*`` calls work on Moore Threads GPUs: before CUDA |
| 80  | cuda | NVIDIA; only a CUDA build of torch (``torch.version.cuda`` set, no ``hip``) qualifies |
| 70  | npu  | Ascend through torch_npu; its own device type, no overlap with the above |
| 60  | xpu  | Intel GPUs through native ``torch.xpu``; its own device type |
| 0   | cpu  | always usable: the answer when nothing else is |
"""

from collections.abc import Sequence


def compiled_ahead_of_time(targets: Sequence[str]) -> str:
    """The evidence line of a vendor whose Triton family ``spec-hal compile`` built for ``targets``
    (a test holds the claim to the committed report)."""
    return f"compiled ahead of time for {', '.join(targets)} (spec-hal compile, docs/compile/report.json)"
