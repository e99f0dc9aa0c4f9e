"""Family D's Triton kernels over the vocabulary (interpreted): ``fast_topk``, ``fast_sample``,
``renorm_draft_probs``, ``sample_draft_proposal``, against the portable references of
``spec_hal/ops/sampling/draft.py``. Helpers and the kinds of checks: see ``test_tree.py``.

The sampling ops take their Exp(1) noise as a tensor in the provider signature: given the same noise
the kernel must draw exactly the reference's ids, which the direct calls below check.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from triton_family.interpreted import TRITON_VENDORS, provider, small_cases
from triton_family.test_tree import (
    VOCABULARY_TILE,
    assert_passes,
    assert_passes_with_vendor_config,
    assert_providers_agree,
    built,
    case_id,
    column_major,
    padded,
    relaid,
)

from spec_hal.conformance.cases import sampling as sampling_cases
from spec_hal.kernels.triton import vocab as vocab_kernels
from spec_hal.kernels.triton.config import INTERPRETER
from spec_hal.kernels.triton.sizing import walk_tile

OPS = ("fast_topk", "fast_sample", "renorm_draft_probs", "sample_draft_proposal")
#: Several interpreter tiles (64 lanes), the last one partial.
BLOCKS = 3 * 64 + 5
B = sampling_cases.BUILDERS
NO_SAMPLE_CHECK = sampling_cases.NO_SAMPLE_CHECK
EXTRA = [
    built(B, "fast_topk", "blocks_k8", bs=3, topk=8, vocab=BLOCKS),
    built(B, "fast_topk", "blocks_f64_middle", bs=2, topk=4, vocab=BLOCKS, layout="middle", dtype=torch.float64),
    built(B, "fast_topk", "blocks_bf16_first", bs=3, topk=2, vocab=150, layout="first", dtype=torch.bfloat16),
    built(B, "fast_topk", "k1_fp16", bs=3, topk=1, vocab=BLOCKS, dtype=torch.float16),
    built(B, "fast_sample", "one_hot_blocks", bs=3, vocab=BLOCKS, rows="one_hot"),
    built(B, "fast_sample", "zero_rows", bs=2, vocab=BLOCKS, rows="zero"),
    built(B, "renorm_draft_probs", "blocks_bf16", bs=3, vocab=BLOCKS, dtype=torch.bfloat16),
    built(B, "renorm_draft_probs", "no_temperatures", bs=2, vocab=BLOCKS, use_rejection_sampling=False, with_temperatures=False),
    built(B, "sample_draft_proposal", "greedy_blocks_int32", bs=3, vocab=BLOCKS, top_ks="greedy", idx_dtype=torch.int32),
    built(B, "sample_draft_proposal", "mixed_blocks", bs=3, vocab=BLOCKS, unchecked=NO_SAMPLE_CHECK),
]  # fmt: skip
STRIDED = [
    relaid(case, layout) for case in (EXTRA[0], EXTRA[6], EXTRA[8]) for layout in (padded, column_major)
]


@pytest.mark.parametrize("case", [c for op in OPS for c in small_cases(op)] + EXTRA + STRIDED, ids=case_id)
def test_case(case):
    assert_passes(case)


#: Past one Hopper copy tile (2048 fp32 lanes) and vocabulary tile (8192).
WIDE_CASES = [
    built(B, "fast_topk", "wide", bs=2, topk=8, vocab=8200, dtype=torch.float32),
    built(B, "renorm_draft_probs", "wide", bs=2, vocab=8200),
    built(B, "sample_draft_proposal", "wide_greedy", bs=2, vocab=8200, top_ks="greedy"),
]


@pytest.mark.parametrize("vendor", TRITON_VENDORS)
def test_every_vendor_configuration(vendor):
    golden = [c for op in OPS for c in small_cases(op) if c.kind == "golden"]
    assert_passes_with_vendor_config(vendor, vocab_kernels, [*golden, *WIDE_CASES])


# --------------------------------------------------------------------------------------------------
# Providers called directly: the same noise gives the same draws; ties, NaN and signed zeros


#: Grids capped at 2 programs: each program takes several rows (also used by test_renorm.py).
SMALL_GRID = dataclasses.replace(INTERPRETER, max_grid=2)

#: A vocabulary tile of 256 lanes (four copy tiles) over 2 warps; fast_topk and fast_sample walk in
#: the copy tile from 4 programs on, their rows never split.
TILED = dataclasses.replace(VOCABULARY_TILE, copy_tile_programs=4, split_row_lanes=1 << 30)
TILED_SMALL_GRID = dataclasses.replace(TILED, max_grid=2)
#: Several vocabulary tiles, the last one partial.
TILED_VOCAB = 2 * 256 + 37


#: Rows split into chunks of three tiles (192 lanes: the interpreter's tiles are 64) where there are
#: fewer than 64 rows (the interpreter's configuration splits rows from 256 lanes on); rows of
#: SPLIT_VOCAB end in a chunk of 5 lanes, fewer than the largest k below (its set then holds
#: placeholders).
SPLIT_ROWS = dataclasses.replace(INTERPRETER, row_programs=64, max_grid=2)
SPLIT_VOCAB = 2 * 192 + 5

#: Rows split in the vocabulary tile: in the copy tile, 6 chunks of each of 2 rows in flight (the
#: grid's cap) are fewer than 16 programs, so each row is split into 2 chunks of 3 vocabulary tiles.
SPLIT_TILED = dataclasses.replace(
    VOCABULARY_TILE, row_programs=64, split_row_lanes=256, copy_tile_programs=16, max_grid=2
)
SPLIT_TILED_VOCAB = 4 * 256 + 37
#: Rows walked in chunks over programs, or whole in the vocabulary tile, or in chunks of it; each
#: over several blocks.
WALKS = {
    "split_rows": (SPLIT_ROWS, SPLIT_VOCAB),
    "vocabulary_tile": (TILED_SMALL_GRID, TILED_VOCAB),
    "split_vocabulary_tile": (SPLIT_TILED, SPLIT_TILED_VOCAB),
}
#: Rows the softmax splits (8 chunks a row or more, before they round to whole tiles: 6 of three
#: copy tiles, 6 of three vocabulary tiles), in each tile.
SOFTMAX_SPLIT_VOCAB = max(vocab_kernels._SOFTMAX_FEWEST_CHUNKS) * 2 * 64 + 37
SOFTMAX_SPLIT_TILED_VOCAB = max(vocab_kernels._SOFTMAX_FEWEST_CHUNKS) * 2 * 256 + 37
#: The softmax walks in the copy tile, and in the vocabulary tile, whole or split (each row in chunks
#: over programs); programs take several rows.
SOFTMAX_WALKS = {
    "copy_tile": (SMALL_GRID, BLOCKS),
    "vocabulary_tile": (TILED_SMALL_GRID, TILED_VOCAB),
    "split_rows": (SPLIT_ROWS, SOFTMAX_SPLIT_VOCAB),
    "split_vocabulary_tile": (SPLIT_TILED, SOFTMAX_SPLIT_TILED_VOCAB),
}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _race(noise: torch.Tensor, keyed: bool, step: int = 3) -> list[Any]:
    """The race's provider arguments (noise, seeds, positions, step): the drawn noise, or keys (each
    row its own seed and position, some past 2**32) whose draws the provider computes."""
    if not keyed:
        return [noise, None, None, 0]
    rows = noise.shape[0]
    seeds = torch.arange(rows, dtype=torch.int64) * 0x9E3779B97F4A7C15 % (1 << 62) - (1 << 61)
    positions = torch.arange(rows, dtype=torch.int64) * (1 << 31) + 17
    return [None, seeds, positions, step]


@pytest.mark.parametrize("keyed", [False, True], ids=["drawn", "keyed"])
@pytest.mark.parametrize("num_samples", [1, 3, 8])
def test_fast_sample_draws_the_reference_ids_from_the_same_noise(num_samples, keyed):
    gen = _gen(num_samples)
    probs = torch.softmax(torch.randn(5, BLOCKS, generator=gen) * 2, dim=-1)
    noise = torch.empty(5, BLOCKS).exponential_(generator=gen)
    noise[1, 3] = 0.0  # clamped to tiny: a huge score
    probs[4, 7:] = 0.0  # fewer non-zero entries than 8 samples: ties at 0 go to the lowest ids
    args = [
        probs,
        *_race(noise, keyed),
        num_samples,
        torch.full((5, num_samples), float("nan")),
        torch.full((5, num_samples), -7),
    ]
    assert_providers_agree("fast_sample", provider("fast_sample", SMALL_GRID), args)


@pytest.mark.parametrize("keyed", [False, True], ids=["drawn", "keyed"])
@pytest.mark.parametrize("walk", SOFTMAX_WALKS)
@pytest.mark.parametrize("top_ks", [None, torch.tensor([0, 1, 2, 9, -1])])
def test_sample_draft_proposal_draws_the_reference_ids_from_the_same_noise(top_ks, walk, keyed):
    config, vocab = SOFTMAX_WALKS[walk]
    gen = _gen(7)
    logits = torch.randn(5, vocab, generator=gen) * 3
    logits[2, : vocab // 2] = float("-inf")  # the first half of the row (its first tile or chunks)
    temperatures = torch.rand(5, 1, generator=gen) + 0.25
    noise = torch.empty(5, vocab).exponential_(generator=gen)
    outputs = [
        torch.full((5, vocab), float("nan")),
        torch.full((5, 1), float("nan")),
        torch.full((5, 1), -7),
    ]
    args = [logits, temperatures, top_ks, *_race(noise, keyed), *outputs]
    assert_providers_agree("sample_draft_proposal", provider("sample_draft_proposal", config), args)


@pytest.mark.filterwarnings("ignore:divide by zero", "ignore:invalid value")  # the interpreter's numpy
@pytest.mark.parametrize("walk", SOFTMAX_WALKS)
def test_sample_draft_proposal_greedy_ties_go_to_the_lowest_index(walk):
    """Greedy rows (``top_ks <= 1``) whose maximum is tied within a tile or chunk and across them:
    the lowest index wins, as in the reference; a row of one very negative value everywhere (its
    softmax is uniform), and one of -inf (NaN, token 0)."""
    config, vocab = SOFTMAX_WALKS[walk]
    logits = torch.randn(4, vocab, generator=_gen(8))
    logits[0, [5, 70, vocab // 2, vocab - 1]] = 9.0
    logits[1, [vocab - 1, vocab // 2, 70]] = 9.0
    logits[2] = -200.0
    logits[3] = float("-inf")
    outputs = [torch.full((4, vocab), float("nan")), torch.full((4, 1), float("nan")), torch.full((4, 1), -7)]
    args = [
        logits,
        torch.ones(4, 1),
        torch.ones(4, dtype=torch.int64),
        *_race(torch.ones(4, vocab), False),
        *outputs,
    ]
    assert_providers_agree("sample_draft_proposal", provider("sample_draft_proposal", config), args)
    provider("sample_draft_proposal", config)(*args)
    assert outputs[2].flatten().tolist() == [5, 70, 0, 0]


def _stable_topk(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Descending, ties to the lowest index, -0 equal to +0, NaN above +inf (the kernel's order)."""
    by_value = torch.sort(values.nan_to_num(nan=float("inf")), dim=-1, descending=True, stable=True).indices
    nan_first = torch.sort(values.isnan().gather(-1, by_value).int(), dim=-1, descending=True, stable=True)
    indices = by_value.gather(-1, nan_first.indices)[..., :k]
    return values.gather(-1, indices), indices


@pytest.mark.parametrize("k", [1, 2, 5, 16])
def test_fast_topk_ties_go_to_the_lowest_index(k):
    values = torch.randint(0, 6, (4, BLOCKS), generator=_gen(k)).float()
    values[1] = torch.arange(BLOCKS).float()  # ascending: every tile beats the set k times
    values[2, ::2] = -0.0
    values[2, 1::2] = 0.0
    values[3, [5, 70, 150]] = float("nan")
    out = (torch.full((4, k), 5.0), torch.full((4, k), -7))
    provider("fast_topk", SMALL_GRID)(values, k, 1, *out)
    want_values, want_indices = _stable_topk(values, k)
    assert torch.equal(out[1], want_indices)
    torch.testing.assert_close(out[0], want_values, equal_nan=True)
    assert torch.equal(out[0].signbit(), want_values.signbit())  # the stored value is the row's own


def test_rows_are_split_where_few_rows_would_leave_the_device_idle():
    plan = vocab_kernels._top_launches
    split = plan(SPLIT_ROWS, 4, SPLIT_VOCAB, False, False, False, 16)
    assert len(split.launches) == 2 and (split.chunk, split.num_chunks) == (192, 3)
    assert split.launches[0].grid == (3, 2)  # (chunks, rows up to max_grid)
    assert (
        len(plan(SPLIT_ROWS, 64, SPLIT_VOCAB, False, False, False, 16).launches) == 1
    )  # rows fill the device
    assert (
        len(plan(SPLIT_ROWS, 4, 4 * 64 - 1, False, False, False, 16).launches) == 1
    )  # not two chunks of two tiles
    short = dataclasses.replace(SPLIT_ROWS, split_row_lanes=SPLIT_VOCAB + 1)
    assert (
        len(plan(short, 4, SPLIT_VOCAB, False, False, False, 16).launches) == 1
    )  # a row shorter than worth it


def test_the_softmax_splits_few_long_rows_and_samples_through_the_merge():
    plan = vocab_kernels._softmax_launches
    names = {
        False: ["_softmax_stats_kernel", "_softmax_chunk_kernel"],
        True: ["_softmax_stats_kernel", "_softmax_chunk_kernel", "_top_merge_kernel"],
    }
    for sample, kernels in names.items():
        split = plan(SPLIT_ROWS, 4, SOFTMAX_SPLIT_VOCAB, True, sample, sample, False)
        assert [launch.kernel.jit.__name__ for launch in split.launches] == kernels
        # Chunks of two tiles (8 of them and a short one), whatever the batch.
        assert (split.chunk, split.num_chunks, split.launches[0].grid) == (128, 9, (9, 2))
        tiled = plan(SPLIT_TILED, 5, SOFTMAX_SPLIT_TILED_VOCAB, True, sample, sample, False)
        assert (tiled.chunk, tiled.num_chunks, tiled.launches[1].options["BLOCK"]) == (512, 9, 256)
        # Rows that would take fewer than 8 programs each (more rows, or shorter rows) walk whole,
        # one program each, unless they sample (2 programs a row are enough then); rows that fill
        # the device walk whole either way. A whole row sums over the same chunks.
        for rows, vocab in ((10, SOFTMAX_SPLIT_VOCAB), (4, SOFTMAX_SPLIT_VOCAB - 64)):
            launches = plan(SPLIT_ROWS, rows, vocab, True, sample, sample, False).launches
            assert len(launches) == (len(kernels) if sample else 1)
        whole = plan(SPLIT_ROWS, 64, SOFTMAX_SPLIT_VOCAB, True, sample, sample, False)
        assert [launch.kernel.jit.__name__ for launch in whole.launches] == ["_softmax_kernel"]
        assert (whole.chunk, whole.num_chunks, whole.launches[0].options["CHUNKS"]) == (128, 9, 16)
    short = dataclasses.replace(SPLIT_ROWS, split_row_lanes=SOFTMAX_SPLIT_VOCAB + 1)
    assert plan(short, 4, SOFTMAX_SPLIT_VOCAB, False, False, False, False).num_chunks == 1


@pytest.mark.parametrize("sample", [False, True], ids=["softmax", "sample"])
def test_a_row_gets_the_same_bits_alone_and_in_any_batch(sample):
    """The batch decides whether rows split; the chunks a row sums over do not follow it: a row
    alone (split) and among 64 (walked whole) gives bitwise the same q and token (keyed draws)."""
    config, vocab = SPLIT_ROWS, SOFTMAX_SPLIT_VOCAB
    gen = _gen(31)
    logits = torch.randn(64, vocab, generator=gen) * 4
    temperatures = torch.rand(64, 1, generator=gen) + 0.25
    race = _race(torch.empty(64, vocab), keyed=True)
    launch = provider("sample_draft_proposal" if sample else "renorm_draft_probs", config)

    def run(rows: slice) -> list[torch.Tensor]:
        count = len(range(64)[rows])
        outs = [
            torch.full((count, vocab), float("nan")),
            torch.full((count, 1), 0.0),
            torch.full((count, 1), -7),
        ]
        if sample:
            keys = [race[0], race[1][rows], race[2][rows], race[3]]
            launch(logits[rows], temperatures[rows], None, *keys, *outs)
            return outs
        launch(logits[rows], temperatures[rows], outs[0])
        return outs[:1]

    batch = run(slice(0, 64))
    for row in (0, 37, 63):
        alone = run(slice(row, row + 1))
        assert all(torch.equal(a, b[row : row + 1]) for a, b in zip(alone, batch, strict=True))


def _tied_rows(seed: int, rows: int, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    """Few distinct values (ties across chunks), an ascending row, signed zeros, NaN in each chunk."""
    values = torch.randint(0, 6, (rows, vocab), generator=_gen(seed)).to(dtype)
    values[1] = torch.arange(vocab).to(dtype)
    values[2, ::2] = -0.0
    values[2, 1::2] = 0.0
    values[3, [5, 200, vocab - 1]] = float("nan")
    return values


@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 5, 16])
def test_fast_topk_split_or_tiled_rows_agree_with_a_whole_row_sort(k, dtype, walk):
    config, vocab = WALKS[walk]
    values = _tied_rows(k, 4, vocab, dtype)
    out = (torch.full((4, k), 5.0, dtype=dtype), torch.full((4, k), -7))
    provider("fast_topk", config)(values, k, 1, *out)
    want_values, want_indices = _stable_topk(values, k)
    assert torch.equal(out[1], want_indices)
    torch.testing.assert_close(out[0], want_values, equal_nan=True)
    assert torch.equal(out[0].signbit(), want_values.signbit())


def test_fast_topk_split_rows_of_a_middle_dimension():
    values = _tied_rows(3, 4, SPLIT_VOCAB, torch.float32).view(4, 1, SPLIT_VOCAB).expand(4, 2, -1)
    values = values.transpose(1, 2).contiguous()  # [4, V, 2], along dim 1: 8 rows, inner 2
    out = (torch.full((4, 4, 2), 5.0), torch.full((4, 4, 2), -7))
    provider("fast_topk", SPLIT_ROWS)(values, 4, 1, *out)
    want_values, want_indices = _stable_topk(values.transpose(1, 2), 4)
    assert torch.equal(out[1], want_indices.transpose(1, 2))
    torch.testing.assert_close(out[0], want_values.transpose(1, 2), equal_nan=True)


@pytest.mark.parametrize("keyed", [False, True], ids=["drawn", "keyed"])
@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("num_samples", [1, 8])
def test_fast_sample_split_or_tiled_rows_draw_the_reference_ids_from_the_same_noise(num_samples, walk, keyed):
    config, vocab = WALKS[walk]
    gen = _gen(20 + num_samples)
    probs = torch.softmax(torch.randn(3, vocab, generator=gen) * 2, dim=-1)
    noise = torch.empty(3, vocab).exponential_(generator=gen)
    noise[1, 300] = 0.0  # clamped to tiny: a huge score in the second chunk or tile
    outputs = [torch.full((3, num_samples), float("nan")), torch.full((3, num_samples), -7)]
    assert_providers_agree(
        "fast_sample", provider("fast_sample", config), [probs, *_race(noise, keyed), num_samples, *outputs]
    )


@pytest.mark.parametrize("op", ["fast_topk", "fast_sample"])
def test_past_the_register_set_the_launchers_decline_and_the_registry_records_it(op, monkeypatch):
    """More than ``_MAX_TOP`` entries a row: the Triton launchers decline the call (a declared
    limit, not a torch call inside the provider), the registry serves it with the portable
    reference and records the fallback once; under SPEC_HAL_STRICT=1 it is an error."""
    from spec_hal import ops, registry
    from spec_hal.cli import _binding_rows
    from spec_hal.errors import BindingError, FallbackError
    from spec_hal.testing import emulate

    count = vocab_kernels._MAX_TOP + 1
    probs = torch.softmax(torch.randn(3, 100, generator=_gen(3)), dim=-1)

    def call(n):
        if op == "fast_topk":
            return ops.fast_topk(probs, n)
        return ops.fast_sample(probs, n, generator=torch.Generator().manual_seed(5))

    with (
        emulate("cuda"),
        registry.REGISTRY.force_provider(op, "triton"),
        pytest.raises(BindingError, match=f"declines variant .*{count},?\\)"),
    ):
        call(count)  # the launcher itself cannot serve it
    with emulate("cuda"):
        registry.REGISTRY.invalidate()
        served = call(count)
        with registry.REGISTRY.force_provider(op, "portable"):
            portable = call(count)
        assert all(torch.equal(a, b) for a, b in zip(served, portable, strict=True))
        (record,) = [f for f in registry.fallbacks() if f.op == op and f.variant[-1] == count]
        assert record.intended == "triton" and record.chosen == "portable"
        assert f"at most {vocab_kernels._MAX_TOP} best entries" in record.reason
        assert call(vocab_kernels._MAX_TOP)[1].shape == (3, vocab_kernels._MAX_TOP)  # the kernel's
        assert not [f for f in registry.fallbacks() if f.op == op and f.variant[-1] != count]
        monkeypatch.setenv("SPEC_HAL_STRICT", "1")
        registry.REGISTRY.invalidate()
        with pytest.raises(FallbackError, match="best entries"):
            call(count)
    # spec-hal info states the limit beside the binding, before any call meets it
    (row,) = [row for row in _binding_rows(registry.device("cuda")) if row["op"] == op]
    assert (
        row["provider"] == "triton"
        and f"more than {vocab_kernels._MAX_TOP} entries" in row["declines"].lower()
    )


def test_fast_topk_outputs_without_a_row_view_are_staged():
    values = torch.randperm(2 * 3 * 70, generator=_gen(2)).float().view(2, 70, 3)
    out_values = torch.full((3, 4, 2), float("nan")).permute(2, 1, 0)  # [2, 4, 3], no [outer, inner, k] view
    out_indices = torch.full((3, 4, 2), -7).permute(2, 1, 0)
    provider("fast_topk")(values, 4, 1, out_values, out_indices)
    want = torch.topk(values, 4, dim=1)
    assert torch.equal(out_values, want.values) and torch.equal(out_indices, want.indices)


@pytest.mark.filterwarnings("ignore:divide by zero", "ignore:invalid value")  # the interpreter's numpy
@pytest.mark.parametrize("walk", SOFTMAX_WALKS)
@pytest.mark.parametrize(
    "temperatures", [torch.tensor([[0.5], [1.0], [2.0], [1.5]]), None], ids=["t", "no_t"]
)
def test_renorm_draft_probs_rows_of_minus_infinity(walk, temperatures):
    """Rows of -inf (NaN, as the reference's softmax), of -inf past the first tile, and of one very
    negative value (uniform: every chunk's max is that value)."""
    config, vocab = SOFTMAX_WALKS[walk]
    logits = torch.randn(4, vocab, generator=_gen(3))
    logits[0] = float("-inf")  # the reference's softmax is NaN there
    logits[1, 64:] = float("-inf")
    logits[3] = -200.0
    args = [logits, temperatures, torch.full((4, vocab), -7.0)]
    assert_providers_agree("renorm_draft_probs", provider("renorm_draft_probs", config), args)


# --------------------------------------------------------------------------------------------------
# The vocabulary tile: few programs walk wider blocks


def test_few_programs_walk_the_vocabulary_tile():
    def first_launch(config, rows, vocab):
        return vocab_kernels._top_launches(config, rows, vocab, False, False, False, 4).launches[0]

    few = first_launch(TILED, 3, TILED_VOCAB)
    assert (few.options["BLOCK"], few.options["num_warps"], few.grid) == (256, 2, (3,))
    assert first_launch(TILED, 4, TILED_VOCAB).options["BLOCK"] == 64  # 4 programs: the copy tile
    assert first_launch(dataclasses.replace(TILED, max_grid=3), 9, TILED_VOCAB).options["BLOCK"] == 256
    assert first_launch(INTERPRETER, 1, TILED_VOCAB).options["BLOCK"] == 64  # no vocabulary tile set
    # Split rows count their chunks: 3 chunks of the copy tile, in 2 rows, reach 4 programs.
    split = dataclasses.replace(TILED, row_programs=64, split_row_lanes=256)
    assert [(a.grid, a.options["BLOCK"]) for a in [first_launch(split, r, TILED_VOCAB) for r in (1, 2)]] == [
        ((1,), 256),  # 3 chunks are too few: the row whole, in the vocabulary tile
        ((3, 2), 64),
    ]
    split_tiled = first_launch(SPLIT_TILED, 4, SPLIT_TILED_VOCAB)
    assert (split_tiled.grid, split_tiled.options["BLOCK"]) == ((2, 2), 256)
    assert walk_tile(dataclasses.replace(TILED, vocab_num_warps=0), TILED_VOCAB) == (256, 1)  # copy warps
    # The softmax walks take the vocabulary tile at any batch.
    (softmax,) = vocab_kernels._softmax_launches(TILED, 64, TILED_VOCAB, False, False, False, False).launches
    assert softmax.options["BLOCK"] == 256
