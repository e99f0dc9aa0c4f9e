"""Naive per-request Python loops: the baseline a CPU provider must beat by 10x at bs 256.

These are what an engine without vectorised ops would write; they are benchmarks' baselines only
(the tests check providers against separate oracles in the test tree).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def assign_extend_cache_locs(req_pool_indices, req_to_token, start, end, out, **_: Any) -> None:
    offset = 0
    for b in range(len(req_pool_indices)):
        row = int(req_pool_indices[b])
        for position in range(int(start[b]), int(end[b])):
            out[offset] = int(req_to_token[row, position])
            offset += 1


def assign_req_to_token_pool(req_pool_indices, req_to_token, start, end, out_cache_loc, **_: Any) -> None:
    offset = 0
    for b in range(len(req_pool_indices)):
        row = int(req_pool_indices[b])
        for position in range(int(start[b]), int(end[b])):
            req_to_token[row, position] = int(out_cache_loc[offset])
            offset += 1


def fill_accept_out_cache_loc(accept_index, out_cache_loc, accept_out_cache_loc, size=None, **_: Any) -> None:
    flat = accept_index.flatten()
    count = flat.numel() if size is None else size
    rank = 0
    for position in range(count):
        node = int(flat[position])
        if node >= 0:
            accept_out_cache_loc[rank] = int(out_cache_loc[node])
            rank += 1


def verify_tree_greedy(
    predicts,
    accept_index,
    num_correct_drafts,
    candidates,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    target_predict,
    **_: Any,
) -> None:
    target = target_predict.flatten()
    for b in range(candidates.shape[0]):
        last = int(retrieve_index[b, 0])
        accept_index[b, 0] = last
        accepted = 0
        node = 0
        for _step in range(accept_index.shape[1] - 1):
            node = int(retrieve_next_token[b, node])
            while node != -1:
                if int(candidates[b, node]) == int(target[last]):
                    predicts[last] = int(target[last])
                    accepted += 1
                    last = int(retrieve_index[b, node])
                    accept_index[b, accepted] = last
                    break
                node = int(retrieve_next_sibling[b, node])
            if node == -1:
                break
        num_correct_drafts[b] = accepted
        predicts[last] = int(target[last])


NAIVE_LOOPS: dict[str, Callable[..., None]] = {
    "assign_extend_cache_locs": assign_extend_cache_locs,
    "assign_req_to_token_pool": assign_req_to_token_pool,
    "fill_accept_out_cache_loc": fill_accept_out_cache_loc,
    "verify_tree_greedy": verify_tree_greedy,
}

__all__ = ["NAIVE_LOOPS"]
