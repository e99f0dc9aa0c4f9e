"""Conformance cases of keyed randomness and invariance (D8).

* ``keyed_uniform``: random cases compared bit for bit with the portable reference, and golden cases
  whose expected values come from a loop oracle (plain Python integers, one lane at a time) that is
  itself checked against Random123's three known answers of Philox4x32-10 before it is trusted.
* Keyed ``fast_sample`` and ``sample_draft_proposal``: keyed draws are the same on every device, so
  their samples are compared like any output (a provider's ids may differ only where a row's two
  best scores lie within 4 float32 ulp, which these sizes make vanishingly rare).
* Invariance cases (``invariance`` in their names) of every row-wise op of family D: each names its
  row-wise arguments, from which the runner takes rows alone, slices, permutations and repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from ..._constants import LANE_LIMIT, POSITION_LIMIT
from ...ops.sampling.keyed import DOMAINS
from .. import grid
from ..case import BadCase, Case, bad_case, benched, with_entry
from . import renorm, sampling, tree

# --------------------------------------------------------------------------------------------------
# The loop oracle

_MASK = 0xFFFFFFFF
#: Random123's known answers of Philox4x32-10: (counter, key, output).
KNOWN_ANSWERS = (
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((_MASK,) * 4, (_MASK, _MASK), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
)


def philox_oracle(counter: tuple[int, ...], key: tuple[int, int]) -> tuple[int, ...]:
    """Philox4x32-10 of one counter, in Python integers, written from Random123's definition."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_index in range(10):
        if round_index:
            k0, k1 = (k0 + 0x9E3779B9) & _MASK, (k1 + 0xBB67AE85) & _MASK
        product0, product1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (
            (product1 >> 32) ^ c1 ^ k0,
            product1 & _MASK,
            (product0 >> 32) ^ c3 ^ k1,
            product0 & _MASK,
        )
    return c0, c1, c2, c3


def checked_oracle() -> Callable[[tuple[int, ...], tuple[int, int]], tuple[int, ...]]:
    """The oracle, once it reproduces the known answers (a wrong oracle would pass wrong providers)."""
    for counter, key, answer in KNOWN_ANSWERS:
        got = philox_oracle(counter, key)
        if got != answer:
            raise AssertionError(
                f"the Philox oracle gives {[hex(w) for w in got]} for a known answer {answer}"
            )
    return philox_oracle


def oracle_uniforms(seeds: list[int], positions: list[int], step: int, domain: int, n: int) -> torch.Tensor:
    """``keyed_uniform``'s values, one lane at a time."""
    philox = checked_oracle()
    rows = []
    for seed, position in zip(seeds, positions, strict=True):
        seed &= (1 << 64) - 1  # the 64-bit two's complement
        key = (seed & _MASK, seed >> 32)
        row = []
        for lane in range(n):
            counter = (lane >> 2, position & _MASK, (position >> 32) | (step << 16), domain)
            word = philox(counter, key)[lane & 3]
            row.append(((word >> 9) * 2 + 1) * 2.0**-24)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32).reshape(len(seeds), n)


# --------------------------------------------------------------------------------------------------
# Builders


# the noise of the draft proposals at a 128k vocabulary
@benched(large_sizes=grid.LARGE_VOCABULARY_SIZES)
def build_keyed_uniform(
    device: torch.device,
    *,
    bs: int,
    vocab: int = 37,
    step: int = 0,
    domain: int = 2,
    seed: int = 0,
    with_out: bool = True,
) -> dict[str, Any]:
    """``vocab`` lanes a row (the draft proposals' noise spans a vocabulary)."""
    kwargs: dict[str, Any] = {
        **sampling.keys(torch.Generator().manual_seed(seed), bs, device, step),
        "domain": domain,
        "n": vocab,
    }
    if with_out:
        kwargs["out"] = torch.full((bs, vocab), grid.POISON_FLOAT, device=device)
    return kwargs


BUILDERS = {"keyed_uniform": build_keyed_uniform}


def _golden_keyed(name: str, seeds: list[int], positions: list[int], step: int, domain: int, n: int) -> Case:
    def build(device: torch.device) -> dict[str, Any]:
        return {
            "seeds": torch.tensor(seeds, dtype=torch.int64, device=device),
            "positions": torch.tensor(positions, dtype=torch.int64, device=device),
            "step": step,
            "domain": domain,
            "n": n,
        }

    def expected() -> dict[str, Any]:
        return {"result": oracle_uniforms(seeds, positions, step, domain, n)}

    return Case(
        "keyed_uniform", f"keyed_uniform[golden:{name}]", "golden", build, expected, small=True, exact=True
    )


# --------------------------------------------------------------------------------------------------
# Cases

KEYED_ROWS = ("seeds", "positions", "out")
#: Rows long enough for a Triton vendor to split them over programs (see ``sampling``'s edges).
SPLIT_VOCAB = 8 * 8192 + 333
#: Rows the interpreter's configuration splits for the softmax (chunks of two 64-lane tiles).
INTERPRETED_SPLIT_VOCAB = 8 * 128 + 37


def _invariance(op: str, name: str, build: Callable[..., dict[str, Any]], row_args: tuple[str, ...], small: bool,
                **sizes: Any) -> Case:  # fmt: skip
    return Case(op, f"{op}[invariance:{name}]", "edge", partial(build, **sizes), small=small, rows=row_args)


def cases() -> list[Case]:
    found = [
        Case(
            "keyed_uniform",
            f"keyed_uniform[bs={bs},n={n},step={step},domain={DOMAINS[domain]}]",
            "random",
            partial(build_keyed_uniform, bs=bs, vocab=n, step=step, domain=domain, seed=900 + j),
            small=bs <= 3 and n <= 64,
            exact=True,
        )
        for j, (bs, n, step, domain) in enumerate(
            [(0, 5, 0, 1), (1, 1, 0, 1), (3, 37, 1, 2), (64, 300, 65535, 3), (257, 4, 2, 2), (3, 9000, 7, 1)]
        )
    ]
    found += [
        _golden_keyed("zero_key", [0], [0], 0, 1, 8),
        _golden_keyed("full_words", [-1, 2**63 - 1], [POSITION_LIMIT - 1, 2**32], 65535, 3, 11),
        _golden_keyed("spread", [0x0123456789ABCDEF, -(2**63), 12345], [7, 2**40 + 3, 0], 513, 2, 6),
    ]
    S, R = sampling.BUILDERS, renorm.BUILDERS
    keyed_sample = ("probs", "seeds", "positions", "out")
    keyed_draft = ("logits", "temperatures", "top_ks", "seeds", "positions", "out")
    found += [
        *(
            Case(op, sampling.case_label(op, bs=bs, vocab=vocab, keyed=True), "random",
                 partial(S[op], bs=bs, vocab=vocab, keyed=True, seed=950 + j), small=bs <= 3 and vocab <= 64)
            for j, (op, bs, vocab) in enumerate(
                [("fast_sample", 3, 48), ("fast_sample", 64, 100), ("sample_draft_proposal", 3, 48),
                 ("sample_draft_proposal", 64, 100), ("fast_sample", 3, SPLIT_VOCAB),
                 ("sample_draft_proposal", 3, SPLIT_VOCAB)]
            )
        ),
        _invariance("keyed_uniform", "n37", build_keyed_uniform, KEYED_ROWS, True, bs=3, vocab=37),
        _invariance("keyed_uniform", "n9000", build_keyed_uniform, KEYED_ROWS, False, bs=5, vocab=9000),
        _invariance("fast_topk", "k4", S["fast_topk"], ("values", "out"), True, bs=3, topk=4, vocab=64),
        _invariance("fast_topk", "split_k8", S["fast_topk"], ("values", "out"), False, bs=3, topk=8, vocab=SPLIT_VOCAB),
        _invariance("fast_sample", "keyed", S["fast_sample"], keyed_sample, True, bs=3, vocab=48, num_samples=2,
                    keyed=True),
        _invariance("fast_sample", "keyed_split", S["fast_sample"], keyed_sample, False, bs=3, vocab=SPLIT_VOCAB,
                    num_samples=4, keyed=True),
        _invariance("renorm_draft_probs", "split", S["renorm_draft_probs"], ("logits", "temperatures", "probs"),
                    True, bs=3, vocab=INTERPRETED_SPLIT_VOCAB),
        _invariance("renorm_draft_probs", "wide", S["renorm_draft_probs"], ("logits", "temperatures", "probs"),
                    False, bs=3, vocab=SPLIT_VOCAB * 2),
        _invariance("sample_draft_proposal", "keyed_split", S["sample_draft_proposal"], keyed_draft, True, bs=3,
                    vocab=INTERPRETED_SPLIT_VOCAB, keyed=True),
        _invariance("sample_draft_proposal", "keyed_wide", S["sample_draft_proposal"], keyed_draft, False, bs=3,
                    vocab=SPLIT_VOCAB, keyed=True),
    ]  # fmt: skip
    # Per request, the verify ops: flat predicts in blocks of D, flat node ids rebased (their result
    # is the same tensors as their outputs, compared under those names).
    T = tree.BUILDERS
    verify_rows = ("accept_index", "num_correct_drafts", "candidates", "retrieve_index", "retrieve_next_token",
                   "retrieve_next_sibling", "target_predict", "uniform_samples", "uniform_samples_for_final_sampling",
                   "target_probs", "draft_probs")  # fmt: skip
    for op, sizes, small in (
        ("verify_tree_greedy", {"bs": 5, "topk": 2, "num_steps": 3}, True),
        (
            "tree_speculative_sampling_target_only",
            {"bs": 5, "topk": 2, "num_steps": 3, "draft_zero": False},
            True,
        ),
        (
            "tree_speculative_sampling_target_only",
            {"bs": 3, "topk": 4, "num_steps": 3, "vocab": 32768},
            False,
        ),
        ("chain_speculative_sampling", {"bs": 5, "num_steps": 3}, True),
        ("chain_speculative_sampling", {"bs": 3, "num_steps": 4, "vocab": 32768}, False),
    ):
        name = ",".join(f"{k}={v}" for k, v in sizes.items() if k != "draft_zero")
        found.append(
            Case(
                op,
                f"{op}[invariance:{name}]",
                "edge",
                partial(T[op], **sizes),
                small=small,
                unchecked=frozenset({"result"}),
                rows=verify_rows,
                flat_rows=("predicts",),
                flat_ids=("accept_index", "retrieve_index"),
            )  # fmt: skip
        )
    for op, parameter, values in (("top_k_renorm_prob", "k_values", (1, 7, 0)), ("top_p_renorm_prob", "p_values",
                                  (0.5, 0.9, 1.0))):  # fmt: skip
        name = parameter[0]
        renorm_rows = ("probs", f"top_{name}", "out")
        found += [
            _invariance(op, "split", R[op], renorm_rows, True, bs=3, vocab=300, rows="softmax", **{parameter: values}),
            _invariance(op, "v128k", R[op], renorm_rows, False, bs=3, vocab=renorm.LARGE_VOCAB, rows="softmax",
                        **{parameter: values}),
        ]  # fmt: skip
    return found


def bad_cases() -> list[BadCase]:
    uniform = partial(build_keyed_uniform, bs=3, vocab=5)
    sample = partial(sampling.BUILDERS["fast_sample"], bs=3, keyed=True)
    draft = partial(sampling.BUILDERS["sample_draft_proposal"], bs=3, keyed=True)
    found = [
        bad_case("keyed_uniform", "seeds_int32", uniform, TypeError, "seeds", seeds=lambda x: x.int()),
        bad_case("keyed_uniform", "positions_int32", uniform, TypeError, "positions", positions=lambda x: x.int()),
        bad_case("keyed_uniform", "positions_shape", uniform, ValueError, "positions", positions=lambda x: x[:2]),
        bad_case("keyed_uniform", "seeds_2d", uniform, ValueError, "seeds", seeds=lambda x: x[:, None]),
        bad_case("keyed_uniform", "step_negative", uniform, ValueError, "step", step=-1),
        bad_case("keyed_uniform", "step_too_big", uniform, ValueError, "step", step=2**16),
        bad_case("keyed_uniform", "domain_zero", uniform, ValueError, "domain", domain=0),
        bad_case("keyed_uniform", "domain_float", uniform, TypeError, "domain", domain=1.0),
        bad_case("keyed_uniform", "n_negative", uniform, ValueError, "n", n=-1, out=None),
        bad_case("keyed_uniform", "n_too_big", uniform, ValueError, "n", n=LANE_LIMIT, out=None),
        bad_case("keyed_uniform", "out_dtype", uniform, TypeError, "out", out=lambda x: x.double()),
        bad_case("keyed_uniform", "out_shape", uniform, ValueError, "out", out=lambda x: x[:, :4]),
        bad_case("keyed_uniform", "position_negative", uniform, ValueError, "positions",
                 value_check=True, positions=with_entry(1, -1)),
        bad_case("keyed_uniform", "position_2_48", uniform, ValueError, "positions",
                 value_check=True, positions=with_entry(2, POSITION_LIMIT)),
    ]  # fmt: skip
    for op, build in (("fast_sample", sample), ("sample_draft_proposal", draft)):
        found += [
            bad_case(op, "keyed_with_generator", build, ValueError, "generator", generator=torch.Generator()),
            bad_case(op, "seeds_without_positions", build, ValueError, "positions", positions=None),
            bad_case(op, "positions_without_seeds", build, ValueError, "seeds", seeds=None),
            bad_case(op, "step_without_seeds", build, ValueError, "step", seeds=None, positions=None, step=3),
            bad_case(op, "seeds_int32", build, TypeError, "seeds", seeds=lambda x: x.int()),
            bad_case(op, "seeds_shape", build, ValueError, "seeds", seeds=lambda x: x[:2]),
            bad_case(op, "positions_2d", build, ValueError, "positions", positions=lambda x: x[:, None]),
            bad_case(op, "step_too_big", build, ValueError, "step", step=2**16),
            bad_case(op, "step_bool", build, TypeError, "step", step=True),
            bad_case(op, "position_negative", build, ValueError, "positions", value_check=True,
                     positions=with_entry(0, -5)),
        ]  # fmt: skip
    return found
