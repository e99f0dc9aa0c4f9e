"""CPU providers of family A (index plumbing) for the ragged copies.

The portable references keep every shape fixed by argument shapes (no host sync): each output
position binary-searches its request and the masks cost some twenty small torch ops per call. On
the CPU the host knows the data, so these providers build the exact index of the ragged runs once
(``repeat_interleave`` of the run lengths) and gather or scatter with it: a handful of ops instead
of some twenty (the bench compares both with a per-request loop). The other ops of the family are fixed-shape already; their portable
reference is the CPU code.

These providers rely on the value checks the contracts always run on CPU tensors: ids are in
range and lengths non-negative here. Under ``torch.compile`` (where the checks are skipped) an
out-of-range id makes torch's bounds-checked indexing raise instead of skipping the lane.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ... import ops

_PROVIDER = "cpu"


def _runs(lens: Tensor) -> tuple[Tensor, Tensor]:
    """For every element of the concatenated runs of lengths ``lens``: its run and its index in it."""
    lens = lens.long()
    run = torch.repeat_interleave(lens)
    run_start = torch.cumsum(lens, 0) - lens
    return run, torch.arange(run.numel()) - run_start[run]


def assign_extend_cache_locs(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, end: Tensor, out: Tensor
) -> None:
    run, within = _runs(end - start)
    out[: run.numel()] = req_to_token[req_pool_indices[run], start[run] + within]


def assign_req_to_token_pool(
    req_pool_indices: Tensor, req_to_token: Tensor, start: Tensor, end: Tensor, out_cache_loc: Tensor
) -> None:
    run, within = _runs(end - start)
    req_to_token[req_pool_indices[run], start[run] + within] = out_cache_loc[: run.numel()].to(torch.int32)


def fill_accept_out_cache_loc(
    accept_index: Tensor, out_cache_loc: Tensor, accept_out_cache_loc: Tensor, size: int
) -> None:
    considered = accept_index.reshape(-1)[:size]
    accepted = considered[considered != -1]
    accept_out_cache_loc[: accepted.numel()] = out_cache_loc[accepted]


def get_target_cache_loc(
    tgt_cache_loc: Tensor,
    to_free_slots: Tensor,
    num_correct_drafts: Tensor,
    to_free_num_slots: Tensor,
    out_cache_loc: Tensor,
    draft_token_num: int,
) -> None:
    run, within = _runs(num_correct_drafts.long() + 1)  # the first ncd+1 verify slots of each request
    tgt_cache_loc[: run.numel()] = out_cache_loc[run * draft_token_num + within]
    to_free = to_free_num_slots.long()
    run, within = _runs(to_free)  # the last to_free_num_slots verify slots
    first_freed = torch.arange(1, to_free.numel() + 1) * draft_token_num - to_free
    to_free_slots[: run.numel()] = out_cache_loc[first_freed[run] + within]


def filter_finished_cache_loc(
    out_cache_loc: Tensor, tgt_cache_loc: Tensor, num_correct_drafts: Tensor, num_accept_tokens_filter: Tensor
) -> None:
    committed = num_correct_drafts.long() + 1
    run, within = _runs(num_accept_tokens_filter)
    out_cache_loc[: run.numel()] = tgt_cache_loc[(torch.cumsum(committed, 0) - committed)[run] + within]


def generate_draft_decode_kv_indices(
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    positions: Tensor,
    page_size: int,
    topk: int,
    num_steps: int,
    kv_indices: Tensor,
    kv_indptr: Tensor,
) -> None:
    # kv_indices is usually sized for the longest context (draft_kv_indices_buffer_width); the portable
    # reference visits every column. Knowing the lengths, hand it only the columns the last step uses.
    used = topk * int(seq_lens.sum()) + seq_lens.numel() * topk * num_steps
    ops.generate_draft_decode_kv_indices.reference(
        req_pool_indices,
        req_to_token,
        seq_lens,
        positions,
        page_size,
        topk,
        num_steps,
        kv_indices[:, :used],
        kv_indptr,
    )


#: Why the CPU intends these providers (the ragged copies build their index once, with
#: repeat_interleave: about ten ops where the portable reference takes some thirty).
_RAGGED = "ragged index built once on the host (the data is on the host)"


def register() -> None:
    for provider in (
        assign_extend_cache_locs,
        assign_req_to_token_pool,
        fill_accept_out_cache_loc,
        get_target_cache_loc,
        filter_finished_cache_loc,
    ):
        getattr(ops, provider.__name__).register_impl("cpu", _PROVIDER, provider, intended=_RAGGED)
    ops.generate_draft_decode_kv_indices.register_impl(
        "cpu",
        _PROVIDER,
        generate_draft_decode_kv_indices,
        intended="fills only the used columns of each KV-index row",
    )
