"""Family C: draft tree build, verify and accept .

Contracts and portable references live together: each ``_<op>_reference`` function is the op's
portable provider (and the provider signature); each public op is made by ``define_op`` from its
contract, which validates and dispatches.

Every portable reference works on the whole batch at once with shapes fixed by its arguments. Trees
are small (D nodes, depth S, accept width W), so the references loop over those sizes only:

* a node's parent, first child and next sibling come from ``[bs, D, D]`` comparisons;
* the verify walks (greedy and sampling) take W-1 synchronous steps for all requests; each step
  looks at the current node's whole child list at once (:class:`ChildLists`, pointer doubling
  over ``retrieve_next_sibling``), so the per-sibling loop of the kernels becomes a
  first-match reduction (:func:`walk_tree`, shared by greedy verify and tree sampling);
* outputs indexed by data (``predicts``, the FULL_MASK buffer, ``draft_probs``) are written through
  helpers that never write a masked or out-of-range lane.
"""

from ..._constants import FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING, TreeMaskMode
from .build import build_tree_kernel_efficient, organize_draft_results
from .ngram import pack_ngram_full_mask, reconstruct_indices_from_tree_mask
from .verify import (
    chain_speculative_sampling,
    fill_bonus_tokens,
    tree_speculative_sampling_target_only,
    verify_tree_greedy,
)

__all__ = [
    "TreeMaskMode",
    "FULL_MASK",
    "QLEN_ONLY",
    "QLEN_ONLY_BITPACKING",
    "organize_draft_results",
    "build_tree_kernel_efficient",
    "verify_tree_greedy",
    "tree_speculative_sampling_target_only",
    "chain_speculative_sampling",
    "fill_bonus_tokens",
    "pack_ngram_full_mask",
    "reconstruct_indices_from_tree_mask",
]
