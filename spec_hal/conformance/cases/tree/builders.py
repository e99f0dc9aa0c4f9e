"""Builders of family C's conformance arguments: random trees and one builder per op (``BUILDERS``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import grid
from ...case import benched

VOCAB = 16
_PROB_UNITS = 64  # probabilities are multiples of 1/64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tree_node_count(topk: int, num_steps: int) -> int:
    """D of a tree with K children per expanded node and S steps (K = 1: a chain of S drafts)."""
    return min(1 + topk * num_steps, 1 + topk + (num_steps - 1) * topk * topk)


def _index(values: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return values.to(dtype).to(device)


def poisoned_tensor(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.full(shape, grid.POISON_INT, dtype=dtype, device=device)


def _random_parents(gen: torch.Generator, bs: int, topk: int, num_steps: int, num_nodes: int) -> torch.Tensor:
    """parent [bs, D] (-1 for the root): each node hangs under an earlier node of depth < S with
    fewer than K children."""
    parent = torch.full((bs, num_nodes), -1, dtype=torch.long)
    depth = torch.zeros(bs, num_nodes, dtype=torch.long)
    kids = torch.zeros(bs, num_nodes, dtype=torch.long)
    rows = torch.arange(bs)
    for i in range(1, num_nodes):
        allowed = (depth[:, :i] < num_steps) & (kids[:, :i] < topk)
        score = torch.rand(bs, i, generator=gen).masked_fill(~allowed, -1.0)
        chosen = score.argmax(1)
        parent[:, i] = chosen
        depth[:, i] = depth[rows, chosen] + 1
        kids[rows, chosen] += 1
    return parent


def _links(parent: torch.Tensor, shuffle: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """First child / next sibling lists (-1 = none), children ascending (or in a random order)."""
    bs, num_nodes = parent.shape
    next_token = torch.full((bs, num_nodes), -1, dtype=torch.long)
    next_sibling = torch.full((bs, num_nodes), -1, dtype=torch.long)
    rows = torch.arange(bs)
    order: Sequence[int] = range(num_nodes - 1, 0, -1)
    if shuffle is not None:
        order = (torch.randperm(num_nodes - 1, generator=shuffle) + 1).tolist()
    for i in order:
        p = parent[:, i]
        next_sibling[:, i] = next_token[rows, p]
        next_token[rows, p] = i
    return next_token, next_sibling


def _grid_probs(gen: torch.Generator, shape: tuple[int, ...], vocab: int) -> torch.Tensor:
    """Random distributions over ``vocab`` whose entries are multiples of 1/64."""
    draws = torch.randint(0, vocab, (*shape, _PROB_UNITS), generator=gen)
    # Counted in place (a one-hot of the draws would hold 64 entries per probability).
    counts = torch.zeros(*shape, vocab).scatter_add_(-1, draws, torch.ones(draws.shape))
    return counts / _PROB_UNITS


def _grid_coins(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    return (2 * torch.randint(0, _PROB_UNITS, shape, generator=gen) + 1).float() / (2 * _PROB_UNITS)


def _verify_tree(gen: torch.Generator, bs: int, topk: int, num_steps: int, idx_dtype: torch.dtype, device):
    """Common verify inputs: a random tree, its tokens and poisoned outputs."""
    num_nodes = tree_node_count(topk, num_steps)
    parent = _random_parents(gen, bs, topk, num_steps, num_nodes)
    next_token, next_sibling = _links(parent, shuffle=gen if topk > 2 else None)
    candidates = torch.randint(0, VOCAB, (bs, num_nodes), generator=gen)
    retrieve_index = torch.arange(bs)[:, None] * num_nodes + torch.arange(num_nodes)
    return parent, {
        "predicts": poisoned_tensor((bs * num_nodes,), torch.int32, device),
        "accept_index": poisoned_tensor((bs, num_steps + 1), torch.int32, device),
        "num_correct_drafts": poisoned_tensor((bs,), torch.int32, device),
        "candidates": _index(candidates, idx_dtype, device),
        "retrieve_index": _index(retrieve_index, idx_dtype, device),
        "retrieve_next_token": _index(next_token, idx_dtype, device),
        "retrieve_next_sibling": _index(next_sibling, idx_dtype, device),
    }


def build_organize_draft_results(
    device: torch.device,
    *,
    bs: int,
    topk: int,
    num_steps: int,
    idx_dtype=torch.int64,
    seed: int = 0,
    ties=False,
    num_nodes: int | None = None,
) -> dict[str, Any]:
    """EAGLE-shaped draft outputs (as select_top_k_tokens produces them)."""
    gen = _gen(seed)
    num_nodes = num_nodes or tree_node_count(topk, num_steps)
    scores, tokens, parents = [], [], []
    path_scores = torch.rand(bs, topk, generator=gen).sort(1, descending=True).values
    scores.append(path_scores[:, None, :])
    tokens.append(torch.randint(0, 1000, (bs, topk), generator=gen))
    parents.append(torch.arange(-1, topk).expand(bs, topk + 1))
    for step in range(1, num_steps):
        expand = path_scores[:, :, None] * torch.rand(bs, topk, topk, generator=gen)
        if ties:  # equal scores: the lower flat index must win
            expand = (expand * 4).round() / 4
        scores.append(expand)
        tokens.append(torch.randint(0, 1000, (bs, topk * topk), generator=gen))
        best = expand.flatten(1).topk(topk, 1)
        path_scores = best.values
        parents.append(best.indices + topk * topk * (step - 1) + topk)
    parent_width = topk * (num_steps - 1) + 1 if num_steps > 1 else 0
    return {
        "score_list": [s.float().to(device) for s in scores],
        "token_list": [_index(t, idx_dtype, device) for t in tokens],
        "parents_list": [_index(p, idx_dtype, device) for p in parents],
        "draft_token_num": num_nodes,
        "out": (
            poisoned_tensor((bs, parent_width), torch.int64, device),
            poisoned_tensor((bs, num_nodes - 1), torch.int64, device),
            poisoned_tensor((bs, num_nodes - 1), torch.int64, device),
        ),
    }


def build_build_tree_kernel_efficient(
    device: torch.device,
    *,
    bs: int,
    topk: int,
    num_steps: int,
    mode: int = 1,
    idx_dtype=torch.int64,
    seed: int = 0,
    malformed: bool = False,
    mask_dtype: torch.dtype | None = None,
    num_nodes: int | None = None,
) -> dict[str, Any]:
    """A tree from organize_draft_results' index algebra; ``malformed`` breaks some parent links."""
    gen = _gen(seed)
    drafts = build_organize_draft_results(
        torch.device("cpu"), bs=bs, topk=topk, num_steps=num_steps, seed=seed, num_nodes=num_nodes
    )
    num_nodes = drafts["draft_token_num"]
    scores = torch.cat([s.flatten(1) for s in drafts["score_list"]], 1)
    selected = scores.topk(num_nodes - 1, 1).indices.sort(1).values
    parent_list = (
        torch.cat(drafts["parents_list"][:-1], 1) if num_steps > 1 else torch.zeros(bs, 0, dtype=torch.long)
    )
    if malformed and parent_list.shape[1] > 1:
        broken = torch.rand(parent_list.shape, generator=gen) < 0.3
        broken[:, 0] = False
        parent_list = torch.where(broken, torch.full_like(parent_list, 10**6), parent_list)
    seq_lens = torch.randint(0, 40, (bs,), generator=gen)
    kwargs: dict[str, Any] = {
        "parent_list": _index(parent_list, idx_dtype, device),
        "selected_index": _index(selected, idx_dtype, device),
        "seq_lens": _index(seq_lens, idx_dtype, device),
        "topk": topk,
        "num_steps": num_steps,
        "draft_token_num": num_nodes,
        "tree_mask_mode": mode,
        "positions": poisoned_tensor((bs * num_nodes,), torch.int64, device),
        "retrieve_index": poisoned_tensor((bs, num_nodes), torch.int64, device),
        "retrieve_next_token": torch.full((bs, num_nodes), -1, dtype=torch.int64, device=device),
        "retrieve_next_sibling": torch.full((bs, num_nodes), -1, dtype=torch.int64, device=device),
        "verified_id": _index(torch.randint(0, 1000, (bs,), generator=gen), idx_dtype, device),
        "draft_tokens": _index(torch.randint(0, 1000, (bs, num_nodes - 1), generator=gen), idx_dtype, device),
    }
    if mode == 0:  # random content, 7 spare entries: prefix and spare entries must stay as they are
        size = num_nodes * int(seq_lens.sum()) + bs * num_nodes * num_nodes + 7
        kwargs["tree_mask"] = (torch.rand(size, generator=gen) < 0.5).to(device)
    elif mode == 1:
        kwargs["tree_mask"] = (torch.rand(bs * num_nodes * num_nodes, generator=gen) < 0.5).to(device)
    else:
        dtype = mask_dtype or next(
            d for n, d in ((8, torch.uint8), (16, torch.uint16), (32, torch.uint32)) if num_nodes <= n
        )
        kwargs["tree_mask"] = torch.zeros(bs * num_nodes, dtype=dtype, device=device)
    return kwargs


def build_verify_tree_greedy(
    device: torch.device, *, bs: int, topk: int, num_steps: int, idx_dtype=torch.int64, seed: int = 0
) -> dict[str, Any]:
    """A random tree whose target argmax follows one of the children most of the time."""
    gen = _gen(seed)
    parent, kwargs = _verify_tree(gen, bs, topk, num_steps, idx_dtype, device)
    num_nodes = parent.shape[1]
    candidates = kwargs["candidates"].cpu().long()
    is_child = parent[:, None, :] == torch.arange(num_nodes)[:, None]  # [b, x, y]: y is a child of x
    pick = torch.rand(bs, num_nodes, num_nodes, generator=gen).masked_fill(~is_child, -1.0).argmax(2)
    follows = is_child.any(2) & (torch.rand(bs, num_nodes, generator=gen) < 0.8)
    target = torch.where(
        follows, candidates.gather(1, pick), torch.randint(0, VOCAB, (bs, num_nodes), generator=gen)
    )
    kwargs["target_predict"] = _index(target, idx_dtype, device)
    return kwargs


@benched(large_sizes=({"bs": 64, "vocab": 32768}, {"bs": 64, "vocab": 131072}, {"bs": 256, "vocab": 131072}))
def build_tree_speculative_sampling_target_only(
    device: torch.device,
    *,
    bs: int,
    topk: int,
    num_steps: int,
    idx_dtype=torch.int64,
    seed: int = 0,
    draft_zero: bool = True,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    vocab: int = VOCAB,
) -> dict[str, Any]:
    """``vocab``: V of the probability rows (the bench's real vocabularies; tokens stay below it)."""
    gen = _gen(seed)
    parent, kwargs = _verify_tree(gen, bs, topk, num_steps, idx_dtype, device)
    num_nodes = parent.shape[1]
    # Tokens from a quarter of the vocabulary: children carry more mass, so deeper paths are accepted.
    kwargs["candidates"] = _index(
        torch.randint(0, vocab // 4, (bs, num_nodes), generator=gen), idx_dtype, device
    )
    target = _grid_probs(gen, (bs, num_nodes), vocab // 4)
    target = torch.cat([target, torch.zeros(bs, num_nodes, vocab - vocab // 4)], 2)
    draft = torch.zeros(bs, num_nodes, vocab) if draft_zero else _grid_probs(gen, (bs, num_nodes), vocab)
    kwargs.update(
        uniform_samples=_grid_coins(gen, (bs, num_nodes)).to(device),
        uniform_samples_for_final_sampling=_grid_coins(gen, (bs,)).to(device),
        target_probs=target.to(device),
        draft_probs=draft.to(device),
        threshold_single=threshold_single,
        threshold_acc=threshold_acc,
    )
    return kwargs


@benched(large_sizes=({"bs": 64, "vocab": 32768}, {"bs": 64, "vocab": 131072}, {"bs": 512, "vocab": 131072}))
def build_chain_speculative_sampling(
    device: torch.device,
    *,
    bs: int,
    num_steps: int,
    idx_dtype=torch.int64,
    seed: int = 0,
    full_draft_rows: bool = False,
    nan_rows: bool = False,
    topk: int = 1,
    vocab: int = VOCAB,
) -> dict[str, Any]:
    """A chain of S drafts drawn from the draft distributions over ``vocab`` tokens."""
    gen = _gen(seed)
    num_nodes = num_steps + 1
    target = _grid_probs(gen, (bs, num_nodes), vocab)
    draft = _grid_probs(gen, (bs, num_nodes if full_draft_rows else num_nodes - 1), vocab)
    draft_rows = draft[:, : num_nodes - 1].reshape(-1, vocab)
    drafted = torch.multinomial(draft_rows, 1, generator=gen).view(bs, num_nodes - 1)
    candidates = torch.cat([torch.randint(0, vocab, (bs, 1), generator=gen), drafted], 1)
    if nan_rows:
        draft[torch.rand(bs, generator=gen) < 0.3] = float("nan")
    retrieve_index = torch.arange(bs)[:, None] * num_nodes + torch.arange(num_nodes)
    return {
        "predicts": poisoned_tensor((bs * num_nodes,), torch.int32, device),
        "accept_index": poisoned_tensor((bs, num_nodes), torch.int32, device),
        "num_correct_drafts": poisoned_tensor((bs,), torch.int32, device),
        "candidates": _index(candidates, idx_dtype, device),
        "retrieve_index": _index(retrieve_index, idx_dtype, device),
        "uniform_samples": _grid_coins(gen, (bs, num_nodes)).to(device),
        "uniform_samples_for_final_sampling": _grid_coins(gen, (bs,)).to(device),
        "target_probs": target.to(device),
        "draft_probs": draft.to(device),
    }


def build_fill_bonus_tokens(
    device: torch.device, *, bs: int, num_steps: int, idx_dtype=torch.int64, seed: int = 0, topk: int = 1
) -> dict[str, Any]:
    gen = _gen(seed)
    width = num_steps + 1
    return {
        "accept_tokens": _index(torch.randint(0, 50000, (bs, width), generator=gen), idx_dtype, device),
        "accept_lens": _index(torch.randint(1, width + 1, (bs,), generator=gen), idx_dtype, device),
        "bonus_tokens": poisoned_tensor((bs,), torch.int32, device),
    }


def _random_tree_mask(gen: torch.Generator, bs: int, topk: int, num_steps: int) -> torch.Tensor:
    """QLEN masks [bs, D, D] of random trees (ancestors and self set), with noise above the diagonal."""
    num_nodes = tree_node_count(topk, num_steps)
    parent = _random_parents(gen, bs, topk, num_steps, num_nodes)
    mask = torch.eye(num_nodes, dtype=torch.bool).repeat(bs, 1, 1)
    for i in range(1, num_nodes):
        mask[:, i] |= mask[torch.arange(bs), parent[:, i]]
    noise = torch.rand(bs, num_nodes, num_nodes, generator=gen) < 0.3
    return mask | (noise & torch.ones(num_nodes, num_nodes, dtype=torch.bool).triu(1))


def build_pack_ngram_full_mask(
    device: torch.device, *, bs: int, topk: int, num_steps: int, idx_dtype=torch.int64, seed: int = 0
) -> dict[str, Any]:
    gen = _gen(seed)
    mask = _random_tree_mask(gen, bs, topk, num_steps)
    num_nodes = mask.shape[1]
    seq_lens = torch.randint(0, 30, (bs,), generator=gen)
    size = num_nodes * int(seq_lens.sum()) + bs * num_nodes * num_nodes + 5
    return {
        "draft_tree_mask": mask.flatten().to(device),
        "seq_lens": _index(seq_lens, idx_dtype, device),
        "draft_token_num": num_nodes,
        "full_mask": (torch.rand(size, generator=gen) < 0.5).to(device),
    }


def build_reconstruct_indices_from_tree_mask(
    device: torch.device, *, bs: int, topk: int, num_steps: int, idx_dtype=torch.int64, seed: int = 0
) -> dict[str, Any]:
    gen = _gen(seed)
    mask = _random_tree_mask(gen, bs, topk, num_steps)
    num_nodes = mask.shape[1]
    return {
        "tree_mask": mask.flatten().to(device),
        "seq_lens": _index(torch.randint(0, 100, (bs,), generator=gen), idx_dtype, device),
        "draft_token_num": num_nodes,
        "positions": poisoned_tensor((bs * num_nodes,), torch.int64, device),
        "retrieve_index": poisoned_tensor((bs, num_nodes), torch.int64, device),
        "retrieve_next_token": poisoned_tensor((bs, num_nodes), torch.int64, device),
        "retrieve_next_sibling": poisoned_tensor((bs, num_nodes), torch.int64, device),
    }


BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "organize_draft_results": build_organize_draft_results,
    "build_tree_kernel_efficient": build_build_tree_kernel_efficient,
    "verify_tree_greedy": build_verify_tree_greedy,
    "tree_speculative_sampling_target_only": build_tree_speculative_sampling_target_only,
    "chain_speculative_sampling": build_chain_speculative_sampling,
    "fill_bonus_tokens": build_fill_bonus_tokens,
    "pack_ngram_full_mask": build_pack_ngram_full_mask,
    "reconstruct_indices_from_tree_mask": build_reconstruct_indices_from_tree_mask,
}
