"""Family A (index plumbing) Triton providers against the portable references, in the interpreter.

Conformance cases run through the public ops (``run_case``: outputs, in-outs, inputs and poisoned
tails compared); the other tests call the providers directly, on inputs the contracts would reject on
the CPU (out-of-range ids: the kernels must mask them exactly as the references do), on strided
views, and with every vendor's real launch configuration.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from triton_family.interpreted import TRITON_VENDORS, VENDOR_CONFIGS, register_launchers, small_cases

from spec_hal import registry
from spec_hal.conformance.case import Case
from spec_hal.conformance.cases import index as index_cases
from spec_hal.conformance.runner import compare, run_case
from spec_hal.kernels.triton import config as launch_configs
from spec_hal.kernels.triton import index as triton_index
from spec_hal.opdef import OpDef
from spec_hal.ops import index as index_ops
from spec_hal.testing import emulate, isolated_registry

CPU = torch.device("cpu")
OPS = tuple(index_cases.BUILDERS)
INTERPRETER = launch_configs.INTERPRETER
#: Batches past the interpreter's block (64): several programs, each scanning the earlier chunks.
LARGE = 70


def _case_id(case) -> str:
    return f"{case.op}-{case.name}"


def _fresh(case: Case) -> Case:
    """``case`` building new tensors on every call: hand-written cases hold CPU tensors, which
    ``.to(cpu)`` would hand to the reference and the provider alike (comparing an output with itself)."""

    def build(device: torch.device) -> dict:
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in case.build(device).items()}

    return dataclasses.replace(case, build=build)


SMALL = [_fresh(case) for op in OPS for case in small_cases(op)]


@pytest.mark.parametrize("case", SMALL, ids=[_case_id(c) for c in SMALL])
def test_small_conformance_cases(triton_vendor, case):
    assert run_case(case, CPU, registry.TRITON) == []


def _built_case(op: str, **sizes) -> Case:
    name = "-".join(f"{k}{v}" for k, v in sizes.items())
    return Case(op, name, "random", lambda device: index_cases.BUILDERS[op](device, **sizes))


# Batches over the block (chunked scans, a partial last block), both index dtypes, odd and even seeds
# (req_pool_indices int64 on odd seeds), paged layouts.
COVERAGE = [
    _built_case(op, bs=bs, topk=topk, num_steps=steps, page_size=ps, idx_dtype=dtype, seed=seed)
    for op in OPS
    if op != "generate_draft_decode_kv_indices"
    for bs, topk, steps, ps, dtype, seed in [
        (LARGE, 2, 3, 4, torch.int32, 2),
        (LARGE + 3, 1, 4, 16, torch.int64, 3),
    ]
] + [
    _built_case(
        "generate_draft_decode_kv_indices",
        bs=bs,
        topk=topk,
        num_steps=steps,
        page_size=ps,
        idx_dtype=dtype,
        seed=seed,
    )
    for bs, topk, steps, ps, dtype, seed in [
        (LARGE, 1, 2, 4, torch.int32, 1),  # scans over two chunks
        (130, 4, 2, 1, torch.int64, 4),  # nine kv_indptr blocks; scans of 3 (unrolled) and 9 (looped) chunks
    ]
]


@pytest.mark.parametrize("case", COVERAGE, ids=[_case_id(c) for c in COVERAGE])
def test_large_batches(triton_vendor, case):
    assert run_case(case, CPU, registry.TRITON) == []


#: Scan chunks of 8 entries: a batch of 80 takes the looped scan (more than 8 chunks).
SHORT_SCANS = dataclasses.replace(INTERPRETER, block=8)
SCANNING_OPS = [
    "assign_extend_cache_locs",
    "assign_req_to_token_pool",
    "generate_draft_decode_kv_indices",
    "fill_accept_out_cache_loc",
    "get_target_cache_loc",
    "filter_finished_cache_loc",
]


@pytest.mark.parametrize("op", SCANNING_OPS)
def test_scans_longer_than_the_unrolled_chunks(op):
    kwargs = index_cases.BUILDERS[op](CPU, bs=80, topk=2, num_steps=2, page_size=4, seed=6)
    _check_against_reference(op, _provider_args(op, kwargs), SHORT_SCANS)


@pytest.mark.parametrize(
    ("config", "bs", "topk", "num_steps", "page_size", "max_seq"),
    [
        (INTERPRETER, 5, 2, 3, 1, 600),  # tiles of 64 slots: about ten per request, most programs idle
        (INTERPRETER, 3, 3, 2, 4, 300),  # paged tree layout
        (dataclasses.replace(INTERPRETER, max_grid=3), 4, 2, 2, 1, 500),  # rows past the grid: strided
        (VENDOR_CONFIGS["cuda"], 3, 2, 2, 1, 5000),  # the H200's tiles of 2048 slots
    ],
    ids=["tiles", "paged", "grid-strided", "hopper"],
)
def test_long_context_draft_kv_indices(config, bs, topk, num_steps, page_size, max_seq):
    """Prefixes of many copy tiles: each tile read once and stored into every branch list of every step."""
    op = "generate_draft_decode_kv_indices"
    kwargs = index_cases.BUILDERS[op](
        CPU, bs=bs, topk=topk, num_steps=num_steps, page_size=page_size, seed=7, max_seq=max_seq
    )
    _check_against_reference(op, _provider_args(op, kwargs), config)


def test_draft_rows_of_many_chunks():
    """A9 over rows of ten 4-column chunks, three programs per row (the rest grid-strided)."""
    op = "rebuild_compact_draft_req_to_token"
    config = dataclasses.replace(INTERPRETER, copy_block_bytes=16, max_grid=3)
    kwargs = index_cases.BUILDERS[op](CPU, bs=5, topk=2, num_steps=3, page_size=1, seed=8)
    _check_against_reference(op, _provider_args(op, kwargs), config)


@pytest.fixture(params=TRITON_VENDORS)
def any_triton_vendor(request):
    with emulate(request.param) as descriptor:
        yield descriptor


@pytest.mark.parametrize("op", ["assign_extend_cache_locs", "fill_accept_out_cache_loc"])
def test_every_vendor_binds_the_provider(any_triton_vendor, op):
    case = _built_case(op, bs=LARGE, topk=2, num_steps=2, page_size=4, idx_dtype=torch.int32, seed=5)
    assert run_case(case, CPU, registry.TRITON) == []


def test_every_device_op_of_the_family_has_a_provider():
    device_ops = {value.name for value in vars(index_ops).values() if isinstance(value, OpDef)}
    with isolated_registry():
        assert set(register_launchers("cuda", INTERPRETER, triton_index.LAUNCHERS)) == device_ops == set(OPS)
        for op in OPS:
            impl = next(i for i in registry.implementations(op, "cuda") if i.provider == registry.TRITON)
            assert impl.declines(None) is None  # asked by `spec-hal info`


# --------------------------------------------------------------------------------------------------
# Direct provider calls


def _provider_args(op: str, kwargs: dict) -> list:
    """The provider arguments (the portable reference's signature) from a builder's keyword arguments."""
    portable = getattr(index_ops, op).reference
    if op == "fill_accept_out_cache_loc" and kwargs.get("size") is None:
        kwargs["size"] = kwargs["accept_index"].numel()
    return [kwargs[name] for name in inspect.signature(portable).parameters]


def _clone(args: list) -> list:
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _check_against_reference(op: str, args: list, config=INTERPRETER) -> None:
    want = _clone(args)
    getattr(index_ops, op).reference(*want)
    got = _clone(args)
    getattr(triton_index, op)(config, *got)
    assert compare(got, want) == []


@pytest.mark.parametrize("vendor", TRITON_VENDORS)
@pytest.mark.parametrize(
    ("op", "bs"),
    [
        ("assign_req_to_token_pool", LARGE),
        ("filter_finished_cache_loc", LARGE),
        ("generate_draft_decode_kv_indices", 12),  # wide copy tiles: slow in the interpreter
    ],
)
def test_vendor_launch_configurations(vendor, op, bs):
    """Each vendor's real configuration (blocks of 512-1024: one program scans the whole batch)."""
    kwargs = index_cases.BUILDERS[op](CPU, bs=bs, topk=2, num_steps=2, page_size=4, seed=1)
    _check_against_reference(op, _provider_args(op, kwargs), VENDOR_CONFIGS[vendor])


def _poke(tensor: torch.Tensor, at: int, value: int) -> torch.Tensor:
    tensor = tensor.clone()
    tensor.view(-1)[at] = value
    return tensor


def _out_of_range(op: str, kw: dict) -> None:
    """Ids the contracts reject on the CPU (unchecked on accelerators): the lanes they touch must be
    skipped exactly as the references skip them (outputs past a too-small output's end included)."""
    rows = kw["req_to_token"].shape[0] if "req_to_token" in kw else 0
    if op in ("assign_extend_cache_locs", "assign_req_to_token_pool"):
        kw["req_pool_indices"] = _poke(_poke(kw["req_pool_indices"], 0, -1), 5, rows)
        kw["start"] = _poke(kw["start"], 7, -3)  # a window starting before its row
    elif op in ("assign_extend_cache_locs_uniform", "assign_draft_cache_locs_contiguous"):
        key = "start" if op == "assign_extend_cache_locs_uniform" else "seq_lens"
        kw["req_pool_indices"] = _poke(kw["req_pool_indices"], 1, rows + 5)
        kw[key] = _poke(_poke(kw[key], 2, kw["req_to_token"].shape[1] - 2), 3, -7)
    elif op == "generate_draft_decode_kv_indices":
        kw["req_pool_indices"] = _poke(kw["req_pool_indices"], 4, -1)
        kw["kv_indices"] = kw["kv_indices"][:, : kw["kv_indices"].shape[1] // 2]  # too narrow
    elif op == "fill_accept_out_cache_loc":
        n = kw["out_cache_loc"].numel()
        kw["accept_index"] = _poke(_poke(kw["accept_index"], 0, -2), 4, n)
    elif op == "get_src_tgt_cache_loc":
        kw["accept_index"] = _poke(_poke(kw["accept_index"], 0, -1), 3, kw["out_cache_loc"].numel())
        kw["seq_lens"] = _poke(kw["seq_lens"], 2, -9)  # floor division of negative lengths
    elif op == "get_target_cache_loc":
        d = kw["draft_token_num"]
        kw["num_correct_drafts"] = _poke(kw["num_correct_drafts"], 1, d + 2)
        kw["to_free_num_slots"] = _poke(kw["to_free_num_slots"], 2, d + 3)
        kw["tgt_cache_loc"] = kw["tgt_cache_loc"][:-6]
    elif op == "create_num_accept_tokens_filter":
        bs = kw["num_correct_drafts"].numel()
        kw["unfinished_index"] = torch.tensor([bs, -1, 3, 3, 0], dtype=kw["unfinished_index"].dtype)
    elif op == "filter_finished_cache_loc":
        kw["num_accept_tokens_filter"] = _poke(kw["num_accept_tokens_filter"], 0, 9)  # above ncd + 1
        kw["tgt_cache_loc"] = kw["tgt_cache_loc"][:-5]
        kw["out_cache_loc"] = kw["out_cache_loc"][:-7]
    elif op == "align_evict_mask_to_page_size":
        kw["seq_lens"] = _poke(_poke(kw["seq_lens"], 0, -6), 1, -1)  # torch floor division
    elif op == "rebuild_compact_draft_req_to_token":
        kw["req_pool_indices"] = _poke(kw["req_pool_indices"], 0, -1)
        kw["suffix_start"] = _poke(kw["suffix_start"], 1, kw["target_req_to_token"].shape[1] - 3)
        kw["draft_prefix_lens"] = _poke(kw["draft_prefix_lens"], 2, kw["draft_req_to_token"].shape[1] - 2)


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("op", OPS)
def test_out_of_range_ids_are_masked_like_the_reference(op, idx_dtype):
    kwargs = index_cases.BUILDERS[op](
        CPU, bs=9, topk=2, num_steps=3, page_size=4, idx_dtype=idx_dtype, seed=3
    )
    _out_of_range(op, kwargs)
    _check_against_reference(op, _provider_args(op, kwargs))


def _strided(tensor: torch.Tensor, fill: int = -5) -> torch.Tensor:
    """The same values in a non-contiguous view (every other element of the last dim, padded rows)."""
    shape = list(tensor.shape)
    shape[-1] = 2 * shape[-1] + 1
    base = torch.full(
        shape, fill if tensor.is_floating_point() or tensor.dtype != torch.bool else True, dtype=tensor.dtype
    )
    view = base[..., 1::2]
    view.copy_(tensor)
    return view


@pytest.mark.parametrize("op", OPS)
def test_strided_views(op):
    kwargs = index_cases.BUILDERS[op](CPU, bs=6, topk=2, num_steps=2, page_size=4, seed=4)
    args = _provider_args(op, kwargs)
    args = [_strided(a) if isinstance(a, torch.Tensor) and a.numel() else a for a in args]
    _check_against_reference(op, args)


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(lambda a: a, id="contiguous"),
        pytest.param(lambda a: torch.repeat_interleave(a, 2, dim=1)[:, ::2], id="column_stride_2_in_place"),
        pytest.param(lambda a: a.t().contiguous().t(), id="column_major_copied"),
        pytest.param(lambda a: torch.cat([a, a], 1)[:, : a.shape[1]], id="padded_rows_copied"),
        pytest.param(lambda a: torch.cat([a, a], 1)[:, :1], id="one_column_padded_rows"),
    ],
)
def test_accept_index_layouts(layout):
    """fill_accept_out_cache_loc reads evenly strided [bs, W] rows in place and flattens the others:
    every layout gives the reference's result, on the first ``size`` flat entries."""
    kwargs = _built_case("fill_accept_out_cache_loc", bs=6, topk=2, num_steps=3, seed=11).build(CPU)
    args = _provider_args("fill_accept_out_cache_loc", kwargs)
    args[0] = layout(args[0])
    args[3] = min(args[3], args[0].numel() - 1)
    _check_against_reference("fill_accept_out_cache_loc", args)
