"""The size grid of the op tests (issue: cache-location and draft ops)."""

import torch

BATCH_SIZES = (0, 1, 3, 64, 257)
TOPKS = (1, 2, 4, 8)
STEPS = (1, 2, 3, 4, 5)
PAGE_SIZES = (1, 4, 16)
INDEX_DTYPES = (torch.int32, torch.int64)

#: The bench's large sizes of a pass over vocabulary rows: batches at a 128k vocabulary (32k is the
#: typical size).
LARGE_VOCABULARY_SIZES = tuple({"bs": b, "vocab": 131072} for b in (64, 512))
#: A batch of as many rows as the vendors' ``row_programs`` (or more), at a 128k vocabulary: the
#: renormalisation still splits each row over programs there (a test checks it), the rows in flight
#: far outgrowing L2.
FULL_DEVICE_BENCH_BATCH = 1024

#: Sentinels used to poison outputs before a call.
POISON_INT = -7
POISON_FLOAT = float("nan")
