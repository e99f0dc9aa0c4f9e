"""Family D (draft sampling and tree expansion): the public ops against loop oracles.

Every conformance case runs on the CPU through the bound provider and is compared with the oracle:
outputs (poisoned before the call, so entries written outside the contract show up), in-out
tensors, and every other tensor argument (which must come back unchanged).
"""

from __future__ import annotations

import math

import pytest
import torch
from oracles import sampling as oracle

import spec_hal.ops as ops
from spec_hal.conformance.cases import sampling as sampling_cases
from spec_hal.ops import sampling as sampling_module

CPU = torch.device("cpu")
META = torch.device("meta")
CASES = sampling_cases.cases()
BAD_CASES = sampling_cases.bad_cases()


# --------------------------------------------------------------------------------------------------
# Harness


def snapshot(value):
    """A deep copy of a call's arguments (tensors cloned, generators forked at their state)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, torch.Generator):
        fork = torch.Generator(device=value.device)
        fork.set_state(value.get_state())
        return fork
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(snapshot(v) for v in value)
    return value


def assert_same(actual, expected, where: str) -> None:
    if expected is None:
        assert actual is None, f"{where}: expected None"
    elif isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{where}: expected a tensor, got {type(actual).__name__}"
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, (
            f"{where}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        )
        if expected.dtype.is_floating_point:
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True, msg=where)
        else:
            assert torch.equal(actual, expected), f"{where}:\n{actual}\n!=\n{expected}"
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), where
        for position, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{where}[{position}]")
    else:
        assert actual == expected, where


def flat_tensors(value) -> list:
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flat_tensors(v)]
    return [value]


def exp_noise(generator: torch.Generator | None, shape) -> torch.Tensor:
    """The contract's noise draw (ops.md §P rule g, module docstring of spec_hal.ops.sampling)."""
    return torch.empty(tuple(shape), dtype=torch.float32).exponential_(generator=generator)


def with_out(args: dict, result) -> dict:
    return {"out": result} if args.get("out") is not None else {}


# Each runner takes a snapshot of the arguments and returns (arguments the op writes, result).


def run_fast_topk(a):
    result = oracle.fast_topk(a["values"], a["k"], a.get("dim", -1))
    return with_out(a, result), result


def run_fast_sample(a):
    probs, num_samples = a["probs"], a.get("num_samples", 1)
    result = oracle.fast_sample(probs, exp_noise(a.get("generator"), probs.shape), num_samples)
    return with_out(a, result), result


def run_renorm_draft_probs(a):
    result = oracle.renorm_draft_probs(a["logits"], a["temperatures"], a["use_rejection_sampling"])
    return ({"probs": result} if a.get("probs") is not None else {}), result


def run_sample_draft_proposal(a):
    logits = a["logits"]
    noise = exp_noise(a.get("generator"), logits.shape)
    result = oracle.sample_draft_proposal(logits, a["temperatures"], a.get("top_ks"), noise)
    return with_out(a, result), result


def run_select_top_k_tokens(a):
    result = oracle.select_top_k_tokens(
        a["i"], a["topk_p"], a["topk_index"], a["hidden_states"], a["scores"], a["topk"]
    )
    return with_out(a, result), result


def run_draft_topk1_postprocess(a):
    result, positions, draft_tokens = oracle.draft_topk1_postprocess(
        a["logits"], a["positions"], a.get("draft_tokens"), a.get("draft_token_column", 0)
    )
    return {**with_out(a, result), "positions": positions, "draft_tokens": draft_tokens}, result


def run_target_verify_topk1_postprocess(a):
    result = oracle.target_verify_topk1_postprocess(
        a["logits"], a["candidates"], a["retrieve_index"], a["retrieve_next_token"], a["seq_lens"],
        a.get("num_simulated_accept_tokens", 0), a.get("use_real_draft_tokens", False),
    )  # fmt: skip
    return with_out(a, result), result


def run_draft_extend_topk1_postprocess(a):
    result = oracle.draft_extend_topk1_postprocess(
        a["logits"], a["row_indices"], a.get("hidden_states"), a.get("dsa_topk_indices")
    )
    return with_out(a, result), result


RUNNERS = {
    "fast_topk": run_fast_topk,
    "fast_sample": run_fast_sample,
    "renorm_draft_probs": run_renorm_draft_probs,
    "sample_draft_proposal": run_sample_draft_proposal,
    "select_top_k_tokens": run_select_top_k_tokens,
    "draft_topk1_postprocess": run_draft_topk1_postprocess,
    "target_verify_topk1_postprocess": run_target_verify_topk1_postprocess,
    "draft_extend_topk1_postprocess": run_draft_extend_topk1_postprocess,
}


def test_every_op_of_the_family_has_cases_and_a_runner():
    assert set(RUNNERS) == set(sampling_cases.BUILDERS) == {c.op for c in CASES}
    # keyed_uniform and its domains: tests/ops/test_keyed.py
    keyed = {"keyed_uniform", "DRAFT_PROPOSAL", "ACCEPT_COIN", "FINAL_COIN"}
    assert set(RUNNERS) <= set(ops.__all__) and set(sampling_module.__all__) - set(RUNNERS) == {
        "TargetVerifyTopk1Output",
        *keyed,
    }


# --------------------------------------------------------------------------------------------------
# Cases against the oracle


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_matches_oracle(case):
    kwargs = case.build(CPU)
    before = snapshot(kwargs)
    result = getattr(ops, case.op)(**kwargs)
    written, expected = RUNNERS[case.op](snapshot(before))
    assert_same(result, expected, "result")
    for name, value in kwargs.items():
        if isinstance(value, (torch.Tensor, tuple)):
            assert_same(snapshot(value), written.get(name, before[name]), name)
    given_out = kwargs.get("probs" if case.op == "renorm_draft_probs" else "out")
    if given_out is not None:  # outputs passed in are the ones returned
        for returned, passed in zip(flat_tensors(result), flat_tensors(given_out), strict=True):
            assert returned is passed
    if case.expected is not None:
        for name, want in case.expected().items():
            assert_same(result if name == "result" else kwargs[name], want, f"golden {name}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_runs_on_meta(case):
    on_meta = getattr(ops, case.op)(**case.build(META))
    on_cpu = getattr(ops, case.op)(**case.build(CPU))
    for meta_out, cpu_out in zip(flat_tensors(on_meta), flat_tensors(on_cpu), strict=True):
        if cpu_out is None:
            assert meta_out is None
        else:
            assert meta_out.device == META
            assert (meta_out.shape, meta_out.dtype) == (cpu_out.shape, cpu_out.dtype)


@pytest.mark.parametrize("bad", BAD_CASES, ids=lambda b: f"{b.op}[{b.name}]")
def test_bad_case_raises(bad):
    with pytest.raises(bad.error, match=bad.match):
        getattr(ops, bad.op)(**bad.build(CPU))


@pytest.mark.parametrize("bad", [b for b in BAD_CASES if b.value_check], ids=lambda b: f"{b.op}[{b.name}]")
def test_value_checks_skip_meta(bad):
    getattr(ops, bad.op)(**bad.build(META))  # no data to check: must not raise


# --------------------------------------------------------------------------------------------------
# fast_topk


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_fast_topk_dims(k, dim):
    values = torch.randperm(4 * 5 * 6, generator=torch.Generator().manual_seed(k)).float().view(4, 5, 6)
    top_values, top_indices = ops.fast_topk(values, k, dim)
    want_values, want_indices = torch.topk(values, k, dim)
    assert torch.equal(top_values, want_values) and torch.equal(top_indices, want_indices)
    assert top_indices.dtype == torch.int64


def test_fast_topk_writes_out():
    values = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    out = (torch.full((2, 2), float("nan")), torch.full((2, 2), -7))
    result = ops.fast_topk(values, 2, out=out)
    assert result[0] is out[0] and result[1] is out[1]
    assert torch.equal(out[1], torch.tensor([[0, 2], [1, 2]]))


def test_fast_topk_rejects_scalars_and_bool_dim():
    with pytest.raises(ValueError, match="values"):
        ops.fast_topk(torch.tensor(1.0), 1)
    with pytest.raises(TypeError, match="dim"):
        ops.fast_topk(torch.zeros(2, 3), 1, dim=True)
    with pytest.raises(ValueError, match="out"):
        ops.fast_topk(torch.zeros(2, 3), 1, out=(torch.zeros(2, 1),))


@pytest.mark.parametrize("op", ["fast_topk", "draft_extend_topk1_postprocess"])
def test_outputs_left_none_ask_once_about_capture_and_are_refused_under_it(monkeypatch, op):
    """Several outputs left None: one capture query for all of them (a driver call each on a GPU);
    under capture the call is refused, as for a single output."""
    import spec_hal.validation

    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(1))
    rows = torch.tensor([4, 0, 2])
    call = {
        "fast_topk": lambda: ops.fast_topk(logits, 3),
        "draft_extend_topk1_postprocess": lambda: ops.draft_extend_topk1_postprocess(
            logits, rows, hidden_states=logits.double()
        ),
    }[op]
    queried = []
    monkeypatch.setattr(spec_hal.validation, "is_capturing", lambda device: queried.append(device) or False)
    results = call()
    assert len(queried) == 1
    if op == "fast_topk":
        assert torch.equal(results[0], torch.topk(logits, 3).values) and results[1].dtype == torch.int64
    else:
        topk_p, topk_index, hidden, dsa = results
        assert torch.equal(topk_index[:, 0], logits[rows].argmax(dim=1)) and (topk_p == 1).all()
        assert hidden.dtype == torch.float64 and torch.equal(hidden, logits.double()[rows]) and dsa is None
    monkeypatch.setattr(spec_hal.validation, "is_capturing", lambda device: True)
    with pytest.raises(ValueError, match="left None during graph capture"):
        call()


# --------------------------------------------------------------------------------------------------
# Randomness: reproducible from the generator, distributed as probs


def test_fast_sample_reproducible_from_the_generator():
    probs = torch.softmax(torch.randn(64, 50, generator=torch.Generator().manual_seed(1)), dim=-1)

    def draw(seed):
        return ops.fast_sample(probs, 3, generator=torch.Generator().manual_seed(seed))

    first, again, other = draw(7), draw(7), draw(8)
    assert torch.equal(first[1], again[1]) and torch.equal(first[0], again[0])
    assert not torch.equal(first[1], other[1])
    # Without replacement: the n ids of a row are distinct.
    assert (first[1].sort(dim=1).values.diff(dim=1) > 0).all()


def test_fast_sample_default_generator_follows_manual_seed():
    probs = torch.softmax(torch.randn(32, 20, generator=torch.Generator().manual_seed(2)), dim=-1)
    state = torch.get_rng_state()
    try:
        torch.manual_seed(11)
        first = ops.fast_sample(probs)
        torch.manual_seed(11)
        again = ops.fast_sample(probs)
    finally:
        torch.set_rng_state(state)
    assert torch.equal(first[1], again[1])


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


# chi-square with 4 degrees of freedom: P(X > 18.47) = 0.001
CHI2_4DF_999 = 18.47


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fast_sample_matches_probs(dtype):
    probs = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25]).to(dtype)
    draws = 4000
    _, ids = ops.fast_sample(probs.expand(draws, 5).contiguous(), generator=torch.Generator().manual_seed(3))
    counts = torch.bincount(ids.flatten(), minlength=5).double()
    assert chi_square(counts, probs.double() / probs.double().sum()) < CHI2_4DF_999


def test_sample_draft_proposal_matches_q_and_is_reproducible():
    logits = torch.tensor([[0.0, 1.0, -1.0, 0.5, 2.0]])
    temperatures = torch.tensor([[1.5]])
    draws = 4000
    batch_logits = logits.expand(draws, 5).contiguous()
    batch_temps = temperatures.expand(draws, 1).contiguous()
    q, q_x, x = ops.sample_draft_proposal(
        batch_logits, batch_temps, generator=torch.Generator().manual_seed(4)
    )
    counts = torch.bincount(x.flatten(), minlength=5).double()
    assert chi_square(counts, torch.softmax(logits[0] / 1.5, dim=-1).double()) < CHI2_4DF_999
    assert torch.equal(q_x, q.gather(1, x))
    again = ops.sample_draft_proposal(batch_logits, batch_temps, generator=torch.Generator().manual_seed(4))
    assert torch.equal(again[2], x)


def test_sample_draft_proposal_greedy_rows_ignore_the_noise():
    logits = torch.randn(16, 30, generator=torch.Generator().manual_seed(5))
    temperatures = torch.ones(16, 1)
    top_ks = torch.tensor([1, 0, -1, 50] * 4)
    greedy = top_ks <= 1
    results = [
        ops.sample_draft_proposal(logits, temperatures, top_ks, generator=torch.Generator().manual_seed(s))[2]
        for s in range(3)
    ]
    for x in results:
        assert torch.equal(x[greedy, 0], logits.argmax(dim=1)[greedy])


# --------------------------------------------------------------------------------------------------
# Contract details


def test_select_top_k_tokens_outputs_never_alias_inputs():
    topk_p = torch.rand(3, 2)
    topk_index = torch.randint(100, (3, 2))
    hidden = torch.randn(3, 4)
    input_ids, new_hidden, scores, tree = ops.select_top_k_tokens(0, topk_p, topk_index, hidden, None, 2)
    inputs = {t.untyped_storage().data_ptr() for t in (topk_p, topk_index, hidden)}
    for output in (input_ids, new_hidden, scores, *tree):
        assert output.untyped_storage().data_ptr() not in inputs


def test_draft_extend_masks_out_of_range_rows():
    """On devices without value checks, -1 and too-large row indices leave their output rows alone."""
    logits = torch.randn(4, 10)
    hidden = torch.randn(4, 3)
    rows = torch.tensor([2, -1, 4, 0])
    outs = (
        torch.full((4, 1), float("nan")),
        torch.full((4, 1), -7),
        torch.full((4, 3), float("nan")),
    )
    sampling_module.draft_extend_topk1_postprocess.reference(logits, rows, hidden, None, *outs, None)
    valid = torch.tensor([True, False, False, True])
    assert torch.equal(outs[1][valid, 0], logits[[2, 0]].argmax(dim=1))
    assert torch.equal(outs[2][valid], hidden[[2, 0]])
    assert (outs[1][~valid] == -7).all() and outs[0][~valid].isnan().all() and outs[2][~valid].isnan().all()


def test_target_verify_out_of_range_next_token_stops_the_walk():
    kwargs = sampling_cases.build_target_verify_topk1_postprocess(
        CPU, bs=3, num_steps=4, accept_rate=1.0, seed=9
    )
    del kwargs["out"]
    stopped = dict(kwargs, retrieve_next_token=kwargs["retrieve_next_token"].clone())
    stopped["retrieve_next_token"][1, 2] = -1
    expected = ops.target_verify_topk1_postprocess(**stopped)
    kwargs["retrieve_next_token"][1, 2] = 99  # out of range: a masked lane, read as "no child"
    outs = [torch.full_like(t, -7) for t in expected]
    portable = sampling_module.target_verify_topk1_postprocess.reference
    portable(*(kwargs[name] for name in list(kwargs)[:7]), *outs)
    assert_same(tuple(outs), tuple(expected), "masked walk")


def test_target_verify_returns_named_fields_in_order():
    assert sampling_module.TargetVerifyTopk1Output._fields == (
        "predicts", "num_correct_drafts", "accept_lens", "accept_index", "bonus_tokens", "new_seq_lens",
        "select_index", "draft_tokens",
    )  # fmt: skip
    kwargs = sampling_cases.build_target_verify_topk1_postprocess(CPU, bs=2)
    del kwargs["out"]
    result = ops.target_verify_topk1_postprocess(**kwargs)
    assert isinstance(result, ops.TargetVerifyTopk1Output)
    assert torch.equal(result.accept_lens, result.num_correct_drafts + 1)


def test_renorm_ignores_temperatures_without_rejection_sampling():
    logits = torch.randn(3, 7)
    probs = ops.renorm_draft_probs(logits, torch.full((3, 1), 4.0), False)
    torch.testing.assert_close(probs, torch.softmax(logits, dim=-1))
    assert ops.renorm_draft_probs(logits, None, False).dtype == torch.float32


def test_draft_topk1_compiles_like_eager():
    kwargs = sampling_cases.build_draft_topk1_postprocess(CPU, bs=5, vocab=40, columns=2, column=1, seed=3)
    del kwargs["out"]

    def draft_step(logits, positions, draft_tokens):
        return ops.draft_topk1_postprocess(logits, positions, draft_tokens, draft_token_column=1)

    eager_args = snapshot({k: kwargs[k] for k in ("logits", "positions", "draft_tokens")})
    compiled_args = snapshot(eager_args)
    eager = draft_step(*eager_args.values())
    compiled = torch.compile(draft_step, fullgraph=True, backend="aot_eager")(*compiled_args.values())
    assert_same(compiled, eager, "result")
    assert_same(tuple(compiled_args.values()), tuple(eager_args.values()), "mutated inputs")
    assert not math.isnan(float(compiled[0].sum()))
