"""NPU bindings: none beyond the portable references yet (see the descriptor's intent and notes).

torch_npu's own kernels (``torch.ops.npu.*``) are bound here once they are certified on Ascend
hardware; importing this module must not import torch_npu."""


def register() -> None:
    return None
