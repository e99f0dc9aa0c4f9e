"""The one tolerance table of the suite: integer and bool outputs compare exactly; floats by dtype."""

import torch

#: (rtol, atol) per float dtype. Providers may reorder float reductions (softmax, sums), nothing more.
FLOAT_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float] | None:
    """(rtol, atol) for a float dtype, or None: compare exactly."""
    return FLOAT_TOLERANCE.get(dtype)
