"""Builders of family D's conformance arguments: seeded draws, keys and one builder per op
(``BUILDERS``)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import grid
from ...case import benched

CPU = torch.device("cpu")
NO_SAMPLE_CHECK = frozenset({"out", "result"})


def _rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _device_generator(device: torch.device, seed: int) -> torch.Generator | None:
    # Meta tensors hold no data and take no generator.
    if device.type == "meta":
        return None
    return torch.Generator(device=device).manual_seed(seed)


def keys(rng: torch.Generator, bs: int, device: torch.device, step: int = 0) -> dict[str, Any]:
    """Keyed draws' arguments: seeds over the whole int64 range (negative ones too) and positions
    past 2**32, so every word of the key and counter is exercised."""
    seeds = torch.randint(-(2**63), 2**63 - 1, (bs,), generator=rng, dtype=torch.int64)
    positions = torch.randint(0, 2**48, (bs,), generator=rng, dtype=torch.int64)
    return {"seeds": seeds.to(device), "positions": positions.to(device), "step": step}


def _randomness(
    rng: torch.Generator, device: torch.device, bs: int, seed: int, keyed: bool
) -> dict[str, Any]:
    """The sampling ops' source of noise: keys (keyed draws), else a generator of the device."""
    if keyed:
        return keys(rng, bs, device, step=seed % 7)
    return {"generator": _device_generator(device, seed)}


def poison(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    fill = grid.POISON_FLOAT if dtype.is_floating_point else grid.POISON_INT
    return torch.full(tuple(shape), fill, dtype=dtype, device=device)


def _distinct_rows(rng: torch.Generator, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Each last-dim row a permutation of 0..n-1 (exact in every float dtype for n <= 256)."""
    return torch.rand(tuple(shape), generator=rng).argsort(dim=-1).to(dtype)


def _logits(rng: torch.Generator, batch: int, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(batch, vocab, generator=rng) * 3).to(dtype)


def spread(count: int, seed: int, **axes: Sequence[Any]) -> list[dict[str, Any]]:
    """``count`` combinations in which every value of every axis appears, paired at random."""
    rng = random.Random(seed)
    columns = {}
    for name, values in axes.items():
        column = [values[j % len(values)] for j in range(count)]
        rng.shuffle(column)
        columns[name] = column
    return [{name: column[j] for name, column in columns.items()} for j in range(count)]


def case_label(op: str, **sizes: Any) -> str:
    def show(value: Any) -> str:
        return str(value).replace("torch.", "") if isinstance(value, torch.dtype) else str(value)

    return f"{op}[" + ",".join(f"{k}={show(v)}" for k, v in sizes.items()) + "]"


def is_small(bs: int, vocab: int = 0) -> bool:
    return bs <= 3 and vocab <= 64


@benched(vocabulary_pass=True, large_sizes=grid.LARGE_VOCABULARY_SIZES)
def build_fast_topk(
    device: torch.device,
    *,
    bs: int,
    topk: int = 2,
    vocab: int = 64,
    layout: str = "rows",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    with_out: bool = True,
) -> dict[str, Any]:
    """``layout``: "rows" = [bs, vocab] dim -1, "middle" = [bs, vocab, 3] dim 1, "first" = [vocab, bs] dim 0."""
    rng = _rng(seed)
    if layout == "rows":
        values, dim = _distinct_rows(rng, (bs, vocab), dtype), -1
    elif layout == "middle":
        values, dim = _distinct_rows(rng, (bs, 3, vocab), dtype).transpose(1, 2).contiguous(), 1
    else:
        values, dim = _distinct_rows(rng, (bs, vocab), dtype).t().contiguous(), 0
    shape = list(values.shape)
    shape[dim] = topk
    kwargs: dict[str, Any] = {"values": values.to(device), "k": topk, "dim": dim}
    if with_out:
        kwargs["out"] = (poison(shape, dtype, device), poison(shape, torch.int64, device))
    return kwargs


@benched(vocabulary_pass=True, large_sizes=grid.LARGE_VOCABULARY_SIZES, noise_like="probs")
def build_fast_sample(
    device: torch.device,
    *,
    bs: int,
    vocab: int = 48,
    num_samples: int = 1,
    dtype: torch.dtype = torch.float32,
    rows: str = "random",
    seed: int = 0,
    keyed: bool = False,
) -> dict[str, Any]:
    """``rows``: "random" (softmax rows), "one_hot" or "zero" (samples that ignore the noise);
    ``keyed``: keyed draws (seeds, positions, step) instead of a generator's."""
    rng = _rng(seed)
    if rows == "one_hot":
        hot = torch.randint(vocab, (bs,), generator=rng)
        probs = torch.nn.functional.one_hot(hot, vocab).to(dtype)
    elif rows == "zero":
        probs = torch.zeros(bs, vocab, dtype=dtype)
    else:
        probs = torch.softmax(torch.randn(bs, vocab, generator=rng) * 2, dim=-1).to(dtype)
    shape = (bs, num_samples)
    return {
        "probs": probs.to(device),
        "num_samples": num_samples,
        **_randomness(rng, device, bs, seed, keyed),
        "out": (poison(shape, dtype, device), poison(shape, torch.int64, device)),
    }


def _temperatures(rng: torch.Generator, bs: int) -> torch.Tensor:
    return torch.rand(bs, 1, generator=rng) * 1.5 + 0.25


@benched(vocabulary_pass=True, large_sizes=grid.LARGE_VOCABULARY_SIZES)
def build_renorm_draft_probs(
    device: torch.device,
    *,
    bs: int,
    vocab: int = 48,
    dtype: torch.dtype = torch.float32,
    use_rejection_sampling: bool = True,
    with_temperatures: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    rng = _rng(seed)
    logits = _logits(rng, bs, vocab, dtype)
    # Rejection sampling needs temperatures: with_temperatures=False only drops them without it.
    temperatures = _temperatures(rng, bs) if with_temperatures or use_rejection_sampling else None
    return {
        "logits": logits.to(device),
        "temperatures": None if temperatures is None else temperatures.to(device),
        "use_rejection_sampling": use_rejection_sampling,
        "probs": poison((bs, vocab), torch.float32, device),
    }


@benched(vocabulary_pass=True, large_sizes=grid.LARGE_VOCABULARY_SIZES, noise_like="logits")
def build_sample_draft_proposal(
    device: torch.device,
    *,
    bs: int,
    vocab: int = 48,
    dtype: torch.dtype = torch.float32,
    idx_dtype: torch.dtype = torch.int64,
    top_ks: str = "mixed",
    seed: int = 0,
    keyed: bool = False,
) -> dict[str, Any]:
    """``top_ks``: "none", "mixed" (greedy and sampled rows) or "greedy" (every row <= 1); ``keyed``:
    keyed draws (seeds, positions, step) instead of a generator's."""
    rng = _rng(seed)
    logits = _logits(rng, bs, vocab, dtype)
    temperatures = _temperatures(rng, bs)
    if top_ks == "none":
        ks = None
    elif top_ks == "greedy":
        ks = torch.randint(-1, 2, (bs,), generator=rng).to(idx_dtype)
    else:
        ks = torch.randint(0, 5, (bs,), generator=rng).to(idx_dtype)
    return {
        "logits": logits.to(device),
        "temperatures": temperatures.to(device),
        "top_ks": None if ks is None else ks.to(device),
        **_randomness(rng, device, bs, seed, keyed),
        "out": (
            poison((bs, vocab), torch.float32, device),
            poison((bs, 1), torch.float32, device),
            poison((bs, 1), torch.int64, device),
        ),
    }


def build_select_top_k_tokens(
    device: torch.device,
    *,
    bs: int,
    topk: int = 2,
    step: int = 0,
    hidden_size: int = 8,
    hidden_dtype: torch.dtype = torch.float32,
    idx_dtype: torch.dtype = torch.int64,
    vocab: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Draft step ``step`` (the op's ``i``); ``hidden_size == 0`` passes no hidden states."""
    rng = _rng(seed)
    rows = bs if step == 0 else bs * topk
    # Random fp32 path scores: distinct with overwhelming probability (the top-k has no ties).
    topk_p = torch.rand(rows, topk, generator=rng) * 0.9 + 0.05
    topk_index = torch.randint(vocab, (rows, topk), generator=rng).to(idx_dtype)
    hidden = torch.randn(rows, hidden_size, generator=rng).to(hidden_dtype) if hidden_size else None
    scores = None if step == 0 else torch.rand(bs, topk, generator=rng) * 0.9 + 0.05
    if step == 0:
        tree_shapes = ((bs, 1, topk), (bs, topk), (bs, topk + 1))
    else:
        tree_shapes = ((bs, topk, topk), (bs, topk * topk), (bs, topk))
    out = (
        poison((bs * topk,), torch.int64, device),
        None if hidden is None else poison((bs * topk, hidden_size), hidden_dtype, device),
        poison((bs, topk), torch.float32, device),
        (
            poison(tree_shapes[0], torch.float32, device),
            poison(tree_shapes[1], torch.int64, device),
            poison(tree_shapes[2], torch.int64, device),
        ),
    )
    return {
        "i": step,
        "topk_p": topk_p.to(device),
        "topk_index": topk_index.to(device),
        "hidden_states": None if hidden is None else hidden.to(device),
        "scores": None if scores is None else scores.to(device),
        "topk": topk,
        "out": out,
    }


def _argmax_logits(
    rng: torch.Generator, rows: int, vocab: int, dtype: torch.dtype, nan_rows: bool
) -> torch.Tensor:
    """Logits with the D6 corner cases: a tied maximum, NaN lanes, an all-NaN row."""
    logits = torch.randn(rows, vocab, generator=rng) * 3
    if rows and vocab > 1:
        top = logits[0].argmax()
        logits[0, (top + 1) % vocab] = logits[0, top]  # exact tie: lowest id wins
    if nan_rows and rows > 1:
        lanes = torch.rand(rows, vocab, generator=rng) < 0.1
        logits[lanes] = float("nan")
        logits[1] = float("nan")  # all-NaN row: every lane is -1e30, id 0
    return logits.to(dtype)


def build_draft_topk1_postprocess(
    device: torch.device,
    *,
    bs: int,
    vocab: int = 64,
    dtype: torch.dtype = torch.float32,
    idx_dtype: torch.dtype = torch.int64,
    columns: int = 3,
    column: int = 1,
    nan_rows: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """``columns == 0`` passes no draft_tokens."""
    rng = _rng(seed)
    logits = _argmax_logits(rng, bs, vocab, dtype, nan_rows)
    positions = torch.randint(0, 4096, (bs,), generator=rng).to(idx_dtype)
    draft_tokens = torch.randint(0, vocab, (bs, columns), generator=rng) if columns else None
    return {
        "logits": logits.to(device),
        "positions": positions.to(device),
        "draft_tokens": None if draft_tokens is None else draft_tokens.to(device),
        "draft_token_column": column,
        "out": (poison((bs, 1), torch.float32, device), poison((bs, 1), torch.int64, device)),
    }


def build_target_verify_topk1_postprocess(
    device: torch.device,
    *,
    bs: int,
    num_steps: int = 3,
    vocab: int = 64,
    dtype: torch.dtype = torch.float32,
    idx_dtype: torch.dtype = torch.int64,
    num_simulated_accept_tokens: int = 0,
    use_real_draft_tokens: bool = False,
    accept_rate: float = 0.7,
    truncated_chains: bool = False,
    nan_rows: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Chains of D = num_steps + 1 nodes whose drafts match the target's argmax with ``accept_rate``."""
    rng = _rng(seed)
    draft_token_num = num_steps + 1
    nodes = bs * draft_token_num
    logits = torch.randn(nodes, vocab, generator=rng) * 2
    target = torch.randint(vocab, (nodes,), generator=rng)
    logits[torch.arange(nodes), target] = 10.0  # a clear argmax per node
    if nan_rows and nodes:
        logits[torch.rand(nodes, vocab, generator=rng) < 0.05] = float("nan")
    candidates = torch.randint(vocab, (bs, draft_token_num), generator=rng)
    matches = torch.rand(bs, draft_token_num - 1, generator=rng) < accept_rate
    target_rows = target.view(bs, draft_token_num)
    # Draft k+1 matches the target's token at node k (the token the target predicts after it).
    candidates[:, 1:] = torch.where(matches, target_rows[:, :-1], (target_rows[:, :-1] + 1) % vocab)
    next_token = torch.arange(1, draft_token_num + 1).repeat(bs, 1)
    next_token[:, -1] = -1
    if truncated_chains and draft_token_num > 1:
        cut = torch.randint(0, draft_token_num, (bs,), generator=rng)
        next_token[torch.arange(draft_token_num) >= cut.unsqueeze(1)] = -1
    retrieve_index = torch.arange(nodes).view(bs, draft_token_num)
    seq_lens = torch.randint(0, 500, (bs,), generator=rng)
    out = (
        poison((nodes,), torch.int32, device),
        poison((bs,), torch.int32, device),
        poison((bs,), torch.int32, device),
        poison((bs, draft_token_num), torch.int32, device),
        poison((bs,), torch.int32, device),
        poison((bs,), torch.int64, device),
        poison((bs,), torch.int64, device),
        poison((nodes,), torch.int64, device),
    )
    return {
        "logits": logits.to(dtype).to(device),
        "candidates": candidates.to(idx_dtype).to(device),
        "retrieve_index": retrieve_index.to(idx_dtype).to(device),
        "retrieve_next_token": next_token.to(idx_dtype).to(device),
        "seq_lens": seq_lens.to(idx_dtype).to(device),
        "num_simulated_accept_tokens": num_simulated_accept_tokens,
        "use_real_draft_tokens": use_real_draft_tokens,
        "out": out,
    }


def build_draft_extend_topk1_postprocess(
    device: torch.device,
    *,
    bs: int,
    num_rows: int = 0,
    vocab: int = 64,
    dtype: torch.dtype = torch.float32,
    idx_dtype: torch.dtype = torch.int64,
    hidden_size: int = 8,
    hidden_dtype: torch.dtype = torch.bfloat16,
    dsa_width: int = 4,
    dsa_dtype: torch.dtype = torch.int32,
    seed: int = 0,
) -> dict[str, Any]:
    """``num_rows`` (N, default 3*bs+1) extend rows; 0 sizes pass no hidden / DSA buffer."""
    rng = _rng(seed)
    num_rows = num_rows or 3 * bs + 1
    logits = _argmax_logits(rng, num_rows, vocab, dtype, nan_rows=True)
    row_indices = torch.randint(num_rows, (bs,), generator=rng).to(idx_dtype)
    hidden = torch.randn(num_rows, hidden_size, generator=rng).to(hidden_dtype) if hidden_size else None
    dsa = torch.randint(0, 1 << 20, (num_rows, dsa_width), generator=rng).to(dsa_dtype) if dsa_width else None
    out = (
        poison((bs, 1), torch.float32, device),
        poison((bs, 1), torch.int64, device),
        None if hidden is None else poison((bs, hidden_size), hidden_dtype, device),
        None if dsa is None else poison((bs, dsa_width), dsa_dtype, device),
    )
    return {
        "logits": logits.to(device),
        "row_indices": row_indices.to(device),
        "hidden_states": None if hidden is None else hidden.to(device),
        "dsa_topk_indices": None if dsa is None else dsa.to(device),
        "out": out,
    }


BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "fast_topk": build_fast_topk,
    "fast_sample": build_fast_sample,
    "renorm_draft_probs": build_renorm_draft_probs,
    "sample_draft_proposal": build_sample_draft_proposal,
    "select_top_k_tokens": build_select_top_k_tokens,
    "draft_topk1_postprocess": build_draft_topk1_postprocess,
    "target_verify_topk1_postprocess": build_target_verify_topk1_postprocess,
    "draft_extend_topk1_postprocess": build_draft_extend_topk1_postprocess,
}

FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
