"""Family D's topk = 1 Triton kernels (interpreted) against the portable references (the walks over
the vocabulary: ``test_vocab.py``). Helpers and the kinds of checks: see ``test_tree.py``."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from triton_family.interpreted import TRITON_VENDORS, provider, register_launchers, small_cases
from triton_family.test_tree import (
    assert_passes,
    assert_passes_with_vendor_config,
    assert_providers_agree,
    built,
    case_id,
    column_major,
    padded,
    relaid,
)

from spec_hal import registry
from spec_hal.conformance.cases import sampling as sampling_cases
from spec_hal.devices.cuda import TRITON_CONFIG as HOPPER
from spec_hal.kernels.triton import sampling as sampling_kernels
from spec_hal.kernels.triton.config import INTERPRETER
from spec_hal.testing import isolated_registry

OPS = ("draft_topk1_postprocess", "target_verify_topk1_postprocess", "draft_extend_topk1_postprocess")
#: Several vocabulary slices (two launches: partials, then the op's kernel) under the interpreter
#: configuration (slices of 32-128 fp32 logits), the last one partial.
SLICED = 300 + 7
#: The same under every vendor configuration (Hopper slices hold 1-4 K fp32 logits).
WIDE = 8192 + 77

B = sampling_cases.BUILDERS
#: Run under every vendor configuration too.
WIDE_CASES = [
    built(B, "draft_topk1_postprocess", "wide_bf16", bs=2, vocab=WIDE, dtype=torch.bfloat16),
    built(B, "target_verify_topk1_postprocess", "wide_nan", bs=2, vocab=WIDE, nan_rows=True, idx_dtype=torch.int32),
    built(B, "draft_extend_topk1_postprocess", "wide_hidden", bs=2, vocab=WIDE, hidden_size=5000),
]  # fmt: skip
EXTRA = [
    built(B, "draft_topk1_postprocess", "sliced_bf16", bs=2, vocab=SLICED, dtype=torch.bfloat16),
    built(B, "draft_topk1_postprocess", "fp16_int32", bs=3, vocab=200, dtype=torch.float16, idx_dtype=torch.int32),
    built(B, "target_verify_topk1_postprocess", "sliced_nan", bs=2, vocab=SLICED, nan_rows=True, idx_dtype=torch.int32),
    built(B, "target_verify_topk1_postprocess", "sliced_simulated_real", bs=2, vocab=SLICED, num_simulated_accept_tokens=3, use_real_draft_tokens=True),
    built(B, "target_verify_topk1_postprocess", "simulated_fixed", bs=3, num_steps=4, num_simulated_accept_tokens=2),
    built(B, "target_verify_topk1_postprocess", "truncated_f64", bs=3, num_steps=5, dtype=torch.float64, truncated_chains=True),
    built(B, "draft_extend_topk1_postprocess", "sliced_int32", bs=2, vocab=SLICED, idx_dtype=torch.int32, hidden_size=0),
    built(B, "draft_extend_topk1_postprocess", "sliced_hidden_dsa", bs=3, vocab=SLICED, hidden_size=150, dsa_width=70),
    built(B, "draft_extend_topk1_postprocess", "fp16_int64_dsa", bs=3, vocab=32, dtype=torch.float16, dsa_dtype=torch.int64),
]  # fmt: skip
STRIDED = [
    relaid(small_cases(op)[0], layout, skip=("logits",) if op == "draft_topk1_postprocess" else ())
    for op in OPS
    for layout in (padded, column_major)
]


@pytest.mark.parametrize("case", [c for op in OPS for c in small_cases(op)] + EXTRA + STRIDED, ids=case_id)
def test_case(case):
    assert_passes(case)


@pytest.mark.parametrize("vendor", TRITON_VENDORS)
def test_every_vendor_configuration(vendor):
    golden = [c for op in OPS for c in small_cases(op) if c.kind == "golden"]
    assert_passes_with_vendor_config(vendor, sampling_kernels, [*golden, *WIDE_CASES])


# --------------------------------------------------------------------------------------------------
# Malformed inputs, providers called directly


#: Partials grids capped at 3 programs: each program takes several rows.
SMALL_GRID = dataclasses.replace(INTERPRETER, max_grid=3)


def _verify_outputs(bs: int, num_nodes: int) -> list[torch.Tensor]:
    shapes = [
        ((bs * num_nodes,), torch.int32), ((bs,), torch.int32), ((bs,), torch.int32),
        ((bs, num_nodes), torch.int32), ((bs,), torch.int32), ((bs,), torch.int64),
        ((bs,), torch.int64), ((bs * num_nodes,), torch.int64),
    ]  # fmt: skip
    return [torch.full(shape, -7, dtype=dtype) for shape, dtype in shapes]


@pytest.mark.parametrize("config", [INTERPRETER, SMALL_GRID], ids=["grid", "small_grid"])
@pytest.mark.parametrize("vocab", [5, SLICED])
def test_target_verify_garbage_ids(vocab, config):
    # Flat ids and links outside the tree: the walk stops there and nothing is written out of range.
    # A path write depends on its flat id only, so ids shared between requests stay unambiguous.
    gen = torch.Generator().manual_seed(vocab)
    bs, num_nodes = 4, 5
    logits = torch.randn(bs * num_nodes, vocab, generator=gen)
    logits[3, 2] = float("nan")
    args = [
        logits,
        torch.randint(0, vocab, (bs, num_nodes), generator=gen),
        torch.randint(-2, bs * num_nodes + 2, (bs, num_nodes), generator=gen).int(),
        torch.randint(-2, num_nodes + 2, (bs, num_nodes), generator=gen),
        torch.randint(0, 100, (bs,), generator=gen).int(),
        0,
        False,
        *_verify_outputs(bs, num_nodes),
    ]
    # The target's argmax follows some drafts, so that walks go deeper than one step.
    args[1][:, 1:] = logits.view(bs, num_nodes, vocab).argmax(-1)[:, :-1]
    assert_providers_agree(
        "target_verify_topk1_postprocess", provider("target_verify_topk1_postprocess", config), args
    )


@pytest.mark.parametrize("vocab", [6, SLICED])
def test_draft_extend_out_of_range_rows(vocab):
    gen = torch.Generator().manual_seed(vocab)
    num_rows, bs = 5, 4
    args = [
        torch.randn(num_rows, vocab, generator=gen).half(),
        torch.tensor([2, -1, num_rows + 3, 4], dtype=torch.int32),
        torch.randn(num_rows, 3, generator=gen),
        torch.randint(0, 99, (num_rows, 2), generator=gen),
        torch.full((bs, 1), float("nan")),
        torch.full((bs, 1), -7),
        torch.full((bs, 3), float("nan")),
        torch.full((bs, 2), -7),
    ]
    assert_providers_agree("draft_extend_topk1_postprocess", provider("draft_extend_topk1_postprocess"), args)


# --------------------------------------------------------------------------------------------------
# The split argmax: maxima in the last (partial) slice, ties across slices, NaN and infinities


def _across_slices(config, dtype: torch.dtype) -> torch.Tensor:
    """Eight rows of a vocabulary of five slices and a bit under ``config``; row 7 is random."""
    width = config.copy_block_bytes // 2 // dtype.itemsize  # the smallest slice: few, short rows
    vocab = 5 * width + 3
    assert (
        sampling_kernels._slice_elements(config, vocab, torch.empty((), dtype=dtype).element_size(), 8)
        == width
    )
    first, second, last = 0, width, 5 * width  # slice starts; the last slice holds 3 logits
    logits = torch.randn(8, vocab, generator=torch.Generator().manual_seed(width)).to(torch.float32)
    logits[0, vocab - 1] = 50.0  # the maximum at the last lane of the last slice
    logits[1, [second + 5, last + 1]] = 50.0  # a tie across slices: the earlier slice wins
    logits[2, [last, second + 2]] = float("inf")  # tied infinities
    logits[3] = float("-inf")  # all -inf: index 0
    logits[4] = float("-inf")
    logits[4, last + 2] = float("nan")  # NaN (-1e30) beats -inf
    logits[5] = float("-inf")
    logits[5, [second + 1, last]] = float("nan")  # NaNs tie as -1e30: the first wins
    logits[5, first + 4] = -1e30  # ... and a real -1e30 before them wins over both
    logits[6, last + 1 : last + 3] = 50.0  # a tie inside the last slice
    return logits.to(dtype)


def _across_slices_cases(config, dtype):
    logits = _across_slices(config, dtype)
    rows, vocab = logits.shape
    gen = torch.Generator().manual_seed(rows)
    targets = torch.nan_to_num(logits.float(), nan=-1e30).argmax(-1)
    draft = [
        logits,
        torch.arange(rows, dtype=torch.int32),
        torch.full((rows, 2), -7),
        1,
        torch.full((rows, 1), float("nan")),
        torch.full((rows, 1), -7),
    ]
    bs, num_nodes = rows // 2, 2
    candidates = torch.randint(0, vocab, (bs, num_nodes), generator=gen)
    candidates[::2, 1] = targets[0::4]  # requests 0 and 2 accept their draft
    verify = [
        logits,
        candidates,
        torch.arange(rows).view(bs, num_nodes),
        torch.tensor([[1, -1]]).repeat(bs, 1),
        torch.arange(bs),
        0,
        False,
        *_verify_outputs(bs, num_nodes),
    ]
    # Hidden rows of two whole gather steps and part of a third.
    width = 2 * sampling_kernels._copy_block(config, torch.bfloat16.itemsize, 1 << 20) + 5
    row_indices = torch.tensor([7, 0, 5, rows, 1, 2, 4, 6, 3])  # one out of range
    extend = [
        logits,
        row_indices,
        torch.randn(rows, width, generator=gen).bfloat16(),
        torch.randint(0, 99, (rows, 3), generator=gen),
        torch.full((len(row_indices), 1), float("nan")),
        torch.full((len(row_indices), 1), -7),
        torch.full((len(row_indices), width), float("nan")).bfloat16(),
        torch.full((len(row_indices), 3), -7),
    ]
    return {
        "draft_topk1_postprocess": draft,
        "target_verify_topk1_postprocess": verify,
        "draft_extend_topk1_postprocess": extend,
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("config", [INTERPRETER, HOPPER], ids=["interpreter", "hopper"])
@pytest.mark.parametrize("op", OPS)
def test_topk1_argmax_across_slices(op, config, dtype):
    assert_providers_agree(op, provider(op, config), _across_slices_cases(config, dtype)[op])


def test_register_returns_every_op():
    with isolated_registry():
        assert sorted(register_launchers("cuda", INTERPRETER, sampling_kernels.LAUNCHERS)) == sorted(OPS)
        for op in OPS:
            assert any(i.provider == "triton" for i in registry.implementations(op, "cuda"))


def test_draft_topk1_postprocess_refuses_an_expanded_positions(triton_vendor):
    """Every entry of an expanded ``positions`` is one counter: the provider would add B to it."""
    from spec_hal import ops

    positions = torch.zeros(1, dtype=torch.int64).expand(3)
    with pytest.raises(ValueError, match="positions: expected a tensor whose elements do not share memory"):
        ops.draft_topk1_postprocess(torch.randn(3, 8), positions)
    assert int(positions[0]) == 0
