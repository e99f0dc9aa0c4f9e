"""Family D7's Triton kernels (interpreted) against the portable references of
``spec_hal/ops/renorm.py``. Helpers and the kinds of checks: see ``test_tree.py``.

The interpreter's tile is 64 lanes, so a vocabulary of a few hundred values takes several blocks per
digit pass; rows of one repeated value keep one bracket of one key all the way down, and rows of ties
put many values in tau's bin.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from triton_family.interpreted import TRITON_VENDORS, small_cases
from triton_family.test_tree import (
    VENDOR_CONFIGS,
    assert_passes,
    assert_passes_with_vendor_config,
    assert_providers_agree,
    built,
    case_id,
    column_major,
    padded,
    relaid,
)
from triton_family.test_vocab import SMALL_GRID, provider

from spec_hal import ops
from spec_hal.conformance.cases import renorm as renorm_cases
from spec_hal.conformance.runner import all_cases
from spec_hal.kernels.triton import renorm as renorm_kernels
from spec_hal.kernels.triton.config import INTERPRETER, LaunchConfig

OPS = ("top_k_renorm_prob", "top_p_renorm_prob")
K, P = OPS
B = renorm_cases.BUILDERS
EXTRA = [
    built(B, K, "narrowed_peaked", bs=2, vocab=200, k_values=(1, 7, 40, 150)),
    built(B, K, "narrowed_flat_int32", bs=2, vocab=200, rows="flat", idx_dtype=torch.int32),
    built(B, K, "narrowed_ties", bs=2, vocab=200, rows="ties", k_values=(1, 80, 150, 199)),
    built(B, K, "one_key_bracket", bs=2, vocab=200, rows="equal", k_values=(1, 100)),
    built(B, K, "scalar_in_place", bs=2, vocab=130, rows="flat", k=65, in_place=True),
    built(B, P, "narrowed_peaked", bs=2, vocab=200, p_values=(0.25, 0.75, 0.984375)),
    built(B, P, "narrowed_flat", bs=2, vocab=200, rows="flat", p_values=(0.1, 0.5, 0.9)),
    built(B, P, "narrowed_ties", bs=2, vocab=200, rows="ties", p_values=(0.2, 0.6, 0.95)),
    built(B, P, "one_key_bracket", bs=2, vocab=200, rows="equal", p=0.5),
    built(B, P, "scalar_in_place", bs=2, vocab=130, rows="peaked", p=0.9, in_place=True),
]
STRIDED = [
    relaid(case, layout)
    for case in (
        built(B, K, "one_tile", bs=3, vocab=64),
        built(B, P, "one_tile", bs=3, vocab=64, rows="flat"),
    )
    for layout in (padded, column_major)
]


@pytest.mark.parametrize("case", [c for op in OPS for c in small_cases(op)] + EXTRA + STRIDED, ids=case_id)
def test_case(case):
    assert_passes(case)


#: Vocabularies past one Hopper tile (2048 lanes), with kept sets deep in a flat row.
WIDE_CASES = [
    built(B, K, "wide_flat", bs=1, vocab=2500, rows="flat", k=1200),
    built(B, P, "wide_flat", bs=1, vocab=2500, rows="flat", p=0.9),
]


@pytest.mark.parametrize("vendor", TRITON_VENDORS)
def test_every_vendor_configuration(vendor):
    golden = [c for op in OPS for c in small_cases(op) if c.kind == "golden"]
    assert_passes_with_vendor_config(vendor, renorm_kernels, [*golden, *WIDE_CASES])


# --------------------------------------------------------------------------------------------------
# Providers called directly: more rows than programs, and inputs the contract rejects on CPU only


@pytest.mark.parametrize("op", OPS)
def test_programs_take_several_rows(op):
    kwargs = B[op](torch.device("cpu"), bs=5, vocab=150, rows="peaked", seed=3)
    parameter = kwargs["top_k" if op == K else "top_p"]
    args = [kwargs["probs"], parameter, 0 if op == K else 1.0, kwargs["out"]]
    assert_providers_agree(op, provider(op, SMALL_GRID), args)


@pytest.mark.filterwarnings("ignore:divide by zero", "ignore:invalid value")  # the interpreter's numpy
@pytest.mark.parametrize("op", OPS)
def test_garbage_probs_write_only_the_output(op):
    """Negative, NaN and infinite values (unchecked on accelerators without SPEC_HAL_DEBUG): the
    kernel ends and writes the output rows only."""
    gen = torch.Generator().manual_seed(5)
    probs = torch.rand(4, 150, generator=gen)
    probs[0, :40] = -torch.rand(40, generator=gen)
    probs[1, 7] = float("nan")
    probs[2, 9] = float("inf")
    probs[3] = -1.0
    before = probs.clone()
    room = torch.full((6, 150), -7.0)
    parameter = torch.tensor([3, 60, 100, 1]) if op == K else torch.tensor([0.3, 0.5, 0.9, 0.2])
    provider(op)(probs, parameter, 0, room[1:5])
    torch.testing.assert_close(probs, before, rtol=0, atol=0, equal_nan=True)
    assert (room[0] == -7).all() and (room[5] == -7).all()
    assert not (room[1:5] == -7).all(dim=1).any()  # every row written


# --------------------------------------------------------------------------------------------------
# The two launch shapes: a row in one program's registers, and rows split into chunks (a launch per
# digit), one chunk where a row spans one copy tile

RESIDENT = dataclasses.replace(INTERPRETER, row_resident_lanes=4096, max_grid=2)
#: Rows of one copy tile (up to 1024 lanes) and no register tile: split rows of one chunk.
ONE_CHUNK = dataclasses.replace(INTERPRETER, copy_block_bytes=4096, row_resident_lanes=0)
SPLIT_ROWS = dataclasses.replace(INTERPRETER, row_chunk_blocks=1, max_grid=2, row_resident_lanes=0)
SHAPES = {"resident": RESIDENT, "one_chunk": ONE_CHUNK, "split": SPLIT_ROWS}


@pytest.mark.parametrize("vendor", TRITON_VENDORS)
def test_the_conformance_and_bench_sizes_reach_every_launch_shape(vendor):
    """On every vendor's configuration, the conformance suite's accelerator cases and the bench's
    renorm sizes reach both kernels: ``many_rows`` and ``few_rows`` (up to the longest row registers
    hold) the resident one, the 128k cases and ``many_rows_wide`` the split one (rows longer than registers
    split at any batch)."""
    from spec_hal.conformance.grid import FULL_DEVICE_BENCH_BATCH

    config = VENDOR_CONFIGS[vendor]
    assert config.row_programs <= FULL_DEVICE_BENCH_BATCH
    assert renorm_kernels._plan(config, 131072)[0] == renorm_kernels.SPLIT
    # Rows that registers hold are held there at any batch, one launch: even one row, which would
    # take less device time split, but a launch per digit.
    assert renorm_kernels._plan(config, 32768)[0] == renorm_kernels.RESIDENT
    # The first prefix a case's name starts with says its shape.
    want = {
        "many_rows_wide": renorm_kernels.SPLIT,
        "many_rows": renorm_kernels.RESIDENT,
        "v128k": renorm_kernels.SPLIT,
        "few_rows": renorm_kernels.RESIDENT,
    }
    reached = set()
    for case in all_cases():
        name = case.name.partition("[")[2]
        prefix = next((p for p in want if name.startswith(p)), None)
        if case.op in OPS and prefix is not None:
            sizes = case.build.keywords
            assert renorm_kernels._plan(config, sizes["vocab"])[0] == want[prefix], case.name
            reached.add((case.op, prefix))
    assert reached == {(op, prefix) for op in OPS for prefix in want}


def test_the_interpreter_configurations_take_every_shape():
    """The interpreter's own configuration holds the small cases' rows in registers and splits the
    wider ones; the configurations below pin each shape (so the cases below run through both, and
    through split rows of one chunk)."""
    tile = INTERPRETER.copy_block_bytes // 4  # split rows are chunks of whole copy tiles
    plan = renorm_kernels._plan
    assert plan(INTERPRETER, 200)[0] == renorm_kernels.RESIDENT
    assert plan(INTERPRETER, 2500)[::3] == (renorm_kernels.SPLIT, INTERPRETER.row_chunk_blocks * tile)
    assert plan(RESIDENT, 300)[0] == renorm_kernels.RESIDENT
    assert plan(ONE_CHUNK, 200)[::3] == (renorm_kernels.SPLIT, 200)
    assert plan(SPLIT_ROWS, 300) == (renorm_kernels.SPLIT, tile, 1, tile)
    assert plan(SPLIT_ROWS, tile)[::3] == (renorm_kernels.SPLIT, tile)  # one chunk
    assert plan(LONG_CHUNKS, 600)[::3] == (renorm_kernels.SPLIT, 5 * tile)
    # The tile is the row rounded up to a power of two, never past row_resident_lanes.
    narrow = dataclasses.replace(RESIDENT, row_resident_lanes=300)
    assert plan(narrow, 256)[:2] == (renorm_kernels.RESIDENT, 256)
    assert plan(narrow, 257)[0] != renorm_kernels.RESIDENT


@pytest.mark.parametrize("config", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("rows", renorm_cases.ROWS)
@pytest.mark.parametrize("op", OPS)
def test_both_shapes_agree_with_the_reference(op, rows, config):
    """Per-row parameters spanning keep-all and deep kept sets, more rows than the grid (max_grid 2:
    programs take several rows, the split scratch counts arrivals across them)."""
    kwargs = B[op](torch.device("cpu"), bs=5, vocab=300, rows=rows, seed=len(rows))
    if op == K:
        parameter = torch.tensor([1, 7, 0, 150, 299], dtype=torch.int32)
    else:
        parameter = torch.tensor([0.25, 1.0, 0.5, 0.9, 0.984375])
    args = [kwargs["probs"], parameter, 0 if op == K else 1.0, kwargs["out"]]
    assert_providers_agree(op, provider(op, config), args)


#: Split rows in two chunks of five blocks each (the interpreter's blocks are 64 lanes, the rows 600).
LONG_CHUNKS = dataclasses.replace(SPLIT_ROWS, row_chunk_blocks=5)
#: (configuration, whether its digit passes keep values, id).
KEEPING_SHAPES = [
    (ONE_CHUNK, False, "one_chunk"),
    (SPLIT_ROWS, False, "split_short_chunks"),
    (LONG_CHUNKS, True, "split_long_chunks"),
]
#: Top-p's shapes that keep nothing run its eleven interpreted digit launches on the rows with
#: ties at tau only (every kind of row goes through them in
#: test_both_shapes_agree_with_the_reference; the interpreter's time bounds CI's).
TOP_P_ROWS_KEEPING_NOTHING = ("ties",)


@pytest.mark.parametrize(
    ("op", "rows", "config", "kept"),
    [
        pytest.param(op, rows, config, kept, id=f"{op}-{rows}-{name}")
        for op in OPS
        for rows in renorm_cases.ROWS
        for config, kept, name in KEEPING_SHAPES
        if op == K or kept or rows in TOP_P_ROWS_KEEPING_NOTHING
    ],
)
def test_split_rows_keep_their_bracket_in_out_unless_out_is_probs(op, rows, config, kept):
    """Split rows in chunks of several blocks: once the key's exponent is found, the search stores
    its bracket's values in ``out`` and reads those from then on (top-k finds tau from them in the
    launch that stores them, where they are few: see the finisher's test below); in place (``out`` is ``probs``) it
    reads the row every pass, and so do chunks of few blocks (one chunk a row among them). Every
    way agrees with the reference, and the in-place call leaves nothing of the bracket behind."""
    kwargs = B[op](torch.device("cpu"), bs=5, vocab=600, rows=rows, seed=7)
    probs = kwargs["probs"]
    if op == K:
        parameter, value = torch.tensor([1, 599, 7, 300, 60], dtype=torch.int32), 0
    else:
        parameter, value = torch.tensor([0.25, 1.0, 0.5, 0.9, 0.984375]), 1.0
    levels = {
        in_place: {launch.options.get("COMPACT_LEVEL", -1) for launch in renorm_kernels._launches(
            config, 5, 600, op == P, True, in_place
        ).launches if "DIGIT" in launch.options}
        for in_place in (False, True)
    }  # fmt: skip
    assert levels[True] == {-1}
    assert (levels[False] != {-1}) == kept and len(levels[False]) == 1
    # Top-k keeps them in a launch of its own, at the compact level; top-p in that level's pass.
    keeping = [
        launch.options["LEVEL"]
        for launch in renorm_kernels._launches(config, 5, 600, op == P, True, False).launches
        if launch.options.get("KEEPS")
    ]
    assert keeping == ([min(levels[False])] if kept and op == K else [])
    expected = torch.empty_like(probs)
    renorm_kernels_reference(op)(probs, parameter, value, expected)
    out = torch.full_like(probs, -1.0)
    provider(op, config)(probs, parameter, value, out)
    in_place = probs.clone()
    provider(op, config)(in_place, parameter, value, in_place)
    for got in (out, in_place):
        assert torch.equal(got > 0, expected > 0)
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)


def _rows_for_the_keeping_finisher() -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of 600 (two chunks of 320 in ``LONG_CHUNKS``) and their k, for the keeping launch:

    0. three heavy values above a bracket of twelve middle values (ties at tau: 1.25 * 2**-10
       three times) over a tail of tiny ones and -0.0s: k = 6 puts tau in the middle bracket, with
       a count and a mass above it;
    1. five non-zero values and k = 10: tau is 0.0, the bracket is the zeros (-0.0 among them),
       which hold nearly the whole row;
    2. a row that keeps everything (k = 0);
    3. one repeated value (every value is kept at tau).
    """
    gen = torch.Generator().manual_seed(11)
    rows = torch.zeros(4, 600)
    places = torch.randperm(600, generator=gen)
    rows[0] = 2.0**-20
    rows[0, places[:20]] = -0.0
    rows[0, places[20:23]] = torch.tensor([0.5, 0.25, 0.25])
    middle = torch.tensor([1.0, 1.0, 1.25, 1.25, 1.25, 1.5, 1.75, 1.875, 1.125, 1.0, 1.5, 1.0])
    rows[0, places[23:35]] = middle * 2.0**-10
    rows[1, places[:5]] = torch.tensor([0.5, 0.25, 0.125, 0.125, 2.0**-9])
    rows[1, places[5:40]] = -0.0
    rows[2] = torch.rand(600, generator=gen)
    rows[3] = 2.0**-8
    return rows, torch.tensor([6, 10, 0, 300])


#: Rows of :func:`_rows_for_the_keeping_finisher` that the keeping launch finishes, per finishing
#: tile: 64 (32 lanes a chunk) holds the middle bracket of row 0 alone; the default holds every
#: bracket of these rows; none finishes without a tile. Row 2 keeps everything and never reaches
#: the keeping launch.
FINISHED_ROWS = {64: [1, 0, 0, 0], 0: [0, 0, 0, 0], None: [1, 1, 0, 1]}


@pytest.mark.parametrize("finish_tile", FINISHED_ROWS, ids=["tile_64", "no_tile", "default_tile"])
def test_top_k_finds_tau_from_few_kept_values_and_digits_the_rest(finish_tile, monkeypatch):
    """Top-k's keeping launch finds tau from the kept values where every chunk of the row kept at
    most its share of the finishing tile, marks the row done, and the later digit launches skip it;
    other rows go through the digits, in the same launches. Which rows finish there is read from
    the scratch's done marks; every way agrees with the reference."""
    if finish_tile is not None:
        monkeypatch.setattr(renorm_kernels, "_FINISH_TILE", finish_tile)
    assert _rows_done_in_the_keeping_launch(LONG_CHUNKS, monkeypatch) == FINISHED_ROWS[finish_tile]


@pytest.mark.parametrize(
    ("finish_rows", "finished"), [(5, FINISHED_ROWS[None]), (4, [0, 0, 0, 0]), (0, [0, 0, 0, 0])]
)
def test_top_k_finishes_in_the_keeping_launch_below_row_finish_rows_only(finish_rows, finished, monkeypatch):
    """From ``row_finish_rows`` rows on (the four rows here), the keeping launch finds no tau: every
    row goes through the digit launches, with the same result."""
    config = dataclasses.replace(LONG_CHUNKS, row_finish_rows=finish_rows)
    assert _rows_done_in_the_keeping_launch(config, monkeypatch) == finished


def _rows_done_in_the_keeping_launch(config: LaunchConfig, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Top-k over :func:`_rows_for_the_keeping_finisher` with ``config``, checked against the
    reference; the done mark of each row in the scratch (1: tau found in the keeping launch)."""
    probs, parameter = _rows_for_the_keeping_finisher()
    scratches = []
    zeros = torch.zeros

    def recording_zeros(*args, **kwargs):
        made = zeros(*args, **kwargs)
        scratches.append(made)
        return made

    monkeypatch.setattr(torch, "zeros", recording_zeros)
    renorm_kernels._launches.cache_clear()
    try:
        assert_providers_agree(K, provider(K, config), [probs, parameter, 0, torch.empty_like(probs)])
    finally:
        renorm_kernels._launches.cache_clear()
    (scratch,) = [made for made in scratches if made.dtype == torch.int32 and made.shape[0] == 4]
    return scratch[:, renorm_kernels._DONE.value].tolist()


@pytest.mark.parametrize("config", SHAPES.values(), ids=SHAPES.keys())
def test_a_top_p_target_that_rounds_to_zero_keeps_the_row_maximum(config):
    """``top_p * total`` below float32's range: the smallest kept prefix is the maximum alone (a
    target of 0 held at every digit and kept nothing). Scalar tiny top_p values too."""
    probs = torch.tensor([[1e-38, 5e-39, 0.0, 1e-39], [0.0, 2e-39, 3e-39, 0.0]])
    assert_providers_agree(
        P, provider(P, config), [probs, torch.tensor([1e-8, 1e-30]), 1.0, torch.empty(2, 4)]
    )
    for tiny in (1e-40, 1e-46):  # below float32's normal range, and below its smallest value
        assert_providers_agree(P, provider(P, config), [probs, None, tiny, torch.empty(2, 4)])
    out = torch.empty(2, 4)
    provider(P, config)(probs, None, 1e-46, out)
    assert out.tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]


@pytest.mark.parametrize("config", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("op", OPS)
def test_negative_zeros_are_zeros(op, config):
    """-0.0 is a probability of 0: counted as one, and kept with its sign like the reference's
    ``p / sum`` (its bits read as a key are the most negative one)."""
    probs = torch.tensor([[0.5, -0.0, -0.0, 0.25, -0.0, 0.0] * 2])
    parameter = torch.tensor([8]) if op == K else torch.tensor([1.0 - 2**-20])
    want = torch.empty_like(probs)
    renorm_kernels_reference(op)(probs, parameter, 0 if op == K else 1.0, want)
    got = torch.empty_like(probs)
    provider(op, config)(probs, parameter, 0 if op == K else 1.0, got)
    assert torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want))


def renorm_kernels_reference(op):
    from spec_hal import registry

    return registry.ops()[op].reference


# --------------------------------------------------------------------------------------------------
# Inputs the contract refuses before any provider runs (issue #42)


@pytest.mark.parametrize("op, parameter", [(K, 2), (P, 0.5)])
def test_in_place_on_an_expanded_probs_is_refused(triton_vendor, op, parameter):
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4]).expand(3, 4)
    with pytest.raises(ValueError, match="out: expected a tensor whose elements do not share memory"):
        getattr(ops, op)(probs, parameter, out=probs)


@pytest.mark.parametrize("op, parameter", [(K, 2), (P, 0.5)])
def test_a_row_whose_sum_overflows_float32_is_refused(triton_vendor, op, parameter):
    with pytest.raises(ValueError, match="probs: row 0 sums past float32's largest value"):
        getattr(ops, op)(torch.tensor([[3e38, 3e38, 1.0]]), parameter)
