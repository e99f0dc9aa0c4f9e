"""Family D7 (top-k / top-p renormalisation): the public ops against loop oracles.

Every conformance case runs on the CPU through the bound provider and is compared with the oracle:
the output (poisoned before the call, so entries written outside the contract show up), the
returned tensor, and ``probs`` (unchanged, unless it is the output itself).
"""

from __future__ import annotations

import pytest
import torch
from oracles import renorm as oracle

import spec_hal.ops as ops
from spec_hal.conformance.cases import renorm as renorm_cases
from spec_hal.ops import renorm as renorm_module

CPU = torch.device("cpu")
META = torch.device("meta")
CASES = renorm_cases.cases()
BAD_CASES = renorm_cases.bad_cases()
PARAMETER = {"top_k_renorm_prob": "top_k", "top_p_renorm_prob": "top_p"}
ORACLES = {"top_k_renorm_prob": oracle.top_k_renorm_prob, "top_p_renorm_prob": oracle.top_p_renorm_prob}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, where: str) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, where
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True, msg=where)


def test_every_op_of_the_family_has_cases_and_an_oracle():
    assert set(ORACLES) == set(renorm_cases.BUILDERS) == {c.op for c in CASES} == set(renorm_module.__all__)
    assert set(ORACLES) <= set(ops.__all__)


# --------------------------------------------------------------------------------------------------
# Cases against the oracle


#: Cases of more values than this are checked by the loop oracle (pure Python) on some of their rows,
#: the first and the last among them: a row's output depends on that row alone.
ORACLE_VALUES = 2_000_000
ORACLE_ROWS = 40


def oracle_rows(batch: int, vocab: int) -> torch.Tensor:
    if batch * vocab <= ORACLE_VALUES:
        return torch.arange(batch)
    return torch.linspace(0, batch - 1, ORACLE_ROWS).round().long().unique()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_matches_oracle(case):
    kwargs = case.build(CPU)
    probs, parameter = kwargs["probs"].clone(), kwargs[PARAMETER[case.op]]
    in_place = kwargs.get("out") is kwargs["probs"]
    result = getattr(ops, case.op)(**kwargs)
    rows = oracle_rows(*probs.shape)
    if isinstance(parameter, torch.Tensor):
        parameter = parameter[rows]
    expected = ORACLES[case.op](probs[rows], parameter)
    assert_close(result[rows], expected, "result")
    if kwargs.get("out") is not None:
        assert result is kwargs["out"]
    if not in_place:
        assert torch.equal(kwargs["probs"], probs), "probs changed"
    if case.expected is not None:
        assert_close(result, case.expected()["result"], "golden")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_runs_on_meta(case):
    kwargs = case.build(META)
    result = getattr(ops, case.op)(**kwargs)
    assert result.device == META and result.dtype == torch.float32
    assert result.shape == kwargs["probs"].shape


@pytest.mark.parametrize("bad", BAD_CASES, ids=lambda b: f"{b.op}[{b.name}]")
def test_bad_case_raises(bad):
    with pytest.raises(bad.error, match=bad.match):
        getattr(ops, bad.op)(**bad.build(CPU))


@pytest.mark.parametrize("bad", [b for b in BAD_CASES if b.value_check], ids=lambda b: f"{b.op}[{b.name}]")
def test_value_checks_skip_meta(bad):
    getattr(ops, bad.op)(**bad.build(META))  # no data to check: must not raise


# --------------------------------------------------------------------------------------------------
# Semantics the spec spells out


def test_ties_at_the_kth_value_are_all_kept():
    probs = torch.tensor([[0.25, 0.125, 0.125, 0.125, 0.375]])
    out = ops.top_k_renorm_prob(probs, 2)
    # tau = 0.25 (the 2nd largest): 0.375 and 0.25 kept; with k = 3 the three 0.125 come in too.
    assert torch.equal(out, torch.tensor([[0.4, 0.0, 0.0, 0.0, 0.6]]))
    assert torch.count_nonzero(ops.top_k_renorm_prob(probs, 3)) == 5


@pytest.mark.parametrize("k", [0, -5, 4, 5, 2**40])
def test_k_outside_1_to_v_minus_1_keeps_the_row(k):
    probs = torch.tensor([[1.0, 2.0, 0.5, 0.5]])
    assert torch.equal(ops.top_k_renorm_prob(probs, k), probs / 4)
    assert torch.equal(ops.top_k_renorm_prob(probs, torch.tensor([min(k, 2**40)])), probs / 4)


def test_top_p_boundary_is_inclusive_and_relative_to_the_row_total():
    probs = torch.tensor([[2.0, 1.0, 1.0, 4.0]])  # total 8; sorted 4, 2, 1, 1; prefix 4, 6, 7, 8
    assert torch.equal(ops.top_p_renorm_prob(probs, 0.5), torch.tensor([[0.0, 0.0, 0.0, 1.0]]))
    assert torch.equal(ops.top_p_renorm_prob(probs, 0.75), torch.tensor([[2 / 6, 0.0, 0.0, 4 / 6]]))
    # 0.8 * 8 = 6.4 needs the third value: both 1s (a tie) are kept
    assert torch.equal(ops.top_p_renorm_prob(probs, 0.8), probs / 8)


def test_top_p_1_keeps_values_a_float32_prefix_sum_would_drop():
    probs = torch.tensor([[1.0, 1e-10, 1e-10]])  # 1 + 1e-10 == 1 in float32
    out = ops.top_p_renorm_prob(probs, 1.0)
    assert torch.count_nonzero(out) == 3


def test_in_place_and_renormalising_twice_is_stable():
    gen = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(5, 40, generator=gen), dim=-1)
    expected = ops.top_p_renorm_prob(ops.top_k_renorm_prob(probs, 10), 0.8)
    ops.top_k_renorm_prob(probs, 10, out=probs)
    result = ops.top_p_renorm_prob(probs, 0.8, out=probs)
    assert result is probs
    assert torch.equal(probs, expected)
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(5))


def test_allocates_the_output_when_none():
    probs = torch.tensor([[1.0, 3.0]])
    out = ops.top_k_renorm_prob(probs, 1)
    assert out is not probs and out.dtype == torch.float32
    assert torch.equal(out, torch.tensor([[0.0, 1.0]])) and torch.equal(probs, torch.tensor([[1.0, 3.0]]))


def test_a_view_of_probs_with_its_layout_counts_as_in_place():
    probs = torch.tensor([[1.0, 3.0, 4.0]])
    ops.top_k_renorm_prob(probs, 1, out=probs.view(1, 3))
    assert torch.equal(probs, torch.tensor([[0.0, 0.0, 1.0]]))


def test_disjoint_views_of_one_buffer_are_allowed():
    room = torch.tensor([[1.0, 3.0, 0.0, 0.0]])
    ops.top_k_renorm_prob(room[:, :2], 1, out=room[:, 2:])
    assert torch.equal(room, torch.tensor([[1.0, 3.0, 0.0, 1.0]]))


def test_bytes_moved_counts_one_read_and_one_write():
    probs = torch.zeros(3, 10)
    assert ops.top_k_renorm_prob.bytes_moved(probs, 4) == 8 * 30
    assert ops.top_p_renorm_prob.bytes_moved(probs, 0.5, probs) == 8 * 30


def test_probs_checks_name_the_row():
    probs = torch.ones(3, 4)
    probs[2] = 0
    with pytest.raises(ValueError, match="row 2"):
        ops.top_p_renorm_prob(probs, 0.5)
