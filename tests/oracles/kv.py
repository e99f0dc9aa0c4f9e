"""Loop oracles for family B, written from the spec, independent of spec_hal.

Every function works on plain lists of CPU tensors and Python ints, one lane at a time.
"""

from __future__ import annotations

import torch


def move_kv_cache(
    buffers: list[torch.Tensor], tgt_loc: list[int], src_loc: list[int], segment_lens: list[int] | None = None
) -> None:
    """Per segment: copy every source row of the segment first, then write the target rows."""
    if segment_lens is None:
        segment_lens = [len(tgt_loc)]
    start = 0
    for length in segment_lens:
        lanes = [
            (tgt_loc[i], src_loc[i])
            for i in range(start, start + length)
            if tgt_loc[i] != -1 and src_loc[i] != -1
        ]
        for buffer in buffers:
            saved = [buffer[src].clone() for _, src in lanes]
            for (tgt, _), row in zip(lanes, saved, strict=True):
                buffer[tgt] = row
        start += length


def accepted_locs(
    req_pool_indices: list[int],
    req_to_token: torch.Tensor,
    seq_lens: list[int],
    num_correct_drafts: list[int],
    accept_index: list[list[int]],
    out_cache_loc: list[int],
) -> tuple[list[int], list[int]]:
    """(tgt_loc, src_loc) of B2: lane b*W + j moves accepted node j of request b; -1 elsewhere."""
    tgt_loc: list[int] = []
    src_loc: list[int] = []
    for b, row in enumerate(accept_index):
        for j, node in enumerate(row):
            if j <= num_correct_drafts[b] and node != -1:
                tgt_loc.append(int(req_to_token[req_pool_indices[b], seq_lens[b] + j]))
                src_loc.append(out_cache_loc[node])
            else:
                tgt_loc.append(-1)
                src_loc.append(-1)
    return tgt_loc, src_loc


def move_accept_tokens_to_target_kvcache(
    buffers: list[torch.Tensor], *index_args
) -> tuple[list[int], list[int]]:
    tgt_loc, src_loc = accepted_locs(*index_args)
    width = len(index_args[4][0]) if index_args[4] else 0
    move_kv_cache(buffers, tgt_loc, src_loc, [width] * len(index_args[4]))
    return tgt_loc, src_loc
