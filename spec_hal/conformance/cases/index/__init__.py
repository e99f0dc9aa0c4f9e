"""Conformance cases of family A, index plumbing (docs/ops/index.md).

Every builder takes the same keyword sizes (``bs``, ``topk``, ``num_steps``, ``page_size``,
``idx_dtype``, ``seed``; an op ignores the ones it has no use for) and returns the op's keyword
arguments on ``device``, realistic for the speculative-decoding loop, outputs poisoned with
``grid.POISON_INT`` and sized a few entries past what the op writes so that a write past the total
shows. ``req_pool_indices`` is int64 on odd seeds whatever ``idx_dtype`` is (the real mixed pattern).

The modules: ``builders`` (the draws and ``BUILDERS``), ``valid`` (random, edge and golden cases)
and ``bad`` (the bad-case table).
"""

from .bad import bad_cases
from .builders import BUILDERS, draft_token_num
from .valid import cases, grid_points

__all__ = ["BUILDERS", "bad_cases", "cases", "draft_token_num", "grid_points"]
