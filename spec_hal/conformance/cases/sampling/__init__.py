"""Conformance cases of family D (draft sampling and tree expansion), ``fast_topk`` included.

Data is drawn on the CPU from a seeded generator and moved to the device, so every device gets the
same inputs. The sampling ops (``fast_sample``, ``sample_draft_proposal``) draw their noise from a
generator of the device under test, whose stream differs per device: their random cases leave the
sampled outputs unchecked (``unchecked={"out", "result"}``); edge and golden cases whose sample does
not depend on the noise (one-hot or all-zero rows, greedy ``top_ks``) are checked exactly.
Values that a top-k ranks are distinct (ties are unspecified there); the D6 argmax cases do contain
exact ties and NaN lanes, whose outcome the spec fixes (lowest id, NaN as -1e30).

The modules: ``builders`` (draws, keys and ``BUILDERS``), ``valid`` (random, edge and golden
cases) and ``bad``.
"""

from .bad import bad_cases
from .builders import (
    BUILDERS,
    CPU,
    FLOATS,
    NO_SAMPLE_CHECK,
    build_draft_extend_topk1_postprocess,
    build_draft_topk1_postprocess,
    build_fast_sample,
    build_fast_topk,
    build_renorm_draft_probs,
    build_sample_draft_proposal,
    build_select_top_k_tokens,
    build_target_verify_topk1_postprocess,
    case_label,
    keys,
    poison,
    spread,
)
from .valid import cases

__all__ = [
    "BUILDERS",
    "CPU",
    "FLOATS",
    "NO_SAMPLE_CHECK",
    "build_fast_topk",
    "build_fast_sample",
    "build_renorm_draft_probs",
    "build_sample_draft_proposal",
    "build_select_top_k_tokens",
    "build_draft_topk1_postprocess",
    "build_target_verify_topk1_postprocess",
    "build_draft_extend_topk1_postprocess",
    "keys",
    "case_label",
    "poison",
    "spread",
    "bad_cases",
    "cases",
]
