"""What the vendors that bind the shared Triton family intend per op (data shared by cuda, hip,
musa and xpu; a vendor that differs overrides single entries in its own descriptor)."""

from __future__ import annotations

from ..registry import PORTABLE, TRITON, Intent

#: Ops whose torch form is already the best device code: torch runs them in one or two fused
#: launches (a reduction, a softmax, a sort), or they are host-side compositions.
_TORCH_IS_ONE_LAUNCH = (
    "torch runs it in one or two launches (reduction/softmax/sort); a kernel does not beat it"
)

PORTABLE_ON_TRITON_VENDORS: dict[str, Intent] = {
    "fast_topk": Intent(PORTABLE, "torch.topk / torch.max are already one launch"),
    "fast_sample": Intent(PORTABLE, _TORCH_IS_ONE_LAUNCH),
    "renorm_draft_probs": Intent(PORTABLE, "a softmax: torch's fused kernel is the bandwidth-bound best"),
    "sample_draft_proposal": Intent(PORTABLE, _TORCH_IS_ONE_LAUNCH),
    "select_top_k_tokens": Intent(
        PORTABLE, "one top-k and two gathers; the hidden-state gather is a torch copy"
    ),
    "organize_draft_results": Intent(
        PORTABLE, "a sort and gathers over [bs, K + (S-1)K^2]: torch is a few launches"
    ),
    "pack_ngram_full_mask": Intent(PORTABLE, "NGRAM only; not yet in the Triton family"),
    "reconstruct_indices_from_tree_mask": Intent(PORTABLE, "NGRAM only; not yet in the Triton family"),
}

TRITON_DEFAULT = Intent(TRITON, "the shared Triton family")
