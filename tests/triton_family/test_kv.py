"""Family B Triton kernels (interpreted) against the portable references of ``spec_hal/ops/kv.py``.

* conformance cases through the public ops with the "triton" provider: the small cases and a few
  larger ones from the family's ``BUILDERS`` (B2 lanes beyond one program's block);
* ``move_kv_cache`` on layouts the conformance cases do not reach, provider and portable reference
  called directly on the same valid moves: segments longer than a chunk (held in column slices,
  or staged in-program through scratch, or both in one launch), one large segment (the two-launch
  gather/scatter), one short unsegmented run, many segments (the chunked prefix sum), words
  narrower than 16 bytes, buffers of different slot strides, small rows stacking several buffers
  per tile with programs walking several blocks, and a launch configuration whose grid limit
  forces every loop past it;
* every vendor's launch configuration (registered explicitly: the interpreter otherwise runs them
  all with the interpreter configuration).
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from triton_family.interpreted import TRITON_VENDORS, VENDOR_CONFIGS, register_launchers, small_cases

from spec_hal import registry
from spec_hal.conformance.case import Case
from spec_hal.conformance.cases import kv as kv_cases
from spec_hal.conformance.runner import compare, run_case
from spec_hal.kernels.triton import kv as kv_kernels
from spec_hal.kernels.triton.config import INTERPRETER, LaunchConfig
from spec_hal.kernels.triton.kv import move as kv_move
from spec_hal.ops import KVBuffers
from spec_hal.testing import emulate, isolated_registry

CPU = torch.device("cpu")
OPS = ("move_kv_cache", "move_accept_tokens_to_target_kvcache")


def case_id(case: Case) -> str:
    return f"{case.op}:{case.name}"


def built(op: str, name: str, **sizes) -> Case:
    return Case(op, name, "edge", functools.partial(kv_cases.BUILDERS[op], **sizes), small=True)


EXTRA = [
    # 20 requests x 5 lanes = 100 lanes: two programs of the interpreter block (64).
    built("move_accept_tokens_to_target_kvcache", "bs20_int32", bs=20, num_steps=4, num_layers=1, idx_dtype=torch.int32),
    built("move_accept_tokens_to_target_kvcache", "bs9_tree_scales", bs=9, topk=4, num_steps=2, num_layers=1, with_scales=True),
    built("move_kv_cache", "bs12_fused_int32", bs=12, num_steps=2, num_layers=1, fused=True, idx_dtype=torch.int32),
]  # fmt: skip


@pytest.mark.parametrize("case", [c for op in OPS for c in small_cases(op)] + EXTRA, ids=case_id)
def test_case(case):
    with emulate("cuda"):
        assert run_case(case, CPU, "triton") == []


@pytest.mark.parametrize("vendor", TRITON_VENDORS)
def test_every_vendor_configuration(vendor):
    cases = [c for op in OPS for c in small_cases(op) if c.kind == "golden"]
    cases.append(built("move_kv_cache", "bs3_scales", bs=3, num_layers=1, with_scales=True))
    with isolated_registry(), emulate(vendor) as descriptor:
        registry.REGISTRY.load_bindings(descriptor)
        register_launchers(vendor, VENDOR_CONFIGS[vendor], kv_kernels.LAUNCHERS)
        for case in cases:
            assert run_case(case, CPU, "triton") == [], case_id(case)


# --------------------------------------------------------------------------------------------------
# move_kv_cache on other layouts, provider called directly


def random_moves(
    gen: torch.Generator, segment_lens: list[int], num_slots: int, skip: float = 0.15
) -> tuple[torch.Tensor, torch.Tensor]:
    """Valid (tgt, src) lanes: each segment moves rows within its own slots (targets distinct,
    sources may repeat and overlap the targets); some lanes are -1 on one side or the other."""
    slots = torch.randperm(num_slots, generator=gen).tolist()
    tgt, src = [], []
    for length in segment_lens:
        own, slots = slots[: length + 2], slots[length + 2 :]
        assert len(own) == length + 2, "not enough slots"
        targets = torch.randperm(len(own), generator=gen)[:length].tolist()
        for j in range(length):
            source = own[int(torch.randint(0, len(own), (1,), generator=gen))]
            coin = float(torch.rand(1, generator=gen))
            tgt.append(-1 if coin < skip / 2 else own[targets[j]])
            src.append(-1 if skip / 2 <= coin < skip else source)
    return torch.tensor(tgt), torch.tensor(src)


def kv_of(
    gen: torch.Generator, num_slots: int, row: tuple[int, ...], dtype: torch.dtype, layers: int = 2
) -> KVBuffers:
    return KVBuffers([(torch.randn(num_slots, *row, generator=gen) * 50).to(dtype) for _ in range(layers)])


@pytest.fixture(autouse=True)
def fresh_move_plans():
    """Plans are cached per shape; tests that patch the planning constants must not see old ones."""
    kv_move._move_plan.cache_clear()
    yield
    kv_move._move_plan.cache_clear()


def config_with(copy_block_bytes: int) -> LaunchConfig:
    return LaunchConfig("test", num_warps=1, block=64, copy_num_warps=1, copy_block_bytes=copy_block_bytes)


def plan_of(config: LaunchConfig, kv: KVBuffers, num_lanes: int, num_segments: int):
    layout = kv_move._layout(kv.buffers, kv.ptr_table, kv.vectorizable)
    return kv_move._move_plan(config, layout, num_lanes, num_segments, True)


def assert_move_matches(
    kv: KVBuffers,
    tgt: torch.Tensor,
    src: torch.Tensor,
    segment_lens: torch.Tensor | None,
    config: LaunchConfig = INTERPRETER,
) -> None:
    want = [buffer.clone() for buffer in kv.buffers]
    registry.ops()["move_kv_cache"].reference(want, kv.ptr_table, kv.vectorizable, tgt, src, segment_lens)
    kv_move._move_kv_cache(config, kv.buffers, kv.ptr_table, kv.vectorizable, tgt, src, segment_lens)
    assert compare(kv.buffers, want) == []


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_long_segments_are_staged(idx_dtype):
    # Average 9.6 lanes -> chunks of 16 lanes; the interpreter's tile budget holds no more lanes
    # than that, so the 40-lane segment is staged through scratch; the others are packed into
    # chunks (the zero-length segment included).
    gen = torch.Generator().manual_seed(1)
    lens = [2, 40, 3, 0, 2, 1]
    kv = kv_of(gen, 80, (2, 4), torch.bfloat16)
    plan = plan_of(INTERPRETER, kv, sum(lens), len(lens))
    assert plan.held_lanes == 0 and plan.staged
    tgt, src = random_moves(gen, lens, 80)
    assert_move_matches(kv, tgt.to(idx_dtype), src.to(idx_dtype), torch.tensor(lens, dtype=idx_dtype))


def test_long_segments_are_held():
    # A larger tile budget holds 256 lanes in 16-byte column slices: no scratch is needed.
    config = config_with(4096)
    gen = torch.Generator().manual_seed(11)
    lens = [2, 40, 3, 0, 2, 1]
    kv = kv_of(gen, 80, (4, 8), torch.bfloat16, layers=3)
    plan = plan_of(config, kv, sum(lens), len(lens))
    assert plan.held_lanes >= 40 and plan.held_words < plan.tile_words and not plan.staged
    tgt, src = random_moves(gen, lens, 80)
    assert_move_matches(kv, tgt, src, torch.tensor(lens), config)


def test_held_and_staged_segments_in_one_launch():
    # Budget for 32 held lanes: the 20-lane segment is held, the 40-lane one staged.
    config = config_with(512)
    gen = torch.Generator().manual_seed(12)
    lens = [2, 20, 40, 3, 0, 2, 1]
    kv = kv_of(gen, 90, (2, 8), torch.bfloat16, layers=3)
    plan = plan_of(config, kv, sum(lens), len(lens))
    assert plan.lane_block < 20 <= plan.held_lanes < 40 and plan.staged
    tgt, src = random_moves(gen, lens, 90)
    assert_move_matches(kv, tgt, src, torch.tensor(lens, dtype=torch.int32), config)


def test_one_short_segment_without_lengths():
    # segment_lens None and few lanes: one in-register chunk, no lengths tensor; rows shift onto
    # their neighbours (each row is both a source and a target).
    gen = torch.Generator().manual_seed(13)
    kv = kv_of(gen, 40, (2, 8), torch.bfloat16, layers=3)
    tgt = torch.arange(5, 35)
    assert_move_matches(kv, tgt, tgt + 1, None)
    assert_move_matches(kv, tgt + 1, tgt, None)


@pytest.mark.parametrize("target_programs", [1, 2048], ids=["one_group", "groups_of_two"])
def test_buffer_blocks(monkeypatch, target_programs):
    # Rows of 8 bytes: a tile stacks 4 buffers (2-word rows, 16 lanes); 13 buffers make 4 blocks,
    # the last one partial. Programs walk 2 blocks each, or all 4 (one program per run and tile).
    monkeypatch.setattr(kv_move, "TARGET_PROGRAMS", target_programs)
    config = config_with(512)
    gen = torch.Generator().manual_seed(14)
    lens = [4, 3, 4, 4, 1, 4]
    kv = kv_of(gen, 60, (2,), torch.float32, layers=13)
    plan = plan_of(config, kv, sum(lens), len(lens))
    assert plan.buffer_block == 4
    assert plan.launches[0][5] == (16 if target_programs == 1 else 8)
    tgt, src = random_moves(gen, lens, 60)
    assert_move_matches(kv, tgt, src, torch.tensor(lens), config)


def test_one_large_segment_two_launches():
    # segment_lens None and more lanes than a program holds: gather to scratch, then scatter.
    gen = torch.Generator().manual_seed(2)
    kv = kv_of(gen, 100, (8,), torch.float32, layers=3)
    tgt, src = random_moves(gen, [90], 100)
    assert_move_matches(kv, tgt, src.to(torch.int32), None)


def test_many_segments_prefix_in_chunks():
    # 150 segments > the interpreter's prefix block (64): segment starts summed in 3 chunks.
    gen = torch.Generator().manual_seed(3)
    lens = torch.randint(0, 4, (150,), generator=gen).tolist()
    kv = kv_of(gen, 6 * 150, (4,), torch.float32, layers=1)
    tgt, src = random_moves(gen, lens, 6 * 150)
    assert_move_matches(kv, tgt, src, torch.tensor(lens))


@pytest.mark.parametrize(
    "row, dtype",
    [((3,), torch.bfloat16), ((5,), torch.int8), ((1,), torch.float32), ((2, 3), torch.float64)],
    ids=["bf16x3_words2", "int8x5_words1", "fp32x1_words4", "fp64x6_words4"],
)
def test_rows_not_vectorizable(row, dtype):
    gen = torch.Generator().manual_seed(4)
    kv = kv_of(gen, 40, row, dtype)
    assert not kv.vectorizable or dtype == torch.float64
    tgt, src = random_moves(gen, [3, 4, 2, 5], 40)
    assert_move_matches(kv, tgt, src, torch.tensor([3, 4, 2, 5], dtype=torch.int32))


def test_buffers_with_different_slot_strides():
    # A standalone buffer, then K and V views into one fused tensor: two launches (two stride runs).
    gen = torch.Generator().manual_seed(5)
    fused = torch.randn(30, 2, 8, generator=gen)
    kv = KVBuffers(
        [torch.randn(30, 8, generator=gen), fused[:, 0], fused[:, 1], torch.randn(30, 8, generator=gen)]
    )
    tgt, src = random_moves(gen, [4, 4, 4], 30)
    assert_move_matches(kv, tgt, src, torch.full((3,), 4))


@pytest.mark.parametrize("segmented", [True, False], ids=["segments", "one_segment"])
def test_grid_limit(segmented):
    # max_grid 2: buffers go in launches of 2, segments and lane blocks loop within programs.
    config = LaunchConfig(
        "tiny-grid", num_warps=1, block=16, copy_num_warps=1, copy_block_bytes=64, max_grid=2
    )
    gen = torch.Generator().manual_seed(6)
    lens = [3, 1, 4, 2, 5, 3, 2]
    kv = kv_of(gen, 60, (2, 8), torch.bfloat16, layers=5)
    tgt, src = random_moves(gen, lens if segmented else [70], 60 if segmented else 80)
    if not segmented:
        kv = kv_of(gen, 80, (2, 8), torch.bfloat16, layers=5)
    assert_move_matches(kv, tgt, src, torch.tensor(lens) if segmented else None, config)


def test_accept_locs_grid_limit():
    # One program (max_grid 1) loops over every block of lanes.
    config = LaunchConfig(
        "tiny-grid", num_warps=1, block=16, copy_num_warps=1, copy_block_bytes=64, max_grid=1
    )
    kwargs = kv_cases.BUILDERS["move_accept_tokens_to_target_kvcache"](CPU, bs=9, num_steps=3, topk=2)
    names = (
        "req_pool_indices",
        "req_to_token",
        "seq_lens",
        "num_correct_drafts",
        "accept_index",
        "out_cache_loc",
    )
    args = [kwargs[name] for name in names] + [kwargs["tgt_loc"], kwargs["src_loc"]]
    want = copy.deepcopy(args)
    registry.ops()["move_accept_tokens_to_target_kvcache"].reference(*want)
    kv_move._accept_locs(config, *args)
    assert compare(args, want) == []


def test_a_layout_is_found_by_its_own_pointer_table_only():
    narrow = KVBuffers([torch.zeros(8, 3, dtype=torch.float16)])
    wide = KVBuffers([torch.zeros(8, 64), torch.zeros(8, 64)])
    first = kv_move._layout(narrow.buffers, narrow.ptr_table, narrow.vectorizable)
    assert kv_move._layout(narrow.buffers, narrow.ptr_table, narrow.vectorizable) is first
    # An entry under the id of another table whose weak reference names a different tensor (an id
    # reused after its table died) is not taken for it.
    key = id(wide.ptr_table)
    kv_move._layouts[key] = (kv_move._layouts[id(narrow.ptr_table)][0], first)
    layout = kv_move._layout(wide.buffers, wide.ptr_table, wide.vectorizable)
    assert layout != first and layout.row_words * layout.word_bytes == 64 * 4
    assert kv_move._layouts[key][0]() is wide.ptr_table
