"""Family E (simulated acceptance): the host length draw and the device op against loop oracles."""

from __future__ import annotations

import math

import pytest
import torch
from oracles import simulated as oracle

import spec_hal.ops as ops
from spec_hal.conformance.cases import simulated as simulated_cases
from spec_hal.ops import simulated as simulated_module

CPU = torch.device("cpu")
META = torch.device("meta")
CASES = simulated_cases.cases()
BAD_CASES = simulated_cases.bad_cases()
OP = "generate_simulated_accept_index"


def fork(generator: torch.Generator | None) -> torch.Generator:
    copy = torch.Generator()
    if generator is not None:
        copy.set_state(generator.get_state())
    return copy


def oracle_length(mean: float, method: str, max_len: int, generator: torch.Generator) -> int:
    """E1's oracle fed with the documented draws: one normal, or one uniform unless lo == max_len."""
    if method == "multinomial":
        return oracle.sample_simulated_acc_len(
            mean, method, max_len, float(torch.randn((), generator=generator)), 0.0
        )
    if math.floor(max(1.0, min(float(max_len), mean))) >= max_len:
        return max_len
    return oracle.sample_simulated_acc_len(
        mean, method, max_len, 0.0, float(torch.rand((), generator=generator))
    )


# --------------------------------------------------------------------------------------------------
# E1 sample_simulated_acc_len


@pytest.mark.parametrize("method", ["multinomial", "match-expected"])
@pytest.mark.parametrize("mean", [-2.0, 0.5, 1.0, 2.5, 3.3, 4.0, 4.7, 9.0])
@pytest.mark.parametrize("max_len", [1, 4, 6])
def test_acc_len_matches_oracle(method, mean, max_len):
    for seed in range(20):
        generator = torch.Generator().manual_seed(seed)
        reference = torch.Generator().manual_seed(seed)
        expected = oracle_length(mean, method, max_len, reference)
        length = ops.sample_simulated_acc_len(mean, method, max_len, generator)
        assert type(length) is int and length == expected and 1 <= length <= max_len
        # The op consumed exactly the oracle's draws.
        assert torch.equal(reference.get_state(), generator.get_state())


def test_acc_len_consumes_the_documented_draws():
    generator = torch.Generator().manual_seed(5)
    reference = torch.Generator().manual_seed(5)
    ops.sample_simulated_acc_len(2.5, "multinomial", 4, generator)
    torch.randn((), generator=reference)
    ops.sample_simulated_acc_len(2.5, "match-expected", 4, generator)
    torch.rand((), generator=reference)
    ops.sample_simulated_acc_len(7.0, "match-expected", 4, generator)  # lo == max_len: no draw
    assert torch.equal(generator.get_state(), reference.get_state())


def test_acc_len_default_generator_follows_manual_seed():
    state = torch.get_rng_state()
    try:
        torch.manual_seed(3)
        first = [ops.sample_simulated_acc_len(2.4, "multinomial", 6) for _ in range(20)]
        torch.manual_seed(3)
        again = [ops.sample_simulated_acc_len(2.4, "multinomial", 6) for _ in range(20)]
    finally:
        torch.set_rng_state(state)
    assert first == again and len(set(first)) > 1


def test_match_expected_has_the_mean():
    generator = torch.Generator().manual_seed(0)
    lengths = [ops.sample_simulated_acc_len(2.3, "match-expected", 4, generator) for _ in range(4000)]
    assert set(lengths) == {2, 3}
    assert abs(sum(lengths) / len(lengths) - 2.3) < 0.03


def test_multinomial_is_a_clamped_rounded_normal():
    generator = torch.Generator().manual_seed(1)
    lengths = [ops.sample_simulated_acc_len(3.0, "multinomial", 6, generator) for _ in range(4000)]
    assert min(lengths) >= 1 and max(lengths) <= 6
    assert abs(sum(lengths) / len(lengths) - 3.0) < 0.1
    # round(N(3, 1)) == 3 with probability P(|z| < 0.5) = 0.383
    assert abs(lengths.count(3) / len(lengths) - 0.383) < 0.03


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"method": "uniform"}, ValueError, "method"),
        ({"method": 1}, TypeError, "method"),
        ({"mean": True}, TypeError, "mean"),
        ({"mean": float("inf")}, ValueError, "mean"),
        ({"max_len": 0}, ValueError, "max_len"),
        ({"max_len": 2.0}, TypeError, "max_len"),
        ({"generator": 7}, TypeError, "generator"),
    ],
)
def test_acc_len_bad_arguments(kwargs, error, match):
    arguments = {"mean": 2.0, "method": "multinomial", "max_len": 4, **kwargs}
    with pytest.raises(error, match=match):
        ops.sample_simulated_acc_len(**arguments)


# --------------------------------------------------------------------------------------------------
# E2 generate_simulated_accept_index


def test_cases_cover_the_family():
    assert set(simulated_cases.BUILDERS) == {c.op for c in CASES} == {OP}
    assert set(simulated_module.__all__) == {OP, "sample_simulated_acc_len"} <= set(ops.__all__)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_matches_oracle(case):
    kwargs = case.build(CPU)
    before = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    length = oracle_length(
        kwargs["mean"], kwargs["method"], kwargs["num_steps"] + 1, fork(kwargs["generator"])
    )
    result = ops.generate_simulated_accept_index(**kwargs)
    new_accept_index, predicts, num_correct_drafts = oracle.generate_simulated_accept_index(
        before["accept_index"], before["predicts"], before["candidates"], before["target_predict"],
        kwargs["num_steps"], kwargs["token_mode"], length, before["new_accept_index"],
    )  # fmt: skip
    assert result is kwargs["new_accept_index"]
    written = {
        "new_accept_index": new_accept_index,
        "predicts": predicts,
        "num_correct_drafts": num_correct_drafts,
    }
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            want = written.get(name, before[name])
            assert value.dtype == want.dtype and torch.equal(value, want), f"{name}:\n{value}\n!=\n{want}"
    if case.expected is not None:
        for name, want in case.expected().items():
            assert torch.equal(result if name == "result" else kwargs[name], want), f"golden {name}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_runs_on_meta(case):
    kwargs = case.build(META)
    kwargs["new_accept_index"] = None
    result = ops.generate_simulated_accept_index(**kwargs)
    batch = kwargs["accept_index"].shape[0]
    assert (
        result.device == META
        and result.shape == (batch, kwargs["num_steps"] + 1)
        and result.dtype == torch.int32
    )


@pytest.mark.parametrize("bad", BAD_CASES, ids=lambda b: b.name)
def test_bad_case_raises(bad):
    with pytest.raises(bad.error, match=bad.match):
        ops.generate_simulated_accept_index(**bad.build(CPU))


@pytest.mark.parametrize("bad", [b for b in BAD_CASES if b.value_check], ids=lambda b: b.name)
def test_value_checks_skip_meta(bad):
    ops.generate_simulated_accept_index(**bad.build(META))


def test_same_seed_same_result_and_bs0_still_draws():
    def run(seed, bs):
        kwargs = simulated_cases.build_generate_simulated_accept_index(
            CPU, bs=bs, method="multinomial", seed=0
        )
        kwargs["generator"] = torch.Generator().manual_seed(seed)
        return ops.generate_simulated_accept_index(**kwargs), kwargs["generator"]

    assert torch.equal(run(4, 8)[0], run(4, 8)[0])
    _, generator = run(4, 0)
    reference = torch.Generator().manual_seed(4)
    torch.randn((), generator=reference)
    assert torch.equal(generator.get_state(), reference.get_state())


def test_out_of_range_root_is_a_masked_lane():
    """Without value checks (accelerators), a root outside [0, bs*D) leaves its row untouched."""
    kwargs = simulated_cases.build_generate_simulated_accept_index(CPU, bs=3, num_steps=3, seed=2)
    kwargs["accept_index"][1, 0] = 1000
    out = torch.full((3, 4), -7, dtype=torch.int32)
    portable = simulated_module.generate_simulated_accept_index.reference
    portable(
        kwargs["accept_index"], kwargs["predicts"], kwargs["num_correct_drafts"], kwargs["candidates"],
        kwargs["target_predict"], 2, False, out,
    )  # fmt: skip
    assert (out[1] == -7).all()
    assert torch.equal(out[0], torch.tensor([0, 1, -1, -1], dtype=torch.int32))
    assert (kwargs["predicts"] == 100).all() and (kwargs["num_correct_drafts"] == 1).all()
