"""Triton providers of family A, index plumbing (references in ``spec_hal/ops/index/``).

Every provider takes the op's provider signature (outputs allocated by the contract), launches one
kernel and returns None. Conventions shared by every kernel here:

* Index tensors are read through their own pointer type (int32 or int64, specialised by Triton, never
  copied) and every tensor through its strides; loaded ids and all address arithmetic are int64.
* Every loaded id is bound-masked the way the portable reference masks it: a lane whose row, column
  or flat id is out of range (or -1) is neither read nor written, and output entries past the
  reference's total stay untouched.
* Latency: the ops are chains of dependent loads (request -> ``req_to_token`` row -> slot), so each
  kernel issues every load of a level before it uses any of them, and has no loop whose iterations
  wait on each other's loads. Widths known on the host (D, K*S, the page size) are constexpr: tiles
  cover them without a runtime column loop and divisions are by constants. A launch spreads the batch
  over up to ``LATENCY_PROGRAMS`` small programs.
* Ragged outputs (request b's run at the exclusive prefix sum of the run lengths) use one shared scan,
  :func:`exclusive_offsets`: a program owns a block of consecutive requests (or entries), loads their
  lengths and, in the same level, those of all earlier entries (``SCAN_CHUNKS`` loads of
  ``SCAN_BLOCK`` entries, unrolled while few) and ``tl.cumsum``-s its own block.
* Ragged copies whose length only the device knows go through :func:`copy_runs` (warp-wide column
  chunks: one iteration for the usual short runs); runs bounded on the host (at most D) are loaded
  whole with :func:`load_run` before any is stored.
* Grids depend on shapes only; nothing reads device data on the host (graph-capturable).

The stages are modules, as in ``spec_hal/ops/index/``: ``assign`` (A1-A3), ``draft_kv`` (A4),
``accept`` (A5-A7) and ``rebuild`` (A8, A9); ``_common`` holds the device helpers they share.
"""

from __future__ import annotations

from ..launcher import Launcher
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
from .draft_kv import generate_draft_decode_kv_indices
from .rebuild import align_evict_mask_to_page_size, rebuild_compact_draft_req_to_token

#: The family's launchers of this module.
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("assign_extend_cache_locs", assign_extend_cache_locs),
    Launcher("assign_extend_cache_locs_uniform", assign_extend_cache_locs_uniform),
    Launcher("assign_req_to_token_pool", assign_req_to_token_pool),
    Launcher("assign_draft_cache_locs_contiguous", assign_draft_cache_locs_contiguous),
    Launcher("generate_draft_decode_kv_indices", generate_draft_decode_kv_indices, tile="copy"),
    Launcher("fill_accept_out_cache_loc", fill_accept_out_cache_loc),
    Launcher("get_src_tgt_cache_loc", get_src_tgt_cache_loc),
    Launcher("get_target_cache_loc", get_target_cache_loc),
    Launcher("create_num_accept_tokens_filter", create_num_accept_tokens_filter),
    Launcher("filter_finished_cache_loc", filter_finished_cache_loc),
    Launcher("align_evict_mask_to_page_size", align_evict_mask_to_page_size),
    Launcher("rebuild_compact_draft_req_to_token", rebuild_compact_draft_req_to_token),
)

__all__ = ["LAUNCHERS"]
