"""Family D's bad conformance cases: one per broken argument of a valid call."""

from __future__ import annotations

import math
from functools import partial

import torch

from ...case import BadCase, bad_case, with_entry
from .builders import BUILDERS


def bad_cases() -> list[BadCase]:
    # The valid calls whose arguments the cases break.
    B = BUILDERS
    topk = partial(B["fast_topk"], bs=3, topk=2)
    topk_no_out = partial(topk, with_out=False)
    sample = partial(B["fast_sample"], bs=3)
    sample_draft = partial(B["sample_draft_proposal"], bs=3, top_ks="mixed")
    renorm = partial(B["renorm_draft_probs"], bs=3)
    select0 = partial(B["select_top_k_tokens"], bs=3, topk=2, step=0)
    select1 = partial(B["select_top_k_tokens"], bs=3, topk=2, step=2)
    draft = partial(B["draft_topk1_postprocess"], bs=3, columns=3)
    verify = partial(B["target_verify_topk1_postprocess"], bs=3, num_steps=3)
    extend = partial(B["draft_extend_topk1_postprocess"], bs=3)
    return [
        # D1
        bad_case("fast_topk", "int_values", topk, TypeError, "values", values=lambda x: x.long()),
        bad_case("fast_topk", "k_too_big", topk_no_out, ValueError, "k", k=65),
        bad_case("fast_topk", "k_zero", topk_no_out, ValueError, "k", k=0),
        bad_case("fast_topk", "dim_out_of_range", topk_no_out, ValueError, "dim", dim=2),
        bad_case("fast_topk", "out_dtype", topk, TypeError, r"out\[1\]", out=lambda o: (o[0], o[1].int())),
        bad_case("fast_topk", "out_shape", topk, ValueError, r"out\[0\]", out=lambda o: (o[0][:, :1], o[1])),
        # D2
        bad_case("fast_sample", "int_probs", sample, TypeError, "probs", probs=lambda x: x.long()),
        bad_case("fast_sample", "probs_1d", sample, ValueError, "probs", probs=lambda x: x.flatten()),
        bad_case("fast_sample", "num_samples_zero", sample, ValueError, "num_samples", num_samples=0, out=None),
        bad_case("fast_sample", "num_samples_above_v", sample, ValueError, "num_samples", num_samples=49, out=None),
        bad_case("fast_sample", "generator_type", sample, TypeError, "generator", generator=0),
        bad_case("fast_sample", "out_dtype", sample, TypeError, r"out\[0\]", out=lambda o: (o[0].double(), o[1])),
        bad_case("fast_sample", "out_shape", sample, ValueError, r"out\[1\]", out=lambda o: (o[0], o[1][:2])),
        # D3
        bad_case("renorm_draft_probs", "temperatures_f64", renorm, TypeError, "temperatures", temperatures=lambda x: x.double()),
        bad_case("renorm_draft_probs", "temperatures_shape", renorm, ValueError, "temperatures", temperatures=lambda x: x.flatten()),
        bad_case("renorm_draft_probs", "temperatures_missing", renorm, ValueError, "temperatures", temperatures=None),
        bad_case("renorm_draft_probs", "temperatures_device", renorm, ValueError, "temperatures", temperatures=lambda x: x.to("meta")),
        bad_case("renorm_draft_probs", "flag_not_bool", renorm, TypeError, "use_rejection_sampling", use_rejection_sampling=1),
        bad_case("renorm_draft_probs", "empty_vocabulary", renorm, ValueError, "logits", logits=lambda x: x[:, :0], probs=None),
        bad_case("renorm_draft_probs", "probs_dtype", renorm, TypeError, "probs", probs=lambda x: x.double()),
        bad_case("renorm_draft_probs", "probs_shape", renorm, ValueError, "probs", probs=lambda x: x[:, 1:]),
        bad_case("renorm_draft_probs", "zero_temperature", renorm, ValueError, "temperatures", value_check=True, temperatures=with_entry((1, 0), 0)),
        bad_case("renorm_draft_probs", "nan_temperature", renorm, ValueError, "temperatures", value_check=True, temperatures=with_entry((1, 0), math.nan)),
        # D4
        bad_case("sample_draft_proposal", "int_logits", sample_draft, TypeError, "logits", logits=lambda x: x.long()),
        bad_case("sample_draft_proposal", "temperatures_f64", sample_draft, TypeError, "temperatures", temperatures=lambda x: x.double()),
        bad_case("sample_draft_proposal", "top_ks_i16", sample_draft, TypeError, "top_ks", top_ks=lambda x: x.to(torch.int16)),
        bad_case("sample_draft_proposal", "top_ks_shape", sample_draft, ValueError, "top_ks", top_ks=lambda x: x[:2]),
        bad_case("sample_draft_proposal", "out_length", sample_draft, ValueError, "out", out=lambda o: o[:2]),
        bad_case("sample_draft_proposal", "out_x_dtype", sample_draft, TypeError, r"out\[2\]", out=lambda o: (o[0], o[1], o[2].int())),
        bad_case("sample_draft_proposal", "negative_temperature", sample_draft, ValueError, "temperatures", value_check=True, temperatures=with_entry((0, 0), -1)),
        bad_case("sample_draft_proposal", "nan_temperature", sample_draft, ValueError, "temperatures", value_check=True, temperatures=with_entry((2, 0), math.nan)),
        # D5
        bad_case("select_top_k_tokens", "negative_step", select0, ValueError, "i", i=-1),
        bad_case("select_top_k_tokens", "topk_zero", select0, ValueError, "topk", topk=0),
        bad_case("select_top_k_tokens", "topk_p_f16", select0, TypeError, "topk_p", topk_p=lambda x: x.half()),
        bad_case("select_top_k_tokens", "topk_index_i16", select0, TypeError, "topk_index", topk_index=lambda x: x.to(torch.int16)),
        bad_case("select_top_k_tokens", "topk_index_shape", select0, ValueError, "topk_index", topk_index=lambda x: x[:2]),
        bad_case("select_top_k_tokens", "scores_at_step0", select0, ValueError, "scores", scores=lambda x: torch.rand(3, 2)),
        bad_case("select_top_k_tokens", "scores_missing", select1, ValueError, "scores", scores=None),
        bad_case("select_top_k_tokens", "scores_shape", select1, ValueError, "scores", scores=lambda x: x[:, :1]),
        bad_case("select_top_k_tokens", "hidden_rows", select1, ValueError, "hidden_states", hidden_states=lambda x: x[:3]),
        bad_case("select_top_k_tokens", "out_hidden_not_none", partial(select1, hidden_size=0), ValueError, r"out\[1\]", out=lambda o: (o[0], torch.zeros(6, 1), o[2], o[3])),
        bad_case("select_top_k_tokens", "out_tree_dtype", select1, TypeError, r"out\[3\]\[1\]", out=lambda o: (o[0], o[1], o[2], (o[3][0], o[3][1].int(), o[3][2]))),
        # D6 draft
        bad_case("draft_topk1_postprocess", "logits_stride", draft, ValueError, "logits", logits=lambda x: x.t().contiguous().t()),
        bad_case("draft_topk1_postprocess", "positions_f32", draft, TypeError, "positions", positions=lambda x: x.float()),
        bad_case("draft_topk1_postprocess", "positions_shape", draft, ValueError, "positions", positions=lambda x: x[:1]),
        bad_case("draft_topk1_postprocess", "positions_expanded", draft, ValueError, "positions", positions=lambda x: x[:1].expand_as(x)),
        bad_case("draft_topk1_postprocess", "draft_tokens_i32", draft, TypeError, "draft_tokens", draft_tokens=lambda x: x.int()),
        bad_case("draft_topk1_postprocess", "column_out_of_range", draft, ValueError, "draft_token_column", draft_token_column=3),
        bad_case("draft_topk1_postprocess", "negative_column", draft, ValueError, "draft_token_column", draft_token_column=-1),
        bad_case("draft_topk1_postprocess", "positions_device", draft, ValueError, "positions", positions=lambda x: x.to("meta")),
        # positions += 1 would wrap to the dtype's minimum
        bad_case("draft_topk1_postprocess", "positions_at_dtype_max", draft, ValueError, "positions", value_check=True, positions=lambda x: x.clone().fill_(torch.iinfo(x.dtype).max)),
        # D6 verify
        bad_case("target_verify_topk1_postprocess", "logits_rows", verify, ValueError, "logits", logits=lambda x: x[1:]),
        bad_case("target_verify_topk1_postprocess", "candidates_f32", verify, TypeError, "candidates", candidates=lambda x: x.float()),
        bad_case("target_verify_topk1_postprocess", "next_token_shape", verify, ValueError, "retrieve_next_token", retrieve_next_token=lambda x: x[:, :2]),
        bad_case("target_verify_topk1_postprocess", "seq_lens_i16", verify, TypeError, "seq_lens", seq_lens=lambda x: x.to(torch.int16)),
        bad_case("target_verify_topk1_postprocess", "simulated_above_d", verify, ValueError, "num_simulated_accept_tokens", num_simulated_accept_tokens=5),
        bad_case("target_verify_topk1_postprocess", "real_tokens_without_simulation", verify, ValueError, "use_real_draft_tokens", use_real_draft_tokens=True),
        bad_case("target_verify_topk1_postprocess", "out_predicts_i64", verify, TypeError, "predicts", out=lambda o: (o[0].long(), *o[1:])),
        bad_case("target_verify_topk1_postprocess", "out_length", verify, ValueError, "out", out=lambda o: o[:7]),
        bad_case("target_verify_topk1_postprocess", "retrieve_index_out_of_range", verify, ValueError, "retrieve_index", value_check=True, retrieve_index=with_entry((1, 2), 12)),
        bad_case("target_verify_topk1_postprocess", "next_token_out_of_range", verify, ValueError, "retrieve_next_token", value_check=True, retrieve_next_token=with_entry((0, 1), 4)),
        bad_case("target_verify_topk1_postprocess", "negative_seq_len", verify, ValueError, "seq_lens", value_check=True, seq_lens=with_entry((2,), -1)),
        # new_seq_lens = seq_lens + accept_lens would wrap int64
        bad_case("target_verify_topk1_postprocess", "seq_len_at_int64_max", verify, ValueError, "seq_lens", value_check=True, seq_lens=torch.tensor([1, 2**63 - 1, 3])),
        bad_case("target_verify_topk1_postprocess", "candidate_narrowing", partial(verify, num_simulated_accept_tokens=3, use_real_draft_tokens=True), ValueError, "candidates", value_check=True, candidates=with_entry((0, 1), 2**40)),
        # D6 extend
        bad_case("draft_extend_topk1_postprocess", "row_indices_f32", extend, TypeError, "row_indices", row_indices=lambda x: x.float()),
        bad_case("draft_extend_topk1_postprocess", "row_indices_2d", extend, ValueError, "row_indices", row_indices=lambda x: x.view(3, 1)),
        bad_case("draft_extend_topk1_postprocess", "hidden_rows", extend, ValueError, "hidden_states", hidden_states=lambda x: x[1:]),
        bad_case("draft_extend_topk1_postprocess", "dsa_f32", extend, TypeError, "dsa_topk_indices", dsa_topk_indices=lambda x: x.float()),
        bad_case("draft_extend_topk1_postprocess", "out_hidden_dtype", extend, TypeError, r"out\[2\]", out=lambda o: (o[0], o[1], o[2].float(), o[3])),
        bad_case("draft_extend_topk1_postprocess", "out_dsa_missing", extend, TypeError, r"out\[3\]", out=lambda o: (o[0], o[1], o[2], None)),
        bad_case("draft_extend_topk1_postprocess", "row_out_of_range", extend, ValueError, "row_indices", value_check=True, row_indices=with_entry((1,), 10)),
        bad_case("draft_extend_topk1_postprocess", "negative_row", extend, ValueError, "row_indices", value_check=True, row_indices=with_entry((0,), -1)),
    ]  # fmt: skip
