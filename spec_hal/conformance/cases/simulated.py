"""Conformance cases of family E (simulated acceptance): ``generate_simulated_accept_index``.

The accept length is drawn on the host from a seeded CPU generator, so every device gets the same
length and every output is compared exactly. ``sample_simulated_acc_len`` is a host function and has
no device cases (its tests live in ``tests/ops/test_simulated.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from .. import grid
from ..case import BadCase, Case, bad_case, with_entry
from .sampling import case_label, poison, spread


def build_generate_simulated_accept_index(
    device: torch.device,
    *,
    bs: int,
    num_steps: int = 3,
    topk: int = 1,
    idx_dtype: torch.dtype = torch.int64,
    token_mode: str = "fixed",
    method: str = "match-expected",
    mean: float = 2.5,
    padded_rows: bool = False,
    vocab: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """A verify result of ``bs`` requests with D = topk*num_steps + 1 nodes (a chain when topk = 1).

    ``padded_rows`` marks some rows as padding (root -1), whose new accept row stays untouched.
    """
    rng = torch.Generator().manual_seed(seed)
    draft_token_num = topk * num_steps + 1
    width = num_steps + 1
    accept_index = torch.full((bs, width), -1, dtype=torch.int64)
    accept_index[:, 0] = torch.arange(bs) * draft_token_num
    accepted = torch.randint(0, width, (bs,), generator=rng)
    for column in range(1, width):  # whatever verify accepted before the override
        accept_index[:, column] = torch.where(column <= accepted, accept_index[:, 0] + column, -1)
    if padded_rows and bs:
        accept_index[torch.rand(bs, generator=rng) < 0.3, 0] = -1
    predicts = torch.randint(0, vocab, (bs * draft_token_num,), generator=rng, dtype=torch.int32)
    num_correct_drafts = accepted.to(torch.int32)
    candidates = torch.randint(0, vocab, (bs, draft_token_num), generator=rng)
    target_predict = torch.randint(0, vocab, (bs, draft_token_num), generator=rng)
    return {
        "accept_index": accept_index.to(idx_dtype).to(device),
        "predicts": predicts.to(device),
        "num_correct_drafts": num_correct_drafts.to(device),
        "candidates": candidates.to(idx_dtype).to(device),
        "target_predict": target_predict.to(idx_dtype).to(device),
        "num_steps": num_steps,
        "mean": mean,
        "method": method,
        "token_mode": token_mode,
        "generator": torch.Generator().manual_seed(seed),  # the host draw: CPU on every device
        "new_accept_index": poison((bs, width), torch.int32, device),
    }


BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "generate_simulated_accept_index": build_generate_simulated_accept_index,
}

OP = "generate_simulated_accept_index"


def cases() -> list[Case]:
    found: list[Case] = []
    for mode, seed, topks in (("fixed", 100, grid.TOPKS), ("real-draft-token", 200, (1,))):
        combos = spread(
            20,
            seed,
            bs=grid.BATCH_SIZES,
            num_steps=grid.STEPS,
            topk=topks,
            idx_dtype=grid.INDEX_DTYPES,
            method=("multinomial", "match-expected"),
            mean=(0.5, 1.0, 2.3, 3.7, 9.0),
            padded_rows=(False, True),
        )
        for j, sizes in enumerate(combos):
            sizes = {**sizes, "token_mode": mode, "seed": seed + j}
            found.append(
                Case(
                    OP,
                    case_label(OP, **sizes),
                    "random",
                    partial(build_generate_simulated_accept_index, **sizes),
                    small=sizes["bs"] <= 3,
                )  # fmt: skip
            )
    for name, sizes in (
        ("bs0", {"bs": 0}),
        ("one_step", {"bs": 3, "num_steps": 1, "token_mode": "real-draft-token"}),
        ("length_max", {"bs": 3, "num_steps": 4, "mean": 100.0, "token_mode": "real-draft-token"}),
        ("length_one", {"bs": 3, "num_steps": 4, "mean": -3.0, "token_mode": "real-draft-token"}),
        ("all_padding", {"bs": 3, "padded_rows": True, "seed": 1}),
    ):
        found.append(
            Case(
                OP,
                f"{OP}[{name}]",
                "edge",
                partial(build_generate_simulated_accept_index, **sizes),
                small=True,
            )
        )
    found += _golden_cases()
    return found


def _golden_cases() -> list[Case]:
    t = torch.tensor

    def build(token_mode: str) -> Callable[[torch.device], dict[str, Any]]:
        def on(device: torch.device) -> dict[str, Any]:
            return {
                "accept_index": t([[0, 1, -1, -1], [4, -1, -1, -1], [-1, -1, -1, -1]], device=device),
                "predicts": t([-7] * 12, dtype=torch.int32, device=device),
                "num_correct_drafts": t([1, 0, 0], dtype=torch.int32, device=device),
                "candidates": t([[9, 8, 7, 6], [5, 4, 3, 2], [1, 1, 1, 1]], device=device),
                "target_predict": t([[1, 2, 3, 4], [5, 6, 7, 8], [0, 0, 0, 0]], device=device),
                "num_steps": 3,
                # "match-expected" with an integral mean: the length is that mean whatever the draw.
                "mean": 3.0,
                "method": "match-expected",
                "token_mode": token_mode,
                "generator": None,
                "new_accept_index": torch.full((3, 4), -7, dtype=torch.int32, device=device),
            }

        return on

    accept = t([[0, 1, 2, -1], [4, 5, 6, -1], [-7, -7, -7, -7]], dtype=torch.int32)
    ncd = t([2, 2, 2], dtype=torch.int32)
    return [
        Case(
            OP,
            f"{OP}[golden:fixed]",
            "golden",
            build("fixed"),
            expected=lambda: {
                "result": accept,
                "predicts": t([100] * 12, dtype=torch.int32),
                "num_correct_drafts": ncd,
            },
            small=True,
        ),
        Case(
            OP,
            f"{OP}[golden:real_draft_token]",
            "golden",
            build("real-draft-token"),
            expected=lambda: {
                "result": accept,
                "predicts": t([8, 7, 3, -7, 4, 3, 7, -7, 1, 1, 0, -7], dtype=torch.int32),
                "num_correct_drafts": ncd,
            },
            small=True,
        ),
    ]


def bad_cases() -> list[BadCase]:
    # The valid calls whose arguments the cases break.
    base = partial(build_generate_simulated_accept_index, bs=3, num_steps=3)
    real = partial(base, token_mode="real-draft-token")
    return [
        bad_case(OP, "accept_index_f32", base, TypeError, "accept_index", accept_index=lambda x: x.float()),
        bad_case(
            OP, "accept_index_no_columns", base, ValueError, "accept_index", accept_index=lambda x: x[:, :0]
        ),
        bad_case(OP, "predicts_i64", base, TypeError, "predicts", predicts=lambda x: x.long()),
        bad_case(OP, "predicts_length", base, ValueError, "predicts", predicts=lambda x: x[1:]),
        bad_case(OP, "ncd_i64", base, TypeError, "num_correct_drafts", num_correct_drafts=lambda x: x.long()),
        bad_case(OP, "candidates_rows", base, ValueError, "candidates", candidates=lambda x: x[1:]),
        bad_case(
            OP, "target_predict_shape", base, ValueError, "target_predict", target_predict=lambda x: x[:, 1:]
        ),
        bad_case(OP, "num_steps_zero", base, ValueError, "num_steps", num_steps=0),
        bad_case(OP, "mean_nan", base, ValueError, "mean", mean=float("nan")),
        bad_case(OP, "mean_str", base, TypeError, "mean", mean="2"),
        bad_case(OP, "method_unknown", base, ValueError, "method", method="uniform"),
        bad_case(OP, "token_mode_unknown", base, ValueError, "token_mode", token_mode="random"),
        bad_case(OP, "real_tokens_on_tree", partial(real, topk=2), ValueError, "candidates"),
        bad_case(OP, "generator_type", base, TypeError, "generator", generator=0),
        bad_case(OP, "out_dtype", base, TypeError, "new_accept_index", new_accept_index=lambda x: x.long()),
        bad_case(OP, "out_width", base, ValueError, "new_accept_index", new_accept_index=lambda x: x[:, 1:]),
        bad_case(
            OP,
            "device_mix",
            base,
            ValueError,
            "num_correct_drafts",
            num_correct_drafts=lambda x: x.to("meta"),
        ),
        bad_case(
            OP,
            "root_out_of_range",
            base,
            ValueError,
            "accept_index",
            value_check=True,
            accept_index=with_entry((1, 0), 12),
        ),
        bad_case(
            OP,
            "candidate_narrowing",
            real,
            ValueError,
            "candidates",
            value_check=True,
            candidates=with_entry((0, 2), 2**40),
        ),
    ]
