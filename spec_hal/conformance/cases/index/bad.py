"""Family A's bad conformance cases: a table, one row per broken argument of a valid call."""

from __future__ import annotations

import functools

import torch

from ...case import BadCase, BadRow, bad_cases_from, with_entry
from .builders import BUILDERS

#: Sizes of the valid call whose arguments each bad case breaks.
_BASE = {"bs": 3, "topk": 2, "num_steps": 2, "page_size": 4, "seed": 2}

#: The smallest value an int32 cannot hold.
PAST_INT32 = 2**31

A1, A1U, A2 = "assign_extend_cache_locs", "assign_extend_cache_locs_uniform", "assign_req_to_token_pool"
A3, A4, A5 = (
    "assign_draft_cache_locs_contiguous",
    "generate_draft_decode_kv_indices",
    "fill_accept_out_cache_loc",
)
A6, A6T = "get_src_tgt_cache_loc", "get_target_cache_loc"
A7, A7F = "create_num_accept_tokens_filter", "filter_finished_cache_loc"
A8, A9 = "align_evict_mask_to_page_size", "rebuild_compact_draft_req_to_token"

# One row a line, so that the table reads down.
# fmt: off
BAD_ROWS: list[BadRow] = [
    (A1, "req_to_token-int64", TypeError, "req_to_token", {"req_to_token": lambda t: t.to(torch.int64)}),
    (A1, "out-int32", TypeError, "out", {"out": lambda t: t.to(torch.int32)}),
    (A1, "start-float", TypeError, "start", {"start": lambda t: t.to(torch.float32)}),
    (A1, "end-short", ValueError, "end", {"end": lambda t: t[:-1]}),
    (A1, "out-2d", ValueError, "out", {"out": lambda t: t.view(1, -1)}),
    (A1, "out-on-meta", ValueError, "out", {"out": lambda t: t.to("meta")}),
    (A1, "rpi-out-of-range", ValueError, "req_pool_indices", {"value_check": True, "req_pool_indices": with_entry(0, 99)}),
    (A1, "end-before-start", ValueError, "end", {"value_check": True, "start": torch.tensor([5, 5, 5]), "end": torch.tensor([6, 4, 6])}),
    (A1, "end-past-row", ValueError, "end", {"value_check": True, "end": with_entry(0, 10_000)}),
    (A1, "out-too-small", ValueError, "out", {"value_check": True, "out": lambda t: t[:1]}),
    (A1U, "draft_token_num-zero", ValueError, "draft_token_num", {"draft_token_num": 0}),
    (A1U, "draft_token_num-float", TypeError, "draft_token_num", {"draft_token_num": 2.0}),
    (A1U, "out-wrong-size", ValueError, "out", {"out": lambda t: t[:-1]}),
    (A1U, "out-int32", TypeError, "out", {"out": lambda t: t.to(torch.int32)}),
    (A1U, "start-past-row", ValueError, "start", {"value_check": True, "start": with_entry(0, 10_000)}),
    (A2, "out_cache_loc-float", TypeError, "out_cache_loc", {"out_cache_loc": lambda t: t.to(torch.float32)}),
    (A2, "req_to_token-1d", ValueError, "req_to_token", {"req_to_token": lambda t: t.view(-1)}),
    (A2, "out_cache_loc-too-small", ValueError, "out_cache_loc", {"value_check": True, "out_cache_loc": lambda t: t[:1]}),
    (A2, "out_cache_loc-narrowing", ValueError, "out_cache_loc", {"value_check": True, "out_cache_loc": with_entry(0, PAST_INT32)}),
    (A2, "rpi-negative", ValueError, "req_pool_indices", {"value_check": True, "req_pool_indices": with_entry(0, -1)}),
    (A3, "topk-zero", ValueError, "topk", {"topk": 0}),
    (A3, "page_size-bool", TypeError, "page_size", {"page_size": True}),
    (A3, "out-wrong-size", ValueError, "out", {"out": lambda t: t[1:]}),
    (A3, "seq_lens-int16", TypeError, "seq_lens", {"seq_lens": lambda t: t.to(torch.int16)}),
    (A3, "seq_lens-past-row", ValueError, "seq_lens", {"value_check": True, "seq_lens": with_entry(0, 10_000)}),
    # An int64 sum inside the check would wrap below the row length.
    (A3, "seq_lens-int64-max", ValueError, "seq_lens", {"value_check": True, "seq_lens": with_entry(0, 2**63 - 1)}),
    (A4, "seq_lens-int64-max", ValueError, "seq_lens", {"value_check": True, "seq_lens": with_entry(0, 2**63 - 1)}),
    (A3, "seq_lens-negative", ValueError, "seq_lens", {"value_check": True, "seq_lens": with_entry(0, -3)}),
    (A4, "kv_indices-int64", TypeError, "kv_indices", {"kv_indices": lambda t: t.to(torch.int64)}),
    (A4, "kv_indices-rows", ValueError, "kv_indices", {"kv_indices": lambda t: t[:1]}),
    (A4, "kv_indptr-narrow", ValueError, "kv_indptr", {"kv_indptr": lambda t: t[:, :2]}),
    (A4, "positions-wrong-size", ValueError, "positions", {"positions": lambda t: t[:-1]}),
    (A4, "kv_indices-too-narrow", ValueError, "kv_indices", {"value_check": True, "kv_indices": lambda t: t[:, :3]}),
    (A4, "positions-negative", ValueError, "positions", {"value_check": True, "positions": with_entry(0, -1)}),
    # sum(positions) wraps int64 to a negative total
    (A4, "positions-sum-wraps-int64", ValueError, "positions", {"value_check": True, "positions": lambda t: torch.full_like(t, 2**62)}),
    (A4, "positions-overflow-int32", ValueError, "positions", {"value_check": True, "positions": with_entry(0, PAST_INT32)}),
    (A5, "accept_index-1d", ValueError, "accept_index", {"accept_index": lambda t: t.view(-1)}),
    (A5, "out-int32", TypeError, "accept_out_cache_loc", {"accept_out_cache_loc": lambda t: t.to(torch.int32)}),
    (A5, "size-too-large", ValueError, "size", {"size": 10_000}),
    (A5, "size-negative", ValueError, "size", {"size": -1}),
    (A5, "out-smaller-than-size", ValueError, "accept_out_cache_loc", {"size": 6, "accept_out_cache_loc": torch.zeros(5, dtype=torch.int64)}),
    (A5, "accept_index-minus-two", ValueError, "accept_index", {"value_check": True, "accept_index": with_entry((0, 0), -2)}),
    (A5, "accept_index-past-end", ValueError, "accept_index", {"value_check": True, "accept_index": with_entry((0, 0), 10_000)}),
    (A6, "out_cache_loc-wrong-size", ValueError, "out_cache_loc", {"out_cache_loc": lambda t: t[:-1]}),
    (A6, "src-int32", TypeError, "src_cache_loc", {"src_cache_loc": lambda t: t.int()}),
    (A6, "to_free-wrong-size", ValueError, "to_free_num_slots", {"to_free_num_slots": lambda t: t[:-1]}),
    (A6, "accept_index-minus-one", ValueError, "accept_index", {"value_check": True, "accept_index": with_entry(0, -1)}),
    (A6, "ncd-too-large", ValueError, "num_correct_drafts", {"value_check": True, "num_correct_drafts": with_entry(0, 100)}),
    (A6, "seq_lens-negative", ValueError, "seq_lens", {"value_check": True, "seq_lens": with_entry(0, -1)}),
    (A6T, "tgt-float", TypeError, "tgt_cache_loc", {"tgt_cache_loc": lambda t: t.to(torch.float64)}),
    (A6T, "out_cache_loc-wrong-size", ValueError, "out_cache_loc", {"out_cache_loc": lambda t: t[1:]}),
    (A6T, "tgt-too-small", ValueError, "tgt_cache_loc", {"value_check": True, "tgt_cache_loc": lambda t: t[:1]}),
    (A6T, "to_free_slots-too-small", ValueError, "to_free_slots", {"value_check": True, "to_free_num_slots": torch.tensor([1, 1, 1]), "to_free_slots": torch.zeros(2, dtype=torch.int64)}),
    (A6T, "to_free_num_slots-too-large", ValueError, "to_free_num_slots", {"value_check": True, "to_free_num_slots": with_entry(0, 100)}),
    (A6T, "ncd-negative", ValueError, "num_correct_drafts", {"value_check": True, "num_correct_drafts": with_entry(0, -1)}),
    (A7, "filter-int64", TypeError, "num_accept_tokens_filter", {"num_accept_tokens_filter": lambda t: t.to(torch.int64)}),
    (A7, "seq_lens-short", ValueError, "seq_lens", {"seq_lens": lambda t: t[:-1]}),
    (A7, "unfinished-out-of-range", ValueError, "unfinished_index", {"value_check": True, "unfinished_index": torch.tensor([3])}),
    (A7, "ncd-negative", ValueError, "num_correct_drafts", {"value_check": True, "num_correct_drafts": with_entry(0, -2)}),
    (A7, "seq_lens-int64-overflow", ValueError, "seq_lens", {"value_check": True, "seq_lens": torch.full((3,), 2**63 - 1)}),
    (A7, "seq_lens-int32-overflow", ValueError, "seq_lens", {"value_check": True, "seq_lens": torch.full((3,), PAST_INT32 - 1, dtype=torch.int32)}),
    (A7F, "tgt-float", TypeError, "tgt_cache_loc", {"tgt_cache_loc": lambda t: t.to(torch.float32)}),
    (A7F, "filter-short", ValueError, "num_accept_tokens_filter", {"num_accept_tokens_filter": lambda t: t[:-1]}),
    (A7F, "out-too-small", ValueError, "out_cache_loc", {"value_check": True, "num_accept_tokens_filter": torch.tensor([1, 1, 1]), "out_cache_loc": torch.zeros(2, dtype=torch.int64)}),
    (A7F, "filter-above-ncd", ValueError, "num_accept_tokens_filter", {"value_check": True, "num_accept_tokens_filter": with_entry(0, 100)}),
    # sum(num_correct_drafts + 1) wraps int64 to a total below len(tgt_cache_loc)
    (A7F, "ncd-sum-wraps-int64", ValueError, "tgt_cache_loc", {"value_check": True, "num_correct_drafts": lambda t: torch.full_like(t, 2**62)}),
    (A7F, "tgt-too-small", ValueError, "tgt_cache_loc", {"value_check": True, "tgt_cache_loc": lambda t: t[:1]}),
    (A8, "mask-int", TypeError, "evict_mask", {"evict_mask": lambda t: t.int()}),
    (A8, "mask-wrong-size", ValueError, "evict_mask", {"evict_mask": lambda t: t[1:]}),
    (A8, "page_size-zero", ValueError, "page_size", {"page_size": 0}),
    (A8, "seq_lens-negative", ValueError, "seq_lens", {"value_check": True, "seq_lens": with_entry(0, -1)}),
    (A9, "draft-int64", TypeError, "draft_req_to_token", {"draft_req_to_token": lambda t: t.to(torch.int64)}),
    (A9, "target-rows", ValueError, "target_req_to_token", {"target_req_to_token": lambda t: t[:-1]}),
    (A9, "verify-wrong-rows", ValueError, "verify_out_cache_loc", {"verify_out_cache_loc": lambda t: t[:-1]}),
    (A9, "prefix-past-row", ValueError, "draft_prefix_lens", {"value_check": True, "draft_prefix_lens": with_entry(0, 10_000)}),
    (A9, "suffix-past-row", ValueError, "suffix_start", {"value_check": True, "suffix_start": with_entry(0, 10_000)}),
    (A9, "verify-narrowing", ValueError, "verify_out_cache_loc", {"value_check": True, "verify_out_cache_loc": with_entry((0, 0), PAST_INT32)}),
    (A9, "rpi-out-of-range", ValueError, "req_pool_indices", {"value_check": True, "req_pool_indices": with_entry(0, 100)}),
]
# fmt: on


def bad_cases() -> list[BadCase]:
    return bad_cases_from(
        BAD_ROWS, {op: functools.partial(builder, **_BASE) for op, builder in BUILDERS.items()}
    )
