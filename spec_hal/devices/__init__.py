"""Built-in vendor packages. Each holds a descriptor (pure data and a probe, cheap to import), a
runtime and its bindings, imported only when first needed. Vendor packages never import each other.

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

from __future__ import annotations

from ..registry import DeviceDescriptor
from .cpu import DESCRIPTOR as CPU
from .cuda import DESCRIPTOR as CUDA
from .hip import DESCRIPTOR as HIP
from .musa import DESCRIPTOR as MUSA
from .npu import DESCRIPTOR as NPU
from .xpu import DESCRIPTOR as XPU

BUILTIN_DESCRIPTORS: tuple[DeviceDescriptor, ...] = (HIP, MUSA, CUDA, NPU, XPU, CPU)
