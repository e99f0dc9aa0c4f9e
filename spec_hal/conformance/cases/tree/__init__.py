"""Conformance cases of family C (tree build / verify / accept).

Builders return the keyword arguments of one call of ``spec_hal.ops.<op>`` on a device, outputs
poisoned (``grid.POISON_INT``), except where the spec makes a pre-fill the caller's duty
(``retrieve_next_token``/``retrieve_next_sibling`` -1, a BITPACKING mask 0).

Sampling cases use probabilities that are multiples of 1/64 and coins ``(2k+1)/128``: every sum is
exact in float32 and every coin sits at least 1/8192 (> 1e-4) from a CDF boundary, so results do
not depend on summation order.

The modules: ``builders`` (random trees and ``BUILDERS``), ``valid`` (random and edge cases),
``golden`` (hand-built cases with exact expected values) and ``bad`` (the bad-case table).
"""

from .bad import bad_cases
from .builders import (
    BUILDERS,
    build_build_tree_kernel_efficient,
    build_chain_speculative_sampling,
    build_fill_bonus_tokens,
    build_organize_draft_results,
    build_pack_ngram_full_mask,
    build_reconstruct_indices_from_tree_mask,
    build_tree_speculative_sampling_target_only,
    build_verify_tree_greedy,
)
from .valid import cases

__all__ = [
    "BUILDERS",
    "bad_cases",
    "cases",
    "build_organize_draft_results",
    "build_build_tree_kernel_efficient",
    "build_verify_tree_greedy",
    "build_tree_speculative_sampling_target_only",
    "build_chain_speculative_sampling",
    "build_fill_bonus_tokens",
    "build_pack_ngram_full_mask",
    "build_reconstruct_indices_from_tree_mask",
]
