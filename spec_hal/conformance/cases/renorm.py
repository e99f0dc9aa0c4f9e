"""Conformance cases of family D7: ``top_k_renorm_prob`` and ``top_p_renorm_prob``.

Probabilities are integer multiples of a power of two whose row totals stay below 2**24 units, so
every float32 sum of them is exact in any order: the top-p boundary (a prefix sum against
``top_p * total``) is then decided identically by every provider, however it adds. Row shapes:

* ``peaked``: a few heavy tokens over a tail of small counts, many of them 0 (a realistic target
  distribution, ties all along the tail);
* ``flat``: counts spread evenly over a range (the kept set reaches deep into the row);
* ``ties``: four distinct values only (the k-th value and the top-p boundary fall inside big ties);
* ``one_hot`` and ``equal``: one non-zero value per row, and every value the same.

Vocabularies of 128k are not ``small`` (they are for accelerators; the Triton interpreter would take
minutes over them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch

from .. import grid
from ..case import BadCase, Case, CaseKind, bad_case, benched, with_entry
from .sampling import case_label, poison, spread

#: Row totals stay below this many units (float32 holds every integer up to 2**24 exactly).
_TOTAL_UNITS = 2**24
#: A vocabulary of the size of today's large models (128k), for accelerator cases.
LARGE_VOCAB = 131072
ROWS = ("peaked", "flat", "ties", "one_hot", "equal")
#: More rows than any vendor configuration's ``row_programs`` (a test checks it).
MANY_ROWS_BATCH = 1100
#: The longest row any vendor configuration holds in registers (a test checks it).
RESIDENT_VOCAB_LIMIT = 32768


def _rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _counts(gen: torch.Generator, batch: int, vocab: int, rows: str) -> torch.Tensor:
    """``[batch, vocab]`` int64 units, every row total positive and below ``_TOTAL_UNITS``."""
    tail = max(min(_TOTAL_UNITS // (4 * max(vocab, 1)), 1000), 1)  # most a tail entry may hold
    if rows == "peaked":
        counts = torch.randint(0, tail + 1, (batch, vocab), generator=gen)
        counts *= torch.rand(batch, vocab, generator=gen) < 0.6  # many exact zeros
        heavy = torch.randint(0, vocab, (batch, 8), generator=gen)
        weights = torch.randint(1, _TOTAL_UNITS // 32, (batch, 8), generator=gen)
        counts.scatter_(1, heavy, weights)
    elif rows == "flat":
        counts = torch.randint(tail // 2, tail + 1, (batch, vocab), generator=gen)
    elif rows == "ties":
        counts = torch.randint(0, 4, (batch, vocab), generator=gen) * max(tail // 4, 1)
    elif rows == "one_hot":
        counts = torch.zeros(batch, vocab, dtype=torch.int64)
        counts.scatter_(1, torch.randint(0, vocab, (batch, 1), generator=gen), 7)
    else:
        counts = torch.full((batch, vocab), 3, dtype=torch.int64)
    # No row may sum to 0 (the contract rejects it).
    empty = counts.sum(1) == 0
    counts[empty, 0] = 1
    return counts


def _probs(gen: torch.Generator, batch: int, vocab: int, rows: str) -> torch.Tensor:
    """Rows of ``_counts``' units, or ("softmax") a softmax of random logits: values whose sums round
    differently in every order of addition (the invariance cases' rows)."""
    if rows == "softmax":
        return torch.softmax(torch.randn(batch, vocab, generator=gen) * 3, dim=-1)
    return _counts(gen, batch, vocab, rows).float() * 2.0**-20


def _parameter_arguments(
    device: torch.device, probs: torch.Tensor, name: str, parameter: Any, in_place: bool, with_out: bool
) -> dict[str, Any]:
    probs = probs.to(device)
    if isinstance(parameter, torch.Tensor):
        parameter = parameter.to(device)
    kwargs: dict[str, Any] = {"probs": probs, name: parameter}
    if in_place:
        kwargs["out"] = probs
    elif with_out:
        kwargs["out"] = poison(probs.shape, torch.float32, device)
    return kwargs


def _random_arguments(
    device: torch.device,
    name: str,
    value: Any,
    choices: Sequence[Any],
    dtype: torch.dtype,
    bs: int,
    vocab: int,
    rows: str,
    in_place: bool,
    with_out: bool,
    seed: int,
) -> dict[str, Any]:
    """Rows of ``rows`` and the parameter ``name``: ``value`` for every row, or (None) a ``[bs]``
    ``dtype`` tensor drawn from ``choices``."""
    gen = _rng(seed)
    probs = _probs(gen, bs, vocab, rows)
    parameter = value
    if value is None:
        parameter = torch.tensor(list(choices))[torch.randint(0, len(choices), (bs,), generator=gen)].to(
            dtype
        )
    return _parameter_arguments(device, probs, name, parameter, in_place, with_out)


#: The bench's large sizes: the vocabulary pass's, and a batch as large as the device's programs.
_LARGE_SIZES = (*grid.LARGE_VOCABULARY_SIZES, {"bs": grid.FULL_DEVICE_BENCH_BATCH, "vocab": 131072})


@benched(vocabulary_pass=True, large_sizes=_LARGE_SIZES)
def build_top_k_renorm_prob(
    device: torch.device,
    *,
    bs: int,
    vocab: int = 64,
    rows: str = "peaked",
    k: int | None = None,
    k_values: Sequence[int] | None = None,
    idx_dtype: torch.dtype = torch.int64,
    in_place: bool = False,
    with_out: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """``k``: one int for every row; else a ``[bs]`` ``idx_dtype`` tensor drawn from ``k_values``
    (default: 1 .. min(V, 256), the range sglang requests use)."""
    choices = k_values if k_values is not None else range(1, min(vocab, 256) + 1)
    return _random_arguments(
        device, "top_k", k, choices, idx_dtype, bs, vocab, rows, in_place, with_out, seed
    )


@benched(vocabulary_pass=True, large_sizes=_LARGE_SIZES)
def build_top_p_renorm_prob(
    device: torch.device,
    *,
    bs: int,
    vocab: int = 64,
    rows: str = "peaked",
    p: float | None = None,
    p_values: Sequence[float] | None = None,
    in_place: bool = False,
    with_out: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """``p``: one float for every row; else a ``[bs]`` float32 tensor drawn from ``p_values``
    (default: multiples of 1/64 from 1/2 to 63/64)."""
    choices = p_values if p_values is not None else [j / 64 for j in range(32, 64)]
    return _random_arguments(
        device, "top_p", p, choices, torch.float32, bs, vocab, rows, in_place, with_out, seed
    )


BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "top_k_renorm_prob": build_top_k_renorm_prob,
    "top_p_renorm_prob": build_top_p_renorm_prob,
}


# --------------------------------------------------------------------------------------------------
# Cases


def _is_small(bs: int, vocab: int) -> bool:
    return bs <= 3 and vocab <= 64


def _case(op: str, name: str, kind: CaseKind = "edge", small: bool | None = None, **sizes: Any) -> Case:
    label = name if kind == "edge" else case_label(op, **sizes)
    if small is None:
        small = _is_small(sizes["bs"], sizes.get("vocab", 64))
    name = f"{op}[{label}]" if kind == "edge" else label
    return Case(op, name, kind, partial(BUILDERS[op], **sizes), small=small)


def _random_cases(op: str, count: int, seed: int, **axes: Sequence[Any]) -> list[Case]:
    return [
        _case(op, "", "random", **sizes, seed=seed + j) for j, sizes in enumerate(spread(count, seed, **axes))
    ]


#: Special k values: <= 0 and >= V keep the row; V - 1 drops the smallest value (and its ties).
_SPECIAL_K = (-3, 0, 1, 2, 5, 63, 64, 65, 99, 100, 1000)
#: Every row kept (1), a tiny nucleus, and values around the usual settings.
_SPECIAL_P = (1 / 64, 0.25, 0.5, 0.75, 0.875, 0.9375, 1.0)


def cases() -> list[Case]:
    bs, vocabs = grid.BATCH_SIZES, (1, 2, 5, 64, 100, 300)
    found: list[Case] = []
    found += _random_cases(
        "top_k_renorm_prob", 24, 1100, bs=bs, vocab=vocabs, rows=ROWS, idx_dtype=grid.INDEX_DTYPES,
        in_place=(False, False, True),
    )  # fmt: skip
    found += _random_cases(
        "top_k_renorm_prob", 8, 1150, bs=bs, vocab=vocabs, rows=ROWS, k_values=(_SPECIAL_K,)
    )
    found += _random_cases(
        "top_k_renorm_prob", 6, 1170, bs=bs, vocab=vocabs, rows=ROWS, k=(-1, 1, 3, 64, 10**12)
    )
    found += _random_cases(
        "top_p_renorm_prob", 24, 1200, bs=bs, vocab=vocabs, rows=ROWS, in_place=(False, False, True)
    )
    found += _random_cases(
        "top_p_renorm_prob", 8, 1250, bs=bs, vocab=vocabs, rows=ROWS, p_values=(_SPECIAL_P,)
    )
    found += _random_cases(
        "top_p_renorm_prob", 6, 1270, bs=bs, vocab=vocabs, rows=ROWS, p=(1 / 64, 0.5, 0.9, 1.0)
    )
    found += _edge_cases()
    found += _golden_cases()
    return found


def _edge_cases() -> list[Case]:
    k, p = "top_k_renorm_prob", "top_p_renorm_prob"
    wide: dict[str, Any] = {"vocab": 200, "small": True}  # narrowed first (the interpreter's tile: 64)
    edges = [
        _case(k, "bs0", bs=0),
        _case(p, "bs0", bs=0),
        _case(k, "bs0_no_out", bs=0, with_out=False),
        _case(k, "vocab1", bs=3, vocab=1, k_values=(1, 0, 2)),
        _case(p, "vocab1", bs=3, vocab=1),
        _case(k, "vocab2", bs=3, vocab=2, rows="ties", k_values=(1, 2, 3)),
        _case(p, "vocab2", bs=3, vocab=2, rows="ties", p_values=(0.25, 0.5, 1.0)),
        _case(k, "k1", bs=3, k=1),
        _case(k, "k1_ties", bs=3, rows="ties", k=1),
        _case(k, "k_equals_v", bs=3, k=64),
        _case(k, "k_above_v", bs=3, k=65),
        _case(k, "k_zero", bs=3, k=0),
        _case(k, "k_negative_tensor", bs=3, k_values=(-1, -100), idx_dtype=torch.int32),
        _case(k, "k_v_minus_1_equal_rows", bs=3, rows="equal", k=63),
        _case(k, "ties_at_boundary", bs=3, rows="ties", k_values=(5, 20, 40)),
        _case(k, "int32", bs=3, idx_dtype=torch.int32),
        _case(k, "in_place", bs=3, rows="ties", in_place=True),
        _case(k, "no_out", bs=3, with_out=False),
        _case(k, "one_hot", bs=3, rows="one_hot", k_values=(1, 2, 64)),
        _case(k, "wide_peaked", bs=2, rows="peaked", k_values=(1, 30, 150), **wide),
        _case(k, "wide_ties", bs=2, rows="ties", k_values=(3, 70, 120), **wide),
        _case(k, "wide_flat_in_place", bs=2, rows="flat", in_place=True, **wide),
        _case(p, "top_p_1", bs=3, p=1.0),
        _case(p, "top_p_1_tensor", bs=3, p_values=(1.0,)),
        _case(p, "tiny_nucleus", bs=3, p=1e-6),
        _case(p, "ties_at_boundary", bs=3, rows="ties", p_values=(0.3, 0.5, 0.7)),
        _case(p, "equal_rows", bs=3, rows="equal", p=0.5),
        _case(p, "one_hot", bs=3, rows="one_hot", p=0.5),
        _case(p, "in_place", bs=3, in_place=True),
        _case(p, "no_out", bs=3, with_out=False),
        _case(p, "wide_peaked", bs=2, rows="peaked", p_values=(0.5, 0.9375), **wide),
        _case(p, "wide_ties", bs=2, rows="ties", p_values=(0.25, 0.75), **wide),
        _case(p, "wide_flat_in_place", bs=2, rows="flat", in_place=True, **wide),
    ]
    for rows in ("peaked", "flat"):  # accelerators: the narrowing passes at a real vocabulary
        edges += [
            _case(
                k, f"v128k_{rows}", bs=4, vocab=LARGE_VOCAB, rows=rows, k_values=(1, 50, 1000, LARGE_VOCAB)
            ),
            _case(p, f"v128k_{rows}", bs=4, vocab=LARGE_VOCAB, rows=rows, p_values=(0.5, 0.9, 0.99, 1.0)),
        ]
    # More rows than any vendor's row_programs. Rows that fit a program's registers are read once
    # into them (at any batch); longer ones are still split over programs, as in the 128k cases.
    many_rows: dict[str, Any] = {"bs": MANY_ROWS_BATCH, "vocab": 3000}
    many_rows_wide: dict[str, Any] = {"bs": MANY_ROWS_BATCH, "vocab": RESIDENT_VOCAB_LIMIT + 232}
    edges += [
        _case(k, "many_rows", rows="peaked", k_values=(1, 7, 100, 2999, 0), **many_rows),
        _case(k, "many_rows_scalar_k", rows="flat", k=100, **many_rows),
        _case(p, "many_rows", rows="flat", p_values=(0.25, 0.9, 0.999, 1.0), **many_rows),
        _case(p, "many_rows_scalar_p", rows="peaked", p=0.9, **many_rows),
        _case(k, "many_rows_wide", rows="peaked", k_values=(1, 50, 4000, 0), **many_rows_wide),
        _case(p, "many_rows_wide", rows="flat", p_values=(0.5, 0.9, 0.999, 1.0), **many_rows_wide),
        # A few of the longest rows registers hold: each in one program's registers, as at any batch.
        _case(k, "few_rows", bs=4, vocab=RESIDENT_VOCAB_LIMIT, rows="peaked", k_values=(1, 7, 500, 0)),
        _case(p, "few_rows", bs=4, vocab=RESIDENT_VOCAB_LIMIT, rows="flat", p_values=(0.25, 0.9, 1.0)),
    ]
    return edges


def _golden(
    op: str, name: str, probs: list[list[float]], parameter: Any, expected: list[list[float]]
) -> Case:
    name_of = "top_k" if op == "top_k_renorm_prob" else "top_p"

    def build(device: torch.device) -> dict[str, Any]:
        value = parameter
        if isinstance(parameter, list):
            value = torch.tensor(parameter, dtype=torch.int64 if name_of == "top_k" else torch.float32)
        return _parameter_arguments(device, torch.tensor(probs), name_of, value, False, True)

    return Case(
        op, f"{op}[golden:{name}]", "golden", build, small=True,
        expected=lambda: {"out": torch.tensor(expected), "result": torch.tensor(expected)},
    )  # fmt: skip


def _golden_cases() -> list[Case]:
    k, p = "top_k_renorm_prob", "top_p_renorm_prob"
    return [
        # The 2nd largest value is 2, held three times: all three are kept.
        _golden(k, "ties_kept", [[1.0, 2.0, 4.0, 2.0, 2.0]], 2, [[0.0, 0.2, 0.4, 0.2, 0.2]]),
        # Per row: k = 1, k = 0 (every value), k >= V (every value).
        _golden(
            k,
            "per_row",
            [[1.0, 3.0, 0.0, 4.0], [1.0, 3.0, 0.0, 4.0], [2.0, 2.0, 0.0, 4.0]],
            [1, 0, 9],
            [[0.0, 0.0, 0.0, 1.0], [0.125, 0.375, 0.0, 0.5], [0.25, 0.25, 0.0, 0.5]],
        ),  # fmt: skip
        # Prefix sums 0.5, 0.75: the target 0.75 is reached exactly at the second value.
        _golden(p, "exact_boundary", [[0.125, 0.25, 0.5, 0.125]], 0.75, [[0.0, 1 / 3, 2 / 3, 0.0]]),
        # Rows: the boundary inside a tie keeps the whole tie; top_p = 1 keeps the row.
        _golden(
            p,
            "per_row",
            [[0.25, 0.25, 0.25, 0.25], [0.5, 0.0, 0.25, 0.25]],
            [0.3, 1.0],
            [[0.25, 0.25, 0.25, 0.25], [0.5, 0.0, 0.25, 0.25]],
        ),  # fmt: skip
        # Sums are relative to the row total (rows need not sum to 1): target 0.5 * 8 = 4.
        _golden(p, "unnormalised", [[1.0, 4.0, 2.0, 1.0]], [0.5], [[0.0, 1.0, 0.0, 0.0]]),
        # top_p * total rounds to 0 in float32: the smallest prefix reaching it is the maximum.
        _golden(p, "target_rounds_to_zero", [[1e-30, 5e-31, 0.0, 1e-31]], [1e-16], [[1.0, 0.0, 0.0, 0.0]]),
        # -0.0 is a probability of 0: with k above the positive values, tau is 0 and they are kept.
        _golden(k, "negative_zeros", [[0.5, -0.0, 0.25, 0.0]], [3], [[2 / 3, -0.0, 1 / 3, 0.0]]),
    ]


# --------------------------------------------------------------------------------------------------
# Bad cases


def bad_cases() -> list[BadCase]:
    k, p = "top_k_renorm_prob", "top_p_renorm_prob"
    top_k = partial(build_top_k_renorm_prob, bs=3)
    top_p = partial(build_top_p_renorm_prob, bs=3)
    cases: list[BadCase] = []
    name: str
    for op, valid, name in ((k, top_k, "top_k"), (p, top_p, "top_p")):
        cases += [
            bad_case(op, "probs_f64", valid, TypeError, "probs", probs=lambda x: x.double(), out=None),
            bad_case(op, "probs_bf16", valid, TypeError, "probs", probs=lambda x: x.bfloat16(), out=None),
            bad_case(op, "probs_1d", valid, ValueError, "probs", probs=lambda x: x.flatten(), out=None),
            bad_case(op, "probs_empty_vocab", valid, ValueError, "probs", probs=lambda x: x[:, :0], out=None),
            bad_case(op, "out_f64", valid, TypeError, "out", out=lambda x: x.double()),
            bad_case(op, "out_shape", valid, ValueError, "out", out=lambda x: x[:, 1:]),
            bad_case(op, "out_device", valid, ValueError, "out", out=lambda x: x.to("meta")),
            BadCase(op, "out_overlaps_probs", _with_overlapping_out(valid), ValueError, "out"),
            bad_case(op, "out_expanded", valid, ValueError, "out", out=lambda x: x[:1].expand_as(x)),
            BadCase(op, "in_place_expanded", _in_place_expanded(valid), ValueError, "out"),
            BadCase(op, f"{name}_in_out", _with_parameter_in_out(valid, name), ValueError, name),
            bad_case(op, f"{name}_shape", valid, ValueError, name, **_changing(name, lambda x: x[:2])),
            bad_case(op, f"{name}_device", valid, ValueError, name, **_changing(name, lambda x: x.to("meta"))),
            bad_case(op, f"{name}_bool", valid, TypeError, name, **_changing(name, True)),
            bad_case(op, f"{name}_string", valid, TypeError, name, **_changing(name, "1")),
            bad_case(op, "negative_probs", valid, ValueError, "probs", value_check=True, probs=with_entry((1, 3), -0.25)),
            bad_case(op, "nan_probs", valid, ValueError, "probs", value_check=True, probs=with_entry((2, 0), float("nan"))),
            bad_case(op, "inf_probs", valid, ValueError, "probs", value_check=True, probs=with_entry((0, 5), float("inf"))),
            bad_case(op, "zero_row", valid, ValueError, "probs", value_check=True, probs=_zero_row),
            bad_case(op, "sum_overflows", valid, ValueError, "probs", value_check=True, probs=_overflowing_row),
        ]  # fmt: skip
    cases += [
        bad_case(k, "top_k_float_tensor", top_k, TypeError, "top_k", top_k=lambda x: x.float()),
        bad_case(k, "top_k_int16_tensor", top_k, TypeError, "top_k", top_k=lambda x: x.to(torch.int16)),
        bad_case(k, "top_k_float", top_k, TypeError, "top_k", top_k=2.0),
        bad_case(p, "top_p_f64_tensor", top_p, TypeError, "top_p", top_p=lambda x: x.double()),
        bad_case(p, "top_p_int_tensor", top_p, TypeError, "top_p", top_p=lambda x: x.long()),
        bad_case(p, "top_p_zero", top_p, ValueError, "top_p", top_p=0.0),
        bad_case(p, "top_p_above_1", top_p, ValueError, "top_p", top_p=1.5),
        bad_case(p, "top_p_negative", top_p, ValueError, "top_p", top_p=-0.5),
        bad_case(p, "top_p_nan", top_p, ValueError, "top_p", top_p=float("nan")),
        bad_case(p, "top_p_tensor_zero", top_p, ValueError, "top_p", value_check=True, top_p=with_entry((1,), 0.0)),
        bad_case(p, "top_p_tensor_above_1", top_p, ValueError, "top_p", value_check=True, top_p=with_entry((0,), 1.25)),
        bad_case(p, "top_p_tensor_nan", top_p, ValueError, "top_p", value_check=True, top_p=with_entry((2,), float("nan"))),
    ]  # fmt: skip
    return cases


def _changing(name: str, change: Any) -> dict[str, Any]:
    """``{name: change}`` for :func:`bad_case`, whose other keywords it must not be taken for."""
    return {name: change}


def _with_overlapping_out(
    builder: Callable[[torch.device], dict[str, Any]],
) -> Callable[[torch.device], dict[str, Any]]:
    """``builder``'s call with ``probs`` and ``out`` two views of one buffer, one column apart."""

    def build(device: torch.device) -> dict[str, Any]:
        kwargs = builder(device)
        batch, vocab = kwargs["probs"].shape
        room = torch.zeros(batch, vocab + 1, device=device)
        room[:, 1:] = kwargs["probs"]
        kwargs["probs"], kwargs["out"] = room[:, 1:], room[:, :-1]
        return kwargs

    return build


def _with_parameter_in_out(
    builder: Callable[[torch.device], dict[str, Any]], name: str
) -> Callable[[torch.device], dict[str, Any]]:
    """``builder``'s call with the per-row parameter ``name`` held in ``out``'s first column (as
    int32 bits for ``top_k``)."""

    def build(device: torch.device) -> dict[str, Any]:
        kwargs = builder(device)
        out = torch.zeros_like(kwargs["probs"])
        column = (out.view(torch.int32) if name == "top_k" else out)[:, 0]
        column.copy_(kwargs[name])
        kwargs[name], kwargs["out"] = column, out
        return kwargs

    return build


def _zero_row(probs: torch.Tensor) -> torch.Tensor:
    probs = probs.clone()
    probs[1] = 0
    return probs


def _overflowing_row(probs: torch.Tensor) -> torch.Tensor:
    """Finite values whose float32 sum is inf: renormalised, they would divide by inf."""
    probs = probs.clone()
    probs[1, :2] = 3e38
    return probs


def _in_place_expanded(
    builder: Callable[[torch.device], dict[str, Any]],
) -> Callable[[torch.device], dict[str, Any]]:
    """``builder``'s call in place on a ``probs`` whose rows are one row, expanded."""

    def build(device: torch.device) -> dict[str, Any]:
        kwargs = builder(device)
        kwargs["probs"] = kwargs["out"] = kwargs["probs"][:1].expand_as(kwargs["probs"])
        return kwargs

    return build
