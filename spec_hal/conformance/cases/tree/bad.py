"""Family C's bad conformance cases: a table, one row per broken argument of a valid call."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from ...case import BadCase, BadRow, bad_cases_from, with_entry
from .builders import BUILDERS, VOCAB

ORGANIZE = "organize_draft_results"
BUILD = "build_tree_kernel_efficient"
GREEDY = "verify_tree_greedy"
TREE_SAMPLING = "tree_speculative_sampling_target_only"
CHAIN = "chain_speculative_sampling"
BONUS = "fill_bonus_tokens"
PACK = "pack_ngram_full_mask"
RECONSTRUCT = "reconstruct_indices_from_tree_mask"

# One row a line, so that the table reads down.
# fmt: off
BAD_ROWS: list[BadRow] = [
    # C1
    (ORGANIZE, "float64_scores", TypeError, "score_list", {"score_list": lambda s: [t.double() for t in s]}),
    (ORGANIZE, "float_tokens", TypeError, "token_list", {"token_list": lambda s: [t.float() for t in s]}),
    (ORGANIZE, "missing_parents", ValueError, "parents_list", {"parents_list": lambda s: s[:-1]}),
    (ORGANIZE, "too_many_nodes", ValueError, "draft_token_num", {"draft_token_num": 100}),
    (ORGANIZE, "out_int32", TypeError, r"out\[1\]", {"out": lambda o: (o[0], o[1].int(), o[2])}),
    (BUILD, "bad_mode", ValueError, "tree_mask_mode", {"tree_mask_mode": 3}),
    (BUILD, "qlen_mask_uint8", TypeError, "tree_mask", {"tree_mask": lambda m: m.to(torch.uint8)}),
    (BUILD, "float_seq_lens", TypeError, "seq_lens", {"seq_lens": lambda s: s.float()}),
    (BUILD, "negative_seq_len", ValueError, "seq_lens", {"value_check": True, "seq_lens": with_entry(0, -1)}),
    (BUILD, "selected_out_of_range", ValueError, "selected_index", {"value_check": True, "selected_index": with_entry((0, 0), 10**5)}),
    (BUILD, "parent_list_width", ValueError, "parent_list", {"parent_list": lambda p: p[:, :-1]}),
    (BUILD, "positions_int32", TypeError, "positions", {"positions": lambda p: p.int()}),
    (BUILD, "verified_id_alone", ValueError, "verified_id", {"draft_tokens": None}),
    (BUILD, "zero_topk", ValueError, "topk", {"topk": 0}),
    # C3
    (GREEDY, "predicts_int64", TypeError, "predicts", {"predicts": lambda p: p.long()}),
    (GREEDY, "accept_index_rows", ValueError, "accept_index", {"accept_index": lambda a: a[:1]}),
    (GREEDY, "float_candidates", TypeError, "candidates", {"candidates": lambda c: c.float()}),
    (GREEDY, "target_shape", ValueError, "target_predict", {"target_predict": lambda t: t[:, :-1]}),
    (GREEDY, "next_token_out_of_range", ValueError, "retrieve_next_token", {"value_check": True, "retrieve_next_token": with_entry((0, 0), 99)}),
    (GREEDY, "sibling_below_minus_one", ValueError, "retrieve_next_sibling", {"value_check": True, "retrieve_next_sibling": with_entry((0, 0), -2)}),
    (GREEDY, "retrieve_index_out_of_range", ValueError, "retrieve_index", {"value_check": True, "retrieve_index": with_entry((0, 0), 10**4)}),
    (GREEDY, "target_narrowing", ValueError, "target_predict", {"value_check": True, "target_predict": with_entry((0, 0), 2**40)}),
    # C4 tree
    (TREE_SAMPLING, "target_probs_f16", TypeError, "target_probs", {"target_probs": lambda p: p.half()}),
    (TREE_SAMPLING, "draft_probs_vocab", ValueError, "draft_probs", {"draft_probs": lambda p: p[..., :-1]}),
    (TREE_SAMPLING, "coins_shape", ValueError, "uniform_samples", {"uniform_samples": lambda u: u[:, :-1]}),
    (TREE_SAMPLING, "final_coins_f64", TypeError, "uniform_samples_for_final_sampling", {"uniform_samples_for_final_sampling": lambda u: u.double()}),
    (TREE_SAMPLING, "threshold_str", TypeError, "threshold_acc", {"threshold_acc": "1"}),
    (TREE_SAMPLING, "token_out_of_vocab", ValueError, "candidates", {"value_check": True, "candidates": with_entry((0, 0), VOCAB)}),
    # C4 chain
    (CHAIN, "accept_width", ValueError, "accept_index", {"accept_index": lambda a: a[:, :-1]}),
    (CHAIN, "draft_rows", ValueError, "draft_probs", {"draft_probs": lambda p: p[:, :-1]}),
    (CHAIN, "token_out_of_vocab", ValueError, "candidates", {"value_check": True, "candidates": with_entry((0, 0), -1)}),
    # C5
    (BONUS, "zero_len", ValueError, "accept_lens", {"value_check": True, "accept_lens": with_entry(0, 0)}),
    (BONUS, "len_past_width", ValueError, "accept_lens", {"value_check": True, "accept_lens": with_entry(0, 99)}),
    (BONUS, "bonus_int64", TypeError, "bonus_tokens", {"bonus_tokens": lambda b: b.long()}),
    (BONUS, "narrowing", ValueError, "accept_tokens", {"value_check": True, "accept_tokens": lambda t: torch.full(t.shape, 2**40, device=t.device)}),
    # C6
    (PACK, "too_small", ValueError, "full_mask", {"value_check": True, "full_mask": lambda m: m[:4]}),
    (PACK, "uint8_mask", TypeError, "draft_tree_mask", {"draft_tree_mask": lambda m: m.to(torch.uint8)}),
    (PACK, "negative_seq_len", ValueError, "seq_lens", {"value_check": True, "seq_lens": with_entry(0, -3)}),
    (RECONSTRUCT, "mask_size", ValueError, "tree_mask", {"tree_mask": lambda m: m[:-1]}),
    (RECONSTRUCT, "positions_int32", TypeError, "positions", {"positions": lambda p: p.int()}),
    (RECONSTRUCT, "zero_nodes", ValueError, "draft_token_num", {"draft_token_num": 0}),
    # positions = seq_lens + depth would wrap int64
    (BUILD, "seq_lens_at_int64_max", ValueError, "seq_lens", {"value_check": True, "seq_lens": lambda s: torch.full_like(s, 2**63 - 1)}),
    (RECONSTRUCT, "seq_lens_at_int64_max", ValueError, "seq_lens", {"value_check": True, "seq_lens": lambda s: torch.full_like(s, 2**63 - 1)}),
]

#: Rows whose valid call has other sizes than the base ones: (those sizes, the row).
RESIZED_ROWS: list[tuple[dict[str, Any], BadRow]] = [
    # C2
    ({"topk": 8, "num_steps": 5}, (BUILD, "bitpack_too_many_nodes", ValueError, "tree_mask_mode", {"tree_mask_mode": 2, "tree_mask": None})),
    ({"mode": 2, "topk": 4, "num_steps": 3}, (BUILD, "bitpack_items_too_small", TypeError, "tree_mask", {"tree_mask": lambda m: m.to(torch.uint8)})),
    ({"mode": 0}, (BUILD, "full_mask_missing", ValueError, "tree_mask", {"tree_mask": None})),
    ({"mode": 0}, (BUILD, "full_mask_too_small", ValueError, "tree_mask", {"value_check": True, "tree_mask": lambda m: m[:10]})),
    # D*sum(seq_lens) as an int64 sum would wrap below the mask's size
    ({"mode": 0}, (BUILD, "full_mask_sum_wraps_int64", ValueError, "tree_mask", {"value_check": True, "seq_lens": lambda s: torch.full_like(s, 2**62)})),
]
# fmt: on


def bad_cases() -> list[BadCase]:
    # The valid call each case breaks one argument of; chains take no topk.
    valid = {op: partial(builder, bs=3, topk=2, num_steps=3) for op, builder in BUILDERS.items()}
    for op in (CHAIN, BONUS):
        valid[op] = partial(BUILDERS[op], bs=3, num_steps=3)
    resized = [
        case
        for sizes, row in RESIZED_ROWS
        for case in bad_cases_from([row], {row[0]: partial(valid[row[0]], **sizes)})
    ]
    return bad_cases_from(BAD_ROWS, valid) + resized
