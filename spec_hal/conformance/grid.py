"""The size grid of the op tests (issue: cache-location and draft ops)."""

import torch

BATCH_SIZES = (0, 1, 3, 64, 257)
TOPKS = (1, 2, 4, 8)
STEPS = (1, 2, 3, 4, 5)
PAGE_SIZES = (1, 4, 16)
INDEX_DTYPES = (torch.int32, torch.int64)

#: Sentinels used to poison outputs before a call.
POISON_INT = -7
POISON_FLOAT = float("nan")
