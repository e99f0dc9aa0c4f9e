"""Family A: index plumbing between ``req_to_token`` rows and flat KV slot lists .

Contracts and portable references live together: each ``_<op>_reference`` function is the op's
portable provider (and the provider signature); each public op is made by ``define_op`` from its
contract, which validates and dispatches.

Most ops here move ragged runs (one run per request, lengths known only on the device). The
portable references keep every shape fixed by the shapes of their arguments:

* a ragged *output* is filled position by position: :func:`ragged_layout` finds, for every output
  position, its run (binary search on the inclusive cumsum of the run lengths) and its index within
  the run, and positions outside every run keep their value (:func:`ragged_fill_`);
* a scatter into a table (``req_to_token``) writes the valid lanes only (:func:`scatter_valid_`).

The stages are modules: ``assign`` (A1-A3), ``draft_kv`` (A4, A10), ``accept`` (A5-A7) and
``rebuild`` (A8, A9); ``_common`` holds the helpers they share.
"""

from .accept import (
    create_num_accept_tokens_filter,
    fill_accept_out_cache_loc,
    filter_finished_cache_loc,
    get_src_tgt_cache_loc,
    get_target_cache_loc,
)
from .assign import (
    assign_draft_cache_locs_contiguous,
    assign_extend_cache_locs,
    assign_extend_cache_locs_uniform,
    assign_req_to_token_pool,
)
from .draft_kv import (
    draft_kv_indices_buffer_width,
    draft_kv_indices_used_len,
    generate_draft_decode_kv_indices,
)
from .rebuild import align_evict_mask_to_page_size, rebuild_compact_draft_req_to_token

__all__ = [
    "assign_extend_cache_locs",
    "assign_extend_cache_locs_uniform",
    "assign_req_to_token_pool",
    "assign_draft_cache_locs_contiguous",
    "generate_draft_decode_kv_indices",
    "fill_accept_out_cache_loc",
    "get_src_tgt_cache_loc",
    "get_target_cache_loc",
    "create_num_accept_tokens_filter",
    "filter_finished_cache_loc",
    "align_evict_mask_to_page_size",
    "rebuild_compact_draft_req_to_token",
    "draft_kv_indices_buffer_width",
    "draft_kv_indices_used_len",
]
