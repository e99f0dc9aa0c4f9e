"""Family A (index plumbing): every CPU provider against the loop oracles, bad cases, meta tensors,
masking of out-of-range lanes, torch.compile, and the host sizing functions."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from oracles import index as oracles

import spec_hal.ops as ops
from spec_hal import registry
from spec_hal.conformance import grid
from spec_hal.conformance.cases import index as index_cases

CPU = torch.device("cpu")
CASES = index_cases.cases()
BAD_CASES = index_cases.bad_cases()
OPS = sorted(index_cases.BUILDERS)


def _providers(op: str) -> list[str]:
    registry.choose(op, registry.device("cpu"), None)  # loads the CPU bindings
    return sorted(impl.provider for impl in registry.implementations(op, "cpu"))


@contextlib.contextmanager
def _forced(monkeypatch: pytest.MonkeyPatch, op: str, provider: str) -> Iterator[None]:
    monkeypatch.setenv("SPEC_HAL_OPS", f"{op}={provider}")
    registry.invalidate()
    try:
        yield
    finally:
        monkeypatch.delenv("SPEC_HAL_OPS")
        registry.invalidate()


def _clone(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


def _tensors(result: Any) -> list[torch.Tensor]:
    return [r for r in (result if isinstance(result, tuple) else (result,)) if isinstance(r, torch.Tensor)]


def _assert_same(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not torch.equal(got, want):
        bad = (got != want).flatten().nonzero()[:5, 0].tolist()
        raise AssertionError(
            f"{name}: differs at flat {bad}: got {got.flatten()[bad].tolist()}, want {want.flatten()[bad].tolist()}"
        )


# --------------------------------------------------------------------------------------------------
# Oracle comparison (random grid, edge and golden cases) through every CPU provider


@pytest.mark.parametrize(
    ("case", "provider"),
    [(case, provider) for case in CASES for provider in _providers(case.op)],
    ids=lambda v: v if isinstance(v, str) else f"{v.op}-{v.name}",
)
def test_matches_oracle(case, provider, monkeypatch):
    kwargs = case.build(CPU)
    before = _clone(kwargs)
    expected = _clone(kwargs)
    getattr(oracles, case.op)(**expected)
    with _forced(monkeypatch, case.op, provider):
        result = getattr(ops, case.op)(**kwargs)

    mutated = set(registry.ops()[case.op].mutates)
    for name, value in kwargs.items():
        if not isinstance(value, torch.Tensor):
            continue
        _assert_same(name, value, expected[name])  # poisoned tails included
        if name not in mutated:
            _assert_same(f"{name} (input)", value, before[name])
    for returned in _tensors(result):  # the caller's outputs, not copies
        assert any(returned is value for value in kwargs.values())
    if case.expected is not None:
        for name, want in case.expected().items():
            got = result if name == "result" else kwargs[name]
            _assert_same(name, got, want)


def test_cases_cover_the_grid():
    random_points = [c.name for c in CASES if c.kind == "random" and c.op == OPS[0]]
    assert 0 < len(random_points) <= 40
    for axis in ("bs", "k", "s", "ps"):
        assert len({re.search(rf"-?{axis}(\d+)", name).group(1) for name in random_points}) > 2
    assert {c.op for c in CASES if c.kind == "golden"} >= {
        "align_evict_mask_to_page_size",
        "generate_draft_decode_kv_indices",
    }
    assert {c.op for c in CASES if c.name == "bs0"} == set(OPS)


def test_untouched_tails_are_checked():
    """The ragged outputs' builders leave poisoned slack past what the op writes."""
    kwargs = index_cases.BUILDERS["assign_extend_cache_locs"](CPU, bs=64, topk=2, num_steps=3, seed=4)
    total = int((kwargs["end"].long() - kwargs["start"].long()).sum())
    ops.assign_extend_cache_locs(**kwargs)
    assert kwargs["out"].numel() > total
    assert bool((kwargs["out"][total:] == grid.POISON_INT).all())
    assert not bool((kwargs["out"][:total] == grid.POISON_INT).any())


# --------------------------------------------------------------------------------------------------
# Bad arguments


@pytest.mark.parametrize("bad", BAD_CASES, ids=lambda b: f"{b.op}-{b.name}")
def test_bad_case_raises(bad):
    kwargs = bad.build(CPU)
    with pytest.raises(bad.error, match=rf"^{re.escape(bad.match)}:"):
        getattr(ops, bad.op)(**kwargs)


def test_every_op_has_bad_cases():
    assert {b.op for b in BAD_CASES} == set(OPS)
    assert {b.op for b in BAD_CASES if b.value_check} == set(OPS)
    assert {b.op for b in BAD_CASES if b.error is TypeError} == set(OPS)


@pytest.mark.parametrize("bad", [b for b in BAD_CASES if b.value_check], ids=lambda b: f"{b.op}-{b.name}")
def test_value_checks_skipped_on_meta(bad):
    """Value checks need the data: on meta tensors (as on accelerators without debug) they do not run."""
    kwargs = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in bad.build(CPU).items()}
    getattr(ops, bad.op)(**kwargs)


# --------------------------------------------------------------------------------------------------
# Meta tensors: the portable references have no host sync and no data-dependent shape


@pytest.mark.parametrize("op", OPS)
def test_portable_runs_on_meta(op):
    kwargs = index_cases.BUILDERS[op](CPU, bs=7, topk=4, num_steps=3, page_size=4, seed=5)
    meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    result = getattr(ops, op)(**meta)
    for returned in _tensors(result):
        assert returned.device.type == "meta"
        assert any(returned is value for value in meta.values())


def test_optional_outputs_allocated():
    kwargs = index_cases.BUILDERS["get_src_tgt_cache_loc"](
        CPU, bs=5, topk=2, num_steps=2, page_size=4, seed=1
    )
    given = ops.get_src_tgt_cache_loc(**kwargs)
    for name in ("src_cache_loc", "tgt_cache_loc", "to_free_num_slots"):
        del kwargs[name]
    allocated = ops.get_src_tgt_cache_loc(**kwargs)
    for a, b in zip(allocated, given, strict=True):
        _assert_same("allocated", a, b)
    uniform = index_cases.BUILDERS["assign_extend_cache_locs_uniform"](CPU, bs=3, topk=1, num_steps=2)
    del uniform["out"]
    assert ops.assign_extend_cache_locs_uniform(**uniform).dtype == torch.int64
    draft = index_cases.BUILDERS["assign_draft_cache_locs_contiguous"](CPU, bs=3, topk=2, num_steps=2)
    del draft["out"], draft["page_size"]  # page_size defaults to 1
    assert ops.assign_draft_cache_locs_contiguous(**draft).shape == (12,)


# --------------------------------------------------------------------------------------------------
# Out-of-range lanes (unchecked on accelerators) are never written: call the portable references


def test_portable_never_writes_out_of_range_lanes():
    table = torch.arange(32, dtype=torch.int32).view(2, 16)
    pristine = table.clone()
    # A2: request 1's row is out of range; request 0 is written, nothing else changes.
    ops.index.assign_req_to_token_pool.reference(
        torch.tensor([1, 7]),
        table,
        torch.tensor([2, 0]),
        torch.tensor([4, 3]),
        torch.tensor([90, 91, 92, 93, 94]),
    )
    expected = pristine.clone()
    expected[1, 2:4] = torch.tensor([90, 91], dtype=torch.int32)
    _assert_same("req_to_token", table, expected)
    # A1: the out-of-range request's lanes keep their poison.
    out = torch.full((5,), grid.POISON_INT)
    ops.index.assign_extend_cache_locs.reference(
        torch.tensor([-3, 0]), pristine, torch.tensor([0, 1]), torch.tensor([2, 4]), out
    )
    _assert_same("out", out, torch.tensor([grid.POISON_INT, grid.POISON_INT, 1, 2, 3]))
    # A5: an out-of-range accept entry counts as rejected.
    accepted = torch.full((3,), grid.POISON_INT)
    ops.index.fill_accept_out_cache_loc.reference(
        torch.tensor([[0, 99, 2]]), torch.tensor([10, 11, 12]), accepted, 3
    )
    _assert_same("accept_out_cache_loc", accepted, torch.tensor([10, 12, grid.POISON_INT]))
    # No valid lane at all: nothing written (the scatter's spare lanes rewrite an element with itself).
    table = pristine.clone()
    ops.index.assign_req_to_token_pool.reference(
        torch.tensor([5]), table, torch.tensor([0]), torch.tensor([3]), torch.tensor([1, 2, 3])
    )
    _assert_same("req_to_token", table, pristine)


# --------------------------------------------------------------------------------------------------
# torch.compile: the ops trace as custom ops with their mutations


def test_compile_matches_eager():
    extend = index_cases.BUILDERS["assign_extend_cache_locs"](CPU, bs=9, topk=2, num_steps=3, seed=3)
    assign = index_cases.BUILDERS["assign_req_to_token_pool"](CPU, bs=9, topk=2, num_steps=3, seed=4)

    def step(extend: dict[str, Any], assign: dict[str, Any]) -> torch.Tensor:
        ops.assign_req_to_token_pool(**assign)
        out = ops.assign_extend_cache_locs(**extend)
        # Read both mutated tensors after the calls: stale reads would show here.
        return out[:4] + assign["req_to_token"].sum()

    eager = (_clone(extend), _clone(assign))
    compiled = (_clone(extend), _clone(assign))
    want = step(*eager)
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(*compiled)
    _assert_same("result", got, want)
    for eager_kwargs, compiled_kwargs in zip(eager, compiled, strict=True):
        for name, value in eager_kwargs.items():
            if isinstance(value, torch.Tensor):
                _assert_same(name, compiled_kwargs[name], value)


# --------------------------------------------------------------------------------------------------
# A10 host sizing


def test_draft_kv_indices_sizes():
    assert ops.draft_kv_indices_buffer_width(num_seqs=4, topk=8, max_context_len=1000) == 32_000
    assert ops.draft_kv_indices_buffer_width(0, 1, 5) == 0
    assert (
        ops.draft_kv_indices_used_len(seq_lens_sum=100, num_seqs=3, topk=2, num_steps=4)
        == 100 * 2 + 3 * 2 * 4
    )
    with pytest.raises(ValueError, match="^max_context_len:"):
        ops.draft_kv_indices_buffer_width(256, 8, 2**20)  # 2**31: the int32 overflow guard
    assert ops.draft_kv_indices_buffer_width(1, 1, 2**31 - 1) == 2**31 - 1
    with pytest.raises(ValueError, match="^seq_lens_sum:"):
        ops.draft_kv_indices_used_len(2**30, 1, 2, 1)
    with pytest.raises(ValueError, match="^topk:"):
        ops.draft_kv_indices_buffer_width(1, 0, 5)
    with pytest.raises(TypeError, match="^num_seqs:"):
        ops.draft_kv_indices_used_len(1, 2.0, 1, 1)
