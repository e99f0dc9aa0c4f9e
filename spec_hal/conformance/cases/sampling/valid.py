"""Family D's valid conformance cases: random grid points, edge cases and golden cases."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from ... import grid
from ...case import Case
from .builders import (
    BUILDERS,
    FLOATS,
    NO_SAMPLE_CHECK,
    build_target_verify_topk1_postprocess,
    case_label,
    is_small,
    spread,
)


def _random_cases(
    op: str, count: int, seed: int, *, unchecked: frozenset[str] = frozenset(), **axes
) -> list[Case]:
    cases = []
    for j, sizes in enumerate(spread(count, seed, **axes)):
        sizes = {**sizes, "seed": seed + j}
        cases.append(
            Case(
                op,
                case_label(op, **sizes),
                "random",
                partial(BUILDERS[op], **sizes),
                small=is_small(sizes["bs"], sizes.get("vocab", 0)),
                unchecked=unchecked,
            )
        )
    return cases


def _edge(op: str, name: str, *, unchecked: frozenset[str] = frozenset(), **sizes: Any) -> Case:
    return Case(op, f"{op}[{name}]", "edge", partial(BUILDERS[op], **sizes), unchecked=unchecked,
                small=is_small(sizes["bs"], sizes.get("vocab", 64)))  # fmt: skip


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
            case_label("target_verify_topk1_postprocess", **sizes),
            "random",
            partial(build_target_verify_topk1_postprocess, **sizes),
            small=is_small(sizes["bs"]),
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
