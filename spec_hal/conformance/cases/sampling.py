"""Conformance cases of family D (draft sampling and tree expansion), ``fast_topk`` included.

Data is drawn on the CPU from a seeded generator and moved to the device, so every device gets the
same inputs. The sampling ops (``fast_sample``, ``sample_draft_proposal``) draw their noise from a
generator of the device under test, whose stream differs per device: their random cases leave the
sampled outputs unchecked (``unchecked={"out", "result"}``); edge and golden cases whose sample does
not depend on the noise (one-hot or all-zero rows, greedy ``top_ks``) are checked exactly.
Values that a top-k ranks are distinct (ties are unspecified there); the D6 argmax cases do contain
exact ties and NaN lanes, whose outcome the spec fixes (lowest id, NaN as -1e30).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch

from .. import grid
from ..case import BadCase, Case, bad_case, with_entry

CPU = torch.device("cpu")
NO_SAMPLE_CHECK = frozenset({"out", "result"})


# --------------------------------------------------------------------------------------------------
# Helpers


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


def _poison(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    fill = grid.POISON_FLOAT if dtype.is_floating_point else grid.POISON_INT
    return torch.full(tuple(shape), fill, dtype=dtype, device=device)


def _distinct_rows(rng: torch.Generator, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Each last-dim row a permutation of 0..n-1 (exact in every float dtype for n <= 256)."""
    return torch.rand(tuple(shape), generator=rng).argsort(dim=-1).to(dtype)


def _logits(rng: torch.Generator, batch: int, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(batch, vocab, generator=rng) * 3).to(dtype)


def _spread(count: int, seed: int, **axes: Sequence[Any]) -> list[dict[str, Any]]:
    """``count`` combinations in which every value of every axis appears, paired at random."""
    rng = random.Random(seed)
    columns = {}
    for name, values in axes.items():
        column = [values[j % len(values)] for j in range(count)]
        rng.shuffle(column)
        columns[name] = column
    return [{name: column[j] for name, column in columns.items()} for j in range(count)]


def _label(op: str, **sizes: Any) -> str:
    def show(value: Any) -> str:
        return str(value).replace("torch.", "") if isinstance(value, torch.dtype) else str(value)

    return f"{op}[" + ",".join(f"{k}={show(v)}" for k, v in sizes.items()) + "]"


def _is_small(bs: int, vocab: int = 0) -> bool:
    return bs <= 3 and vocab <= 64


# --------------------------------------------------------------------------------------------------
# Builders


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
        kwargs["out"] = (_poison(shape, dtype, device), _poison(shape, torch.int64, device))
    return kwargs


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
        "out": (_poison(shape, dtype, device), _poison(shape, torch.int64, device)),
    }


def _temperatures(rng: torch.Generator, bs: int) -> torch.Tensor:
    return torch.rand(bs, 1, generator=rng) * 1.5 + 0.25


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
        "probs": _poison((bs, vocab), torch.float32, device),
    }


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
            _poison((bs, vocab), torch.float32, device),
            _poison((bs, 1), torch.float32, device),
            _poison((bs, 1), torch.int64, device),
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
        _poison((bs * topk,), torch.int64, device),
        None if hidden is None else _poison((bs * topk, hidden_size), hidden_dtype, device),
        _poison((bs, topk), torch.float32, device),
        (
            _poison(tree_shapes[0], torch.float32, device),
            _poison(tree_shapes[1], torch.int64, device),
            _poison(tree_shapes[2], torch.int64, device),
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
        "out": (_poison((bs, 1), torch.float32, device), _poison((bs, 1), torch.int64, device)),
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
        _poison((nodes,), torch.int32, device),
        _poison((bs,), torch.int32, device),
        _poison((bs,), torch.int32, device),
        _poison((bs, draft_token_num), torch.int32, device),
        _poison((bs,), torch.int32, device),
        _poison((bs,), torch.int64, device),
        _poison((bs,), torch.int64, device),
        _poison((nodes,), torch.int64, device),
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
        _poison((bs, 1), torch.float32, device),
        _poison((bs, 1), torch.int64, device),
        None if hidden is None else _poison((bs, hidden_size), hidden_dtype, device),
        None if dsa is None else _poison((bs, dsa_width), dsa_dtype, device),
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


# --------------------------------------------------------------------------------------------------
# Cases


def _random_cases(
    op: str, count: int, seed: int, *, unchecked: frozenset[str] = frozenset(), **axes
) -> list[Case]:
    cases = []
    for j, sizes in enumerate(_spread(count, seed, **axes)):
        sizes = {**sizes, "seed": seed + j}
        cases.append(
            Case(
                op,
                _label(op, **sizes),
                "random",
                partial(BUILDERS[op], **sizes),
                small=_is_small(sizes["bs"], sizes.get("vocab", 0)),
                unchecked=unchecked,
            )
        )
    return cases


def _edge(op: str, name: str, *, unchecked: frozenset[str] = frozenset(), **sizes: Any) -> Case:
    return Case(op, f"{op}[{name}]", "edge", partial(BUILDERS[op], **sizes), unchecked=unchecked,
                small=_is_small(sizes["bs"], sizes.get("vocab", 64)))  # fmt: skip


def _golden(op: str, name: str, build: Callable[[torch.device], dict], expected: Callable[[], dict]) -> Case:
    return Case(op, f"{op}[golden:{name}]", "golden", build, expected=expected, small=True)


def _on(device: torch.device, **tensors: Any) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in tensors.items()}


def _golden_cases() -> list[Case]:
    t = torch.tensor
    nan, inf = float("nan"), float("inf")
    golden = [
        _golden(
            "fast_topk",
            "descending",
            lambda d: _on(d, values=t([[1.0, 5.0, 3.0, 4.0]]), k=2),
            lambda: {"result": (t([[5.0, 4.0]]), t([[1, 3]]))},
        ),
        _golden(
            "fast_sample",
            "one_hot_and_zero_rows",
            lambda d: {**_on(d, probs=t([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])), "generator": None},
            lambda: {"result": (t([[1.0], [0.0]]), t([[2], [0]]))},
        ),
        _golden(
            "renorm_draft_probs",
            "tempered",
            lambda d: _on(
                d, logits=t([[0.0, 2 * math.log(3.0)]]), temperatures=t([[2.0]]), use_rejection_sampling=True
            ),
            lambda: {"result": t([[0.25, 0.75]])},
        ),
        _golden(
            "renorm_draft_probs",
            "untempered",
            lambda d: _on(
                d, logits=t([[0.0, math.log(3.0)]]), temperatures=t([[5.0]]), use_rejection_sampling=False
            ),
            lambda: {"result": t([[0.25, 0.75]])},
        ),
        _golden(
            "sample_draft_proposal",
            "greedy_row",
            lambda d: _on(d, logits=t([[0.0, math.log(3.0)]]), temperatures=t([[1.0]]), top_ks=t([1])),
            lambda: {"result": (t([[0.25, 0.75]]), t([[0.75]]), t([[1]]))},
        ),
        _golden(
            "select_top_k_tokens",
            "first_step",
            lambda d: _on(
                d,
                i=0,
                topk_p=t([[0.6, 0.4]]),
                topk_index=t([[7, 9]]),
                hidden_states=t([[1.0, 2.0]]),
                scores=None,
                topk=2,
            ),  # fmt: skip
            lambda: {
                "result": (
                    t([7, 9]),
                    t([[1.0, 2.0], [1.0, 2.0]]),
                    t([[0.6, 0.4]]),
                    (t([[[0.6, 0.4]]]), t([[7, 9]]), t([[-1, 0, 1]])),
                )
            },
        ),
        _golden(
            "select_top_k_tokens",
            "second_step",
            lambda d: _on(
                d,
                i=1,
                topk_p=t([[0.7, 0.3], [0.9, 0.1]]),
                topk_index=t([[11, 12], [13, 14]]),
                hidden_states=t([[1.0], [2.0]]),
                scores=t([[0.6, 0.4]]),
                topk=2,
            ),  # fmt: skip
            lambda: {
                "result": (
                    t([11, 13]),
                    t([[1.0], [2.0]]),
                    t([[0.42, 0.36]]),
                    (t([[[0.42, 0.18], [0.36, 0.04]]]), t([[11, 12, 13, 14]]), t([[2, 4]])),
                )
            },
        ),
        _golden(
            "draft_topk1_postprocess",
            "nan_and_ties",
            lambda d: _on(
                d,
                logits=t([[1.0, nan, 3.0, 3.0], [nan, nan, nan, nan], [-inf, nan, -inf, -inf]]),
                positions=t([5, 6, 7], dtype=torch.int32),
                draft_tokens=t([[-7, -7], [-7, -7], [-7, -7]]),
                draft_token_column=1,
            ),
            lambda: {
                "result": (t([[1.0], [1.0], [1.0]]), t([[2], [0], [1]])),
                "positions": t([6, 7, 8], dtype=torch.int32),
                "draft_tokens": t([[-7, 2], [-7, 0], [-7, 1]]),
            },
        ),
        _golden(
            "target_verify_topk1_postprocess",
            "two_of_three_accepted",
            lambda d: _on(
                d,
                logits=torch.nn.functional.one_hot(t([11, 12, 13, 14]), 16).float(),
                candidates=t([[5, 11, 12, 7]]),
                retrieve_index=t([[0, 1, 2, 3]]),
                retrieve_next_token=t([[1, 2, 3, -1]]),
                seq_lens=t([10]),
            ),
            lambda: {
                "result": (
                    t([11, 12, 13, 0], dtype=torch.int32),
                    t([2], dtype=torch.int32),
                    t([3], dtype=torch.int32),
                    t([[0, 1, 2, -1]], dtype=torch.int32),
                    t([13], dtype=torch.int32),
                    t([13]),
                    t([2]),
                    t([11, 12, 13, 0]),
                )
            },
        ),
        _golden(
            "target_verify_topk1_postprocess",
            "simulated_real_tokens",
            lambda d: _on(
                d,
                logits=torch.nn.functional.one_hot(t([1, 2, 3, 4, 5, 6, 7, 8]), 16).float(),
                candidates=t([[9, 8, 7, 6], [5, 4, 3, 2]]),
                retrieve_index=t([[0, 1, 2, 3], [4, 5, 6, 7]]),
                retrieve_next_token=t([[1, 2, 3, -1], [1, 2, 3, -1]]),
                seq_lens=t([10, 20]),
                num_simulated_accept_tokens=3,
                use_real_draft_tokens=True,
            ),
            lambda: {
                "result": (
                    t([8, 7, 3, 0, 4, 3, 7, 0], dtype=torch.int32),
                    t([2, 2], dtype=torch.int32),
                    t([3, 3], dtype=torch.int32),
                    t([[0, 1, 2, -1], [4, 5, 6, -1]], dtype=torch.int32),
                    t([3, 7], dtype=torch.int32),
                    t([13, 23]),
                    t([2, 6]),
                    t([8, 7, 3, 0, 4, 3, 7, 0]),
                )
            },
        ),
        _golden(
            "draft_extend_topk1_postprocess",
            "rows_and_gathers",
            lambda d: _on(
                d,
                logits=t([[0.0, 1.0], [5.0, -1.0], [nan, 2.0]]),
                row_indices=t([2, 1]),
                hidden_states=t([[1.0, 1.5], [2.0, 2.5], [3.0, 3.5]]),
                dsa_topk_indices=t([[10], [20], [30]], dtype=torch.int32),
            ),
            lambda: {
                "result": (
                    t([[1.0], [1.0]]),
                    t([[1], [0]]),
                    t([[3.0, 3.5], [2.0, 2.5]]),
                    t([[30], [20]], dtype=torch.int32),
                )
            },
        ),
    ]
    return golden


def cases() -> list[Case]:
    bs = grid.BATCH_SIZES
    idx = grid.INDEX_DTYPES
    found: list[Case] = []
    found += _random_cases(
        "fast_topk", 24, 100, bs=bs, topk=grid.TOPKS, vocab=(8, 64, 200), layout=("rows", "middle", "first"),
        dtype=FLOATS,
    )  # fmt: skip
    found += _random_cases(
        "fast_sample", 16, 200, bs=bs, vocab=(8, 48, 100), num_samples=(1, 2, 4), dtype=FLOATS,
        unchecked=NO_SAMPLE_CHECK,
    )  # fmt: skip
    found += _random_cases(
        "renorm_draft_probs", 16, 300, bs=bs, vocab=(8, 48, 100), dtype=FLOATS,
        use_rejection_sampling=(True, False), with_temperatures=(True, True, False),
    )  # fmt: skip
    found += _random_cases(
        "sample_draft_proposal", 16, 400, bs=bs, vocab=(8, 48, 100), dtype=FLOATS, idx_dtype=idx,
        top_ks=("none", "mixed"), unchecked=NO_SAMPLE_CHECK,
    )  # fmt: skip
    found += _random_cases(
        "sample_draft_proposal",
        8,
        450,
        bs=bs,
        vocab=(8, 48, 100),
        dtype=FLOATS,
        idx_dtype=idx,
        top_ks=("greedy",),
    )
    found += _random_cases(
        "select_top_k_tokens", 30, 500, bs=bs, topk=grid.TOPKS, step=tuple(s - 1 for s in grid.STEPS),
        hidden_size=(0, 8, 16), hidden_dtype=(torch.float32, torch.bfloat16), idx_dtype=idx,
    )  # fmt: skip
    found += _random_cases(
        "draft_topk1_postprocess", 20, 600, bs=bs, vocab=(1, 8, 64, 200), dtype=FLOATS, idx_dtype=idx,
        columns=(0, 1, 3), column=(0,), nan_rows=(True, False),
    )  # fmt: skip
    found += _random_cases(
        "target_verify_topk1_postprocess", 30, 700, bs=bs, num_steps=grid.STEPS, vocab=(16, 64), dtype=FLOATS,
        idx_dtype=idx, accept_rate=(0.5, 0.8, 1.0), truncated_chains=(False, True), nan_rows=(False, True),
    )  # fmt: skip
    found += [
        Case(
            "target_verify_topk1_postprocess",
            _label("target_verify_topk1_postprocess", **sizes),
            "random",
            partial(build_target_verify_topk1_postprocess, **sizes),
            small=_is_small(sizes["bs"]),
        )
        for sizes in (
            dict[str, Any](
                bs=b,
                num_steps=s,
                num_simulated_accept_tokens=n,
                use_real_draft_tokens=real,
                seed=750 + j,
            )
            for j, (b, s, n, real) in enumerate(
                [(3, 3, 1, False), (64, 4, 3, True), (1, 5, 6, True), (257, 2, 2, False), (3, 1, 2, True)]
            )
        )
    ]
    found += _random_cases(
        "draft_extend_topk1_postprocess", 20, 800, bs=bs, vocab=(8, 64), dtype=FLOATS, idx_dtype=idx,
        hidden_size=(0, 8), hidden_dtype=(torch.bfloat16, torch.float32), dsa_width=(0, 4),
        dsa_dtype=(torch.int32, torch.int64),
    )  # fmt: skip
    found += _edge_cases()
    found += _golden_cases()
    return found


def _edge_cases() -> list[Case]:
    # The spec splits the vocabulary in 8192-wide blocks: put the maximum past the first block.
    wide = 8192 + 77
    split = 8 * 8192 + 333
    return [
        *(_edge(op, "bs0", bs=0) for op in BUILDERS if op not in ("fast_sample", "sample_draft_proposal")),
        _edge("fast_sample", "bs0", bs=0, unchecked=NO_SAMPLE_CHECK),
        _edge("sample_draft_proposal", "bs0", bs=0, unchecked=NO_SAMPLE_CHECK),
        _edge("fast_topk", "k_equals_n", bs=3, topk=8, vocab=8),
        # Rows wide enough, and few enough, for a Triton vendor to split them over programs (chunks
        # of whole tiles, the last one short).
        _edge("fast_topk", "split_rows_k8", bs=3, topk=8, vocab=split),
        _edge("fast_topk", "split_rows_k1_f64", bs=2, topk=1, vocab=split, dtype=torch.float64),
        _edge("fast_topk", "split_rows_middle", bs=2, topk=4, vocab=split, layout="middle"),
        _edge("fast_sample", "split_rows", bs=3, vocab=split, num_samples=4, unchecked=NO_SAMPLE_CHECK),
        _edge("fast_topk", "bf16_256", bs=3, topk=4, vocab=256, dtype=torch.bfloat16),
        _edge("fast_sample", "one_hot_rows", bs=64, rows="one_hot"),
        _edge("fast_sample", "zero_rows", bs=3, rows="zero"),
        _edge("fast_sample", "n_equals_v", bs=3, vocab=4, num_samples=4, unchecked=NO_SAMPLE_CHECK),
        _edge("sample_draft_proposal", "greedy_rows", bs=64, top_ks="greedy", idx_dtype=torch.int32),
        _edge("select_top_k_tokens", "step0_no_hidden", bs=3, topk=4, hidden_size=0),
        _edge("select_top_k_tokens", "topk1_chain", bs=3, topk=1, step=3),
        _edge("draft_topk1_postprocess", "wide_vocab", bs=2, vocab=wide, dtype=torch.bfloat16),
        _edge("draft_topk1_postprocess", "last_column", bs=3, columns=4, column=3),
        _edge("target_verify_topk1_postprocess", "wide_vocab", bs=2, vocab=wide, nan_rows=True),
        _edge("target_verify_topk1_postprocess", "no_drafts", bs=3, num_steps=0),
        _edge("target_verify_topk1_postprocess", "all_accepted", bs=3, accept_rate=1.0),
        _edge("target_verify_topk1_postprocess", "none_accepted", bs=3, accept_rate=0.0),
        _edge(
            "target_verify_topk1_postprocess",
            "simulated_all",
            bs=3,
            num_steps=3,
            num_simulated_accept_tokens=4,
        ),
        _edge("draft_extend_topk1_postprocess", "one_row", bs=3, num_rows=1),
        _edge("draft_extend_topk1_postprocess", "wide_vocab", bs=2, vocab=wide, hidden_size=0, dsa_width=0),
        # The row gathers ride on the slice programs of a split argmax: a kernel variant of its own.
        _edge(
            "draft_extend_topk1_postprocess",
            "wide_vocab_gathers",
            bs=2,
            vocab=wide,
            hidden_size=40,
            dsa_width=6,
        ),
    ]


# --------------------------------------------------------------------------------------------------
# Bad cases


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
