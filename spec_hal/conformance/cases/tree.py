"""Conformance cases of family C (tree build / verify / accept).

Builders return the keyword arguments of one call of ``spec_hal.ops.<op>`` on a device, outputs
poisoned (``grid.POISON_INT``), except where the spec makes a pre-fill the caller's duty
(``retrieve_next_token``/``retrieve_next_sibling`` -1, a BITPACKING mask 0).

Sampling cases use probabilities that are multiples of 1/64 and coins ``(2k+1)/128``: every sum is
exact in float32 and every coin sits at least 1/8192 (> 1e-4) from a CDF boundary, so results do
not depend on summation order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch

from .. import grid
from ..case import BadCase, Case, bad_case, with_entry

_VOCAB = 16
_PROB_UNITS = 64  # probabilities are multiples of 1/64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _num_nodes(topk: int, num_steps: int) -> int:
    """D of a tree with K children per expanded node and S steps (K = 1: a chain of S drafts)."""
    return min(1 + topk * num_steps, 1 + topk + (num_steps - 1) * topk * topk)


def _index(values: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return values.to(dtype).to(device)


def _poisoned(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.full(shape, grid.POISON_INT, dtype=dtype, device=device)


# --------------------------------------------------------------------------------------------------
# Random trees


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
    num_nodes = _num_nodes(topk, num_steps)
    parent = _random_parents(gen, bs, topk, num_steps, num_nodes)
    next_token, next_sibling = _links(parent, shuffle=gen if topk > 2 else None)
    candidates = torch.randint(0, _VOCAB, (bs, num_nodes), generator=gen)
    retrieve_index = torch.arange(bs)[:, None] * num_nodes + torch.arange(num_nodes)
    return parent, {
        "predicts": _poisoned((bs * num_nodes,), torch.int32, device),
        "accept_index": _poisoned((bs, num_steps + 1), torch.int32, device),
        "num_correct_drafts": _poisoned((bs,), torch.int32, device),
        "candidates": _index(candidates, idx_dtype, device),
        "retrieve_index": _index(retrieve_index, idx_dtype, device),
        "retrieve_next_token": _index(next_token, idx_dtype, device),
        "retrieve_next_sibling": _index(next_sibling, idx_dtype, device),
    }


# --------------------------------------------------------------------------------------------------
# Builders


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
    num_nodes = num_nodes or _num_nodes(topk, num_steps)
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
            _poisoned((bs, parent_width), torch.int64, device),
            _poisoned((bs, num_nodes - 1), torch.int64, device),
            _poisoned((bs, num_nodes - 1), torch.int64, device),
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
        "positions": _poisoned((bs * num_nodes,), torch.int64, device),
        "retrieve_index": _poisoned((bs, num_nodes), torch.int64, device),
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
        follows, candidates.gather(1, pick), torch.randint(0, _VOCAB, (bs, num_nodes), generator=gen)
    )
    kwargs["target_predict"] = _index(target, idx_dtype, device)
    return kwargs


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
    vocab: int = _VOCAB,
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
    vocab: int = _VOCAB,
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
        "predicts": _poisoned((bs * num_nodes,), torch.int32, device),
        "accept_index": _poisoned((bs, num_nodes), torch.int32, device),
        "num_correct_drafts": _poisoned((bs,), torch.int32, device),
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
        "bonus_tokens": _poisoned((bs,), torch.int32, device),
    }


def _random_tree_mask(gen: torch.Generator, bs: int, topk: int, num_steps: int) -> torch.Tensor:
    """QLEN masks [bs, D, D] of random trees (ancestors and self set), with noise above the diagonal."""
    num_nodes = _num_nodes(topk, num_steps)
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
        "positions": _poisoned((bs * num_nodes,), torch.int64, device),
        "retrieve_index": _poisoned((bs, num_nodes), torch.int64, device),
        "retrieve_next_token": _poisoned((bs, num_nodes), torch.int64, device),
        "retrieve_next_sibling": _poisoned((bs, num_nodes), torch.int64, device),
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


# --------------------------------------------------------------------------------------------------
# Cases


def _sizes() -> list[dict[str, Any]]:
    """A covering walk of the grid (every bs, K, S and index dtype appears; no full product)."""
    sizes = []
    for n, bs in enumerate(grid.BATCH_SIZES):
        for m, topk in enumerate(grid.TOPKS):
            num_steps = grid.STEPS[(n + m) % len(grid.STEPS)]
            if bs > 64 and topk * num_steps > 16:
                continue  # large batches with large trees add time, not coverage
            idx_dtype = grid.INDEX_DTYPES[(n + m) % 2]
            sizes.append(
                {"bs": bs, "topk": topk, "num_steps": num_steps, "idx_dtype": idx_dtype, "seed": 7 * n + m}
            )
    return sizes


def _case(op: str, name: str, kind="random", expected=None, unchecked=(), **sizes: Any) -> Case:
    builder = BUILDERS[op]
    small = sizes.get("bs", 0) <= 3
    return Case(
        op,
        name,
        kind,
        lambda device: builder(device, **sizes),
        expected=expected,
        small=small,
        unchecked=frozenset(unchecked),
    )


def _label(sizes: dict[str, Any]) -> str:
    dtype = str(sizes["idx_dtype"]).replace("torch.", "")
    return f"bs{sizes['bs']}_k{sizes['topk']}_s{sizes['num_steps']}_{dtype}"


def cases() -> list[Case]:
    out: list[Case] = []
    for n, sizes in enumerate(_sizes()):
        label = _label(sizes)
        for op in ("organize_draft_results", "verify_tree_greedy", "pack_ngram_full_mask"):
            out.append(_case(op, label, **sizes))
        out.append(_case("reconstruct_indices_from_tree_mask", label, **sizes))
        # The mask modes rotate over the sizes (BITPACKING only fits D <= 32).
        fits_bitpack = _num_nodes(sizes["topk"], sizes["num_steps"]) <= 32
        mode = n % 3 if fits_bitpack else n % 2
        out.append(_case("build_tree_kernel_efficient", f"{label}_mode{mode}", mode=mode, **sizes))
        if n % 2:
            malformed = dict(sizes, seed=sizes["seed"] + 1000)
            mode = (n + 1) % 3 if fits_bitpack else 1
            name = f"{label}_malformed_mode{mode}"
            out.append(_case("build_tree_kernel_efficient", name, mode=mode, malformed=True, **malformed))
        out.append(_case("tree_speculative_sampling_target_only", label, unchecked=("draft_probs",), **sizes))
        chain = {k: v for k, v in sizes.items() if k != "topk"}
        out.append(_case("chain_speculative_sampling", label, **chain))
        out.append(_case("fill_bonus_tokens", label, **chain))
    # Edge variants.
    base = {"bs": 3, "topk": 4, "num_steps": 3, "idx_dtype": torch.int32, "seed": 5}
    # Rows wider than a kernel loads whole with the lengths (another code path).
    out.append(
        _case("fill_bonus_tokens", "wide_rows", kind="edge", bs=3, num_steps=20, idx_dtype=torch.int32)
    )
    out.append(_case("organize_draft_results", "ties", kind="edge", ties=True, **base))
    out.append(
        _case("build_tree_kernel_efficient", "malformed_full_mask", "edge", mode=0, malformed=True, **base)
    )
    out.append(
        _case("build_tree_kernel_efficient", "malformed_bitpack", "edge", mode=2, malformed=True, **base)
    )
    out.append(
        _case(
            "build_tree_kernel_efficient",
            "bitpack_int64_items",
            "edge",
            mode=2,
            mask_dtype=torch.int64,
            **base,
        )
    )
    out.append(_case("build_tree_kernel_efficient", "bitpack_d32", "edge", mode=2, num_nodes=32, **base))
    out.append(
        _case(
            "tree_speculative_sampling_target_only",
            "nonzero_draft_thresholds",
            "edge",
            unchecked=("draft_probs",),
            draft_zero=False,
            threshold_single=0.25,
            threshold_acc=0.5,
            **base,
        )
    )
    # sglang's thresholds (0, 0): children of target probability 0 are accepted (p >= 0).
    out.append(
        _case(
            "tree_speculative_sampling_target_only",
            "zero_thresholds",
            "edge",
            unchecked=("draft_probs",),
            threshold_single=0.0,
            threshold_acc=0.0,
            **base,
        )
    )
    chain = {k: v for k, v in base.items() if k != "topk"}
    out.append(_case("chain_speculative_sampling", "draft_rows_d", "edge", full_draft_rows=True, **chain))
    out.append(_case("chain_speculative_sampling", "nan_draft_rows", "edge", nan_rows=True, **chain))
    out.extend(_golden_cases())
    return out


# --------------------------------------------------------------------------------------------------
# Golden cases (hand-built, exact expected values)

# The tree of the golden cases: K = 2, S = 2, D = 5.
#   step 0 scores (flat 0, 1); step 1 expands node 0 (flat 2, 3) and node 1 (flat 4, 5).
#   selected = [0, 1, 2, 4] -> nodes 1..4; parent_list = [-1, 0, 1] (slot 1 -> flat 0, slot 2 -> flat 1)
#   node 1 (flat 0) and node 2 (flat 1) are root children; node 3 (flat 2) under node 1, node 4 (flat 4)
#   under node 2.
_GOLDEN_PARENTS = [[-1, 0, 1]]
_GOLDEN_SELECTED = [[0, 1, 2, 4]]


def _golden_build(mode: int, parent_list=_GOLDEN_PARENTS):
    def build(device):
        kwargs = {
            "parent_list": torch.tensor(parent_list, device=device),
            "selected_index": torch.tensor(_GOLDEN_SELECTED, device=device),
            "seq_lens": torch.tensor([3], device=device),
            "topk": 2,
            "num_steps": 2,
            "draft_token_num": 5,
            "tree_mask_mode": mode,
            "positions": _poisoned((5,), torch.int64, device),
            "retrieve_index": _poisoned((1, 5), torch.int64, device),
            "retrieve_next_token": torch.full((1, 5), -1, dtype=torch.int64, device=device),
            "retrieve_next_sibling": torch.full((1, 5), -1, dtype=torch.int64, device=device),
        }
        if mode == 0:
            kwargs["tree_mask"] = torch.zeros(3 * 5 + 25 + 2, dtype=torch.bool, device=device)
        elif mode == 1:
            kwargs["tree_mask"] = torch.ones(25, dtype=torch.bool, device=device)
        else:
            kwargs["tree_mask"] = torch.zeros(5, dtype=torch.uint8, device=device)
        return kwargs

    return build


_GOLDEN_ROWS = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]]


def _golden_expected(mode: int):
    def expected():
        rows = torch.tensor(_GOLDEN_ROWS, dtype=torch.bool)
        if mode == 0:
            mask = torch.zeros(42, dtype=torch.bool)
            for i in range(5):
                mask[i * 8 + 3 : i * 8 + 8] = rows[i]
        elif mode == 1:
            mask = rows.flatten()
        else:
            mask = torch.tensor([1, 3, 5, 11, 21], dtype=torch.uint8)
        return {
            "tree_mask": mask,
            "positions": torch.tensor([3, 4, 4, 5, 5]),
            "retrieve_index": torch.tensor([[0, 1, 2, 3, 4]]),
            "retrieve_next_token": torch.tensor([[1, 3, 4, -1, -1]]),
            "retrieve_next_sibling": torch.tensor([[-1, 2, -1, -1, -1]]),
        }

    return expected


def _golden_malformed_expected():
    # parent_list slot 2 points at flat 9, which is not selected: node 4 is INVALID (no links; its
    # mask row holds the root and itself; depth 1).
    result = _golden_expected(1)()
    result["tree_mask"] = torch.tensor(_GOLDEN_ROWS[:4] + [[1, 0, 0, 0, 1]], dtype=torch.bool).flatten()
    result["positions"] = torch.tensor([3, 4, 4, 5, 4])
    result["retrieve_next_token"] = torch.tensor([[1, 3, -1, -1, -1]])
    return result


def _golden_greedy(device):
    # Tree of the build golden; tokens: root 10, node1 20, node2 21, node3 30, node4 31.
    # Target: after the root 21 (node 2, the second sibling), after node 2 31 (node 4), after node 4 99.
    return {
        "predicts": torch.zeros(5, dtype=torch.int32, device=device),
        "accept_index": torch.full((1, 3), -1, dtype=torch.int32, device=device),
        "num_correct_drafts": _poisoned((1,), torch.int32, device),
        "candidates": torch.tensor([[10, 20, 21, 30, 31]], device=device),
        "retrieve_index": torch.tensor([[0, 1, 2, 3, 4]], device=device),
        "retrieve_next_token": torch.tensor([[1, 3, 4, -1, -1]], device=device),
        "retrieve_next_sibling": torch.tensor([[-1, 2, -1, -1, -1]], device=device),
        "target_predict": torch.tensor([[21, 7, 31, 8, 99]], device=device),
    }


def _golden_greedy_expected():
    return {
        "predicts": torch.tensor([21, 0, 31, 0, 99], dtype=torch.int32),
        "accept_index": torch.tensor([[0, 2, 4]], dtype=torch.int32),
        "num_correct_drafts": torch.tensor([2], dtype=torch.int32),
    }


def _golden_sampling(device):
    # Same tree, V = 4. Root children tokens 1 (node 1), 2 (node 2); coin 0.6:
    # acc after token 1 = 0.25 < 0.6 (rejected: draft_probs[0, 0, 1] = 0.25), after token 2 = 0.75 >= 0.6:
    # node 2 accepted. Node 2's child node 4 (token 3): coin 0.9 > p = 0.5: rejected
    # (draft_probs[0, 2, 3] = 0.5). Bonus from relu(target[2] - draft[2]) = [0.25, 0.25, 0, 0],
    # coin 0.7 * 0.5 = 0.35 -> running sums 0.25, 0.5: token 1.
    kwargs = _golden_greedy(device)
    del kwargs["target_predict"]
    kwargs["candidates"] = torch.tensor([[0, 1, 2, 0, 3]], device=device)
    target = torch.full((1, 5, 4), 0.25)
    target[0, 0] = torch.tensor([0.25, 0.25, 0.5, 0.0])
    target[0, 2] = torch.tensor([0.25, 0.25, 0.0, 0.5])
    kwargs.update(
        uniform_samples=torch.tensor([[0.6, 0.1, 0.9, 0.1, 0.1]], device=device),
        uniform_samples_for_final_sampling=torch.tensor([0.7], device=device),
        target_probs=target.to(device),
        draft_probs=torch.zeros(1, 5, 4, device=device),
    )
    return kwargs


def _golden_sampling_expected():
    draft = torch.zeros(1, 5, 4)
    draft[0, 0, 1] = 0.25
    draft[0, 2, 3] = 0.5
    return {
        "predicts": torch.tensor([2, 0, 1, 0, 0], dtype=torch.int32),
        "accept_index": torch.tensor([[0, 2, -1]], dtype=torch.int32),
        "num_correct_drafts": torch.tensor([1], dtype=torch.int32),
        "draft_probs": draft,
    }


def _golden_zero_thresholds(device):
    # Same tree, V = 4, thresholds (0, 0) as sglang's own test uses them: only threshold_acc is
    # clamped, so a child of target probability 0 is accepted (p >= threshold_single = 0). Node 1
    # (token 1, p = 0 under the root) is accepted, then node 3 (token 3, p = 0 under node 1): all
    # W - 1 accepted, the bonus is sampled from node 3's target row [0, 0, 0.25, 0.75] with coin
    # 0.7 -> token 3. (Clamping threshold_single too would reject node 1 and accept node 2.)
    kwargs = _golden_sampling(device)
    kwargs["candidates"] = torch.tensor([[0, 1, 2, 3, 0]], device=device)
    target = torch.full((1, 5, 4), 0.25)
    target[0, 0] = torch.tensor([0.5, 0.0, 0.5, 0.0])
    target[0, 1] = torch.tensor([0.25, 0.25, 0.5, 0.0])
    target[0, 3] = torch.tensor([0.0, 0.0, 0.25, 0.75])
    kwargs.update(target_probs=target.to(device), threshold_single=0.0, threshold_acc=0.0)
    return kwargs


def _golden_zero_thresholds_expected():
    return {
        "predicts": torch.tensor([1, 3, 0, 3, 0], dtype=torch.int32),
        "accept_index": torch.tensor([[0, 1, 3]], dtype=torch.int32),
        "num_correct_drafts": torch.tensor([2], dtype=torch.int32),
        "draft_probs": torch.zeros(1, 5, 4),
    }


def _golden_chain(device):
    # D = 3, V = 4. Step 1: x = 2, p = 0.5, q = 0.25, coin 0.9: 0.225 < 0.5 accepted.
    # Step 2: x = 1, p = 0.125, q = 0.5, coin 0.5: 0.25 >= 0.125 rejected. Residual row 1:
    # relu([0.5, 0.125, 0.25, 0.125] - [0, 0.5, 0.25, 0.25]) = [0.5, 0, 0, 0] -> token 0.
    return {
        "predicts": torch.zeros(3, dtype=torch.int32, device=device),
        "accept_index": torch.full((1, 3), -1, dtype=torch.int32, device=device),
        "num_correct_drafts": _poisoned((1,), torch.int32, device),
        "candidates": torch.tensor([[3, 2, 1]], device=device),
        "retrieve_index": torch.tensor([[0, 1, 2]], device=device),
        "uniform_samples": torch.tensor([[0.9, 0.5, 0.0]], device=device),
        "uniform_samples_for_final_sampling": torch.tensor([0.3], device=device),
        "target_probs": torch.tensor(
            [[[0.25, 0.25, 0.5, 0.0], [0.5, 0.125, 0.25, 0.125], [0.25, 0.25, 0.25, 0.25]]], device=device
        ),
        "draft_probs": torch.tensor([[[0.25, 0.25, 0.25, 0.25], [0.0, 0.5, 0.25, 0.25]]], device=device),
    }


def _golden_chain_expected():
    return {
        "predicts": torch.tensor([2, 0, 0], dtype=torch.int32),
        "accept_index": torch.tensor([[0, 1, -1]], dtype=torch.int32),
        "num_correct_drafts": torch.tensor([1], dtype=torch.int32),
    }


def _golden_reconstruct(device):
    return {
        "tree_mask": torch.tensor(_GOLDEN_ROWS, dtype=torch.bool, device=device).flatten(),
        "seq_lens": torch.tensor([3], device=device),
        "draft_token_num": 5,
    }


def _golden_reconstruct_expected():
    expected = _golden_expected(1)()
    del expected["tree_mask"]
    return {"result": tuple(expected.values())}


def _golden_pack(device):
    return {
        "draft_tree_mask": torch.tensor(
            [[1, 0], [1, 1], [1, 0], [0, 1]], dtype=torch.bool, device=device
        ).flatten(),
        "seq_lens": torch.tensor([1, 2], device=device),
        "draft_token_num": 2,
        "full_mask": torch.zeros(2 * 3 + 8 + 2, dtype=torch.bool, device=device),
    }


def _golden_pack_expected():
    # request 0 rows: [1 | 1 0], [1 | 1 1]; request 1 rows: [1 1 | 1 0], [1 1 | 0 1]; 2 spare entries.
    bits = [1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 0]
    return {"full_mask": torch.tensor(bits, dtype=torch.bool)}


def _golden_organize(device):
    # K = 2, S = 2: flat scores [0.9, 0.5 | 0.6, 0.2, 0.45, 0.4]; D = 4: best three 0.9, 0.6, 0.5.
    return {
        "score_list": [
            torch.tensor([[[0.9, 0.5]]], device=device),
            torch.tensor([[[0.6, 0.2], [0.45, 0.4]]], device=device),
        ],
        "token_list": [
            torch.tensor([[11, 12]], device=device),
            torch.tensor([[21, 22, 23, 24]], device=device),
        ],
        "parents_list": [torch.tensor([[-1, 0, 1]], device=device), torch.tensor([[2, 4]], device=device)],
        "draft_token_num": 4,
    }


def _golden_organize_expected():
    return {"result": (torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]), torch.tensor([[11, 12, 21]]))}


def _golden_bonus(device):
    return {
        "accept_tokens": torch.tensor([[5, 6, 7], [8, 9, 10]], device=device),
        "accept_lens": torch.tensor([3, 1], device=device),
    }


def _golden_cases() -> list[Case]:
    golden = [
        Case(
            "build_tree_kernel_efficient",
            f"golden_mode{m}",
            "golden",
            _golden_build(m),
            _golden_expected(m),
            True,
        )
        for m in (0, 1, 2)
    ]
    golden += [
        Case(
            "build_tree_kernel_efficient",
            "golden_malformed",
            "golden",
            _golden_build(1, parent_list=[[-1, 0, 9]]),
            _golden_malformed_expected,
            True,
        ),
        Case("verify_tree_greedy", "golden", "golden", _golden_greedy, _golden_greedy_expected, True),
        Case(
            "tree_speculative_sampling_target_only",
            "golden",
            "golden",
            _golden_sampling,
            _golden_sampling_expected,
            True,
        ),
        Case(
            "tree_speculative_sampling_target_only",
            "golden_zero_thresholds",
            "golden",
            _golden_zero_thresholds,
            _golden_zero_thresholds_expected,
            True,
        ),
        Case("chain_speculative_sampling", "golden", "golden", _golden_chain, _golden_chain_expected, True),
        Case(
            "reconstruct_indices_from_tree_mask",
            "golden",
            "golden",
            _golden_reconstruct,
            _golden_reconstruct_expected,
            True,
        ),
        Case("pack_ngram_full_mask", "golden", "golden", _golden_pack, _golden_pack_expected, True),
        Case("organize_draft_results", "golden", "golden", _golden_organize, _golden_organize_expected, True),
        Case(
            "fill_bonus_tokens",
            "golden",
            "golden",
            _golden_bonus,
            lambda: {"result": torch.tensor([7, 8], dtype=torch.int32)},
            True,
        ),
    ]
    return golden


# --------------------------------------------------------------------------------------------------
# Bad cases


def bad_cases() -> list[BadCase]:
    organize = "organize_draft_results"
    build = "build_tree_kernel_efficient"
    greedy = "verify_tree_greedy"
    tree_sampling = "tree_speculative_sampling_target_only"
    chain = "chain_speculative_sampling"
    bonus = "fill_bonus_tokens"
    pack = "pack_ngram_full_mask"
    reconstruct = "reconstruct_indices_from_tree_mask"
    # The valid call each case breaks one argument of (a case may resize it); chains take no topk.
    valid = {op: partial(builder, bs=3, topk=2, num_steps=3) for op, builder in BUILDERS.items()}
    for op in (chain, bonus):
        valid[op] = partial(BUILDERS[op], bs=3, num_steps=3)
    return [
        # C1
        bad_case(
            organize,
            "float64_scores",
            valid[organize],
            TypeError,
            "score_list",
            score_list=lambda s: [t.double() for t in s],
        ),
        bad_case(
            organize,
            "float_tokens",
            valid[organize],
            TypeError,
            "token_list",
            token_list=lambda s: [t.float() for t in s],
        ),
        bad_case(
            organize,
            "missing_parents",
            valid[organize],
            ValueError,
            "parents_list",
            parents_list=lambda s: s[:-1],
        ),
        bad_case(
            organize, "too_many_nodes", valid[organize], ValueError, "draft_token_num", draft_token_num=100
        ),
        bad_case(
            organize,
            "out_int32",
            valid[organize],
            TypeError,
            r"out\[1\]",
            out=lambda o: (o[0], o[1].int(), o[2]),
        ),
        # C2
        bad_case(
            build,
            "bitpack_too_many_nodes",
            partial(valid[build], topk=8, num_steps=5),
            ValueError,
            "tree_mask_mode",
            tree_mask_mode=2,
            tree_mask=None,
        ),
        bad_case(
            build,
            "bitpack_items_too_small",
            partial(valid[build], mode=2, topk=4, num_steps=3),
            TypeError,
            "tree_mask",
            tree_mask=lambda m: m.to(torch.uint8),
        ),
        bad_case(build, "bad_mode", valid[build], ValueError, "tree_mask_mode", tree_mask_mode=3),
        bad_case(
            build, "full_mask_missing", partial(valid[build], mode=0), ValueError, "tree_mask", tree_mask=None
        ),
        bad_case(
            build,
            "full_mask_too_small",
            partial(valid[build], mode=0),
            ValueError,
            "tree_mask",
            value_check=True,
            tree_mask=lambda m: m[:10],
        ),
        bad_case(
            build,
            "qlen_mask_uint8",
            valid[build],
            TypeError,
            "tree_mask",
            tree_mask=lambda m: m.to(torch.uint8),
        ),
        bad_case(build, "float_seq_lens", valid[build], TypeError, "seq_lens", seq_lens=lambda s: s.float()),
        bad_case(
            build,
            "negative_seq_len",
            valid[build],
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=with_entry(0, -1),
        ),
        bad_case(
            build,
            "selected_out_of_range",
            valid[build],
            ValueError,
            "selected_index",
            value_check=True,
            selected_index=with_entry((0, 0), 10**5),
        ),
        bad_case(
            build,
            "parent_list_width",
            valid[build],
            ValueError,
            "parent_list",
            parent_list=lambda p: p[:, :-1],
        ),
        bad_case(build, "positions_int32", valid[build], TypeError, "positions", positions=lambda p: p.int()),
        bad_case(build, "verified_id_alone", valid[build], ValueError, "verified_id", draft_tokens=None),
        bad_case(build, "zero_topk", valid[build], ValueError, "topk", topk=0),
        # C3
        bad_case(greedy, "predicts_int64", valid[greedy], TypeError, "predicts", predicts=lambda p: p.long()),
        bad_case(
            greedy,
            "accept_index_rows",
            valid[greedy],
            ValueError,
            "accept_index",
            accept_index=lambda a: a[:1],
        ),
        bad_case(
            greedy, "float_candidates", valid[greedy], TypeError, "candidates", candidates=lambda c: c.float()
        ),
        bad_case(
            greedy,
            "target_shape",
            valid[greedy],
            ValueError,
            "target_predict",
            target_predict=lambda t: t[:, :-1],
        ),
        bad_case(
            greedy,
            "next_token_out_of_range",
            valid[greedy],
            ValueError,
            "retrieve_next_token",
            value_check=True,
            retrieve_next_token=with_entry((0, 0), 99),
        ),
        bad_case(
            greedy,
            "sibling_below_minus_one",
            valid[greedy],
            ValueError,
            "retrieve_next_sibling",
            value_check=True,
            retrieve_next_sibling=with_entry((0, 0), -2),
        ),
        bad_case(
            greedy,
            "retrieve_index_out_of_range",
            valid[greedy],
            ValueError,
            "retrieve_index",
            value_check=True,
            retrieve_index=with_entry((0, 0), 10**4),
        ),
        bad_case(
            greedy,
            "target_narrowing",
            valid[greedy],
            ValueError,
            "target_predict",
            value_check=True,
            target_predict=with_entry((0, 0), 2**40),
        ),
        # C4 tree
        bad_case(
            tree_sampling,
            "target_probs_f16",
            valid[tree_sampling],
            TypeError,
            "target_probs",
            target_probs=lambda p: p.half(),
        ),
        bad_case(
            tree_sampling,
            "draft_probs_vocab",
            valid[tree_sampling],
            ValueError,
            "draft_probs",
            draft_probs=lambda p: p[..., :-1],
        ),
        bad_case(
            tree_sampling,
            "coins_shape",
            valid[tree_sampling],
            ValueError,
            "uniform_samples",
            uniform_samples=lambda u: u[:, :-1],
        ),
        bad_case(
            tree_sampling,
            "final_coins_f64",
            valid[tree_sampling],
            TypeError,
            "uniform_samples_for_final_sampling",
            uniform_samples_for_final_sampling=lambda u: u.double(),
        ),
        bad_case(
            tree_sampling,
            "threshold_str",
            valid[tree_sampling],
            TypeError,
            "threshold_acc",
            threshold_acc="1",
        ),
        bad_case(
            tree_sampling,
            "token_out_of_vocab",
            valid[tree_sampling],
            ValueError,
            "candidates",
            value_check=True,
            candidates=with_entry((0, 0), _VOCAB),
        ),
        # C4 chain
        bad_case(
            chain, "accept_width", valid[chain], ValueError, "accept_index", accept_index=lambda a: a[:, :-1]
        ),
        bad_case(
            chain, "draft_rows", valid[chain], ValueError, "draft_probs", draft_probs=lambda p: p[:, :-1]
        ),
        bad_case(
            chain,
            "token_out_of_vocab",
            valid[chain],
            ValueError,
            "candidates",
            value_check=True,
            candidates=with_entry((0, 0), -1),
        ),
        # C5
        bad_case(
            bonus,
            "zero_len",
            valid[bonus],
            ValueError,
            "accept_lens",
            value_check=True,
            accept_lens=with_entry(0, 0),
        ),
        bad_case(
            bonus,
            "len_past_width",
            valid[bonus],
            ValueError,
            "accept_lens",
            value_check=True,
            accept_lens=with_entry(0, 99),
        ),
        bad_case(
            bonus, "bonus_int64", valid[bonus], TypeError, "bonus_tokens", bonus_tokens=lambda b: b.long()
        ),
        bad_case(
            bonus,
            "narrowing",
            valid[bonus],
            ValueError,
            "accept_tokens",
            value_check=True,
            accept_tokens=lambda t: torch.full(t.shape, 2**40, device=t.device),
        ),
        # C6
        bad_case(
            pack,
            "too_small",
            valid[pack],
            ValueError,
            "full_mask",
            value_check=True,
            full_mask=lambda m: m[:4],
        ),
        bad_case(
            pack,
            "uint8_mask",
            valid[pack],
            TypeError,
            "draft_tree_mask",
            draft_tree_mask=lambda m: m.to(torch.uint8),
        ),
        bad_case(
            pack,
            "negative_seq_len",
            valid[pack],
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=with_entry(0, -3),
        ),
        bad_case(
            reconstruct, "mask_size", valid[reconstruct], ValueError, "tree_mask", tree_mask=lambda m: m[:-1]
        ),
        bad_case(
            reconstruct,
            "positions_int32",
            valid[reconstruct],
            TypeError,
            "positions",
            positions=lambda p: p.int(),
        ),
        bad_case(
            reconstruct, "zero_nodes", valid[reconstruct], ValueError, "draft_token_num", draft_token_num=0
        ),
        # positions = seq_lens + depth would wrap int64
        *(
            bad_case(
                op,
                "seq_lens_at_int64_max",
                valid[op],
                ValueError,
                "seq_lens",
                value_check=True,
                seq_lens=lambda s: torch.full_like(s, 2**63 - 1),
            )
            for op in (build, reconstruct)
        ),
        # D*sum(seq_lens) as an int64 sum would wrap below the mask's size
        bad_case(
            build,
            "full_mask_sum_wraps_int64",
            partial(valid[build], mode=0),
            ValueError,
            "tree_mask",
            value_check=True,
            seq_lens=lambda s: torch.full_like(s, 2**62),
        ),
    ]
