"""Family G (mamba state commit): the public ops against the loop oracle, goldens, bad cases, meta, compile."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from oracles import mamba as oracle

import spec_hal.ops as ops
from spec_hal.conformance import grid
from spec_hal.conformance.cases import mamba as mamba_cases
from spec_hal.conformance.cases.mamba import VerifyStates
from spec_hal.conformance.runner import compare
from spec_hal.ops import MambaVerifyStates

CPU = torch.device("cpu")
CASES = mamba_cases.cases()


def _cases(op: str, *kinds: str) -> list:
    return [
        pytest.param(case, id=f"{case.kind}:{case.name}")
        for case in CASES
        if case.op == op and case.kind in kinds
    ]


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.contiguous().view(as_int)


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(_bits(actual), _bits(expected))


def _as_list(tensor: torch.Tensor | None) -> list | None:
    return None if tensor is None else tensor.tolist()


def _snapshot(kwargs: dict, mutated: tuple[str, ...]) -> dict[str, torch.Tensor | list[torch.Tensor]]:
    """Clones of every tensor (or tensor list) argument not in ``mutated``."""
    kept = {}
    for name, value in kwargs.items():
        if name in mutated:
            continue
        if isinstance(value, torch.Tensor):
            kept[name] = value.clone()
        elif isinstance(value, list):
            kept[name] = [item.clone() for item in value]
    return kept


def _assert_unchanged(kwargs: dict, before: dict) -> None:
    for name, value in before.items():
        now = kwargs[name]
        for actual, wanted in zip(
            now if isinstance(now, list) else [now],
            value if isinstance(value, list) else [value],
            strict=True,
        ):
            assert_same_bits(actual, wanted)


# --------------------------------------------------------------------------------------------------
# G1 verify_commit_step_indices


@pytest.mark.parametrize("case", _cases("verify_commit_step_indices", "random", "edge"))
def test_verify_commit_step_indices_matches_oracle(case):
    kwargs = case.build(CPU)
    interval = kwargs["mamba_track_interval"]
    last, track = oracle.verify_commit_step_indices(
        kwargs["accept_index"].tolist(),
        kwargs["accept_lens"].tolist(),
        kwargs["draft_token_num"],
        kwargs["seq_lens"].tolist(),
        interval,
    )
    before = _snapshot(kwargs, ("last_correct_step_indices", "mamba_steps_to_track"))
    got_last, got_track = ops.verify_commit_step_indices(**kwargs)
    assert got_last is kwargs["last_correct_step_indices"] and got_last.tolist() == last  # no poison left
    if interval is None:
        assert got_track is None
    else:
        assert got_track is kwargs["mamba_steps_to_track"] and got_track.tolist() == track
    _assert_unchanged(kwargs, before)


@pytest.mark.parametrize("idx_dtype", grid.INDEX_DTYPES)
def test_verify_commit_step_indices_allocates_and_mixes_dtypes(idx_dtype):
    kwargs = mamba_cases.build_verify_commit_step_indices(CPU, bs=9, topk=4, seed=2, mamba_track_interval=3)
    last, track = oracle.verify_commit_step_indices(
        kwargs["accept_index"].tolist(),
        kwargs["accept_lens"].tolist(),
        kwargs["draft_token_num"],
        kwargs["seq_lens"].tolist(),
        3,
    )
    got_last, got_track = ops.verify_commit_step_indices(
        kwargs["accept_index"].to(idx_dtype),
        kwargs["accept_lens"].int(),
        kwargs["draft_token_num"],
        kwargs["seq_lens"],
        3,
    )
    assert got_last.dtype == got_track.dtype == torch.int64
    assert got_last.tolist() == last and got_track.tolist() == track


def test_track_output_left_untouched_without_tracking():
    kwargs = mamba_cases.build_verify_commit_step_indices(CPU, bs=4, mamba_track_interval=2)
    kwargs["mamba_track_interval"] = None
    poisoned = kwargs["mamba_steps_to_track"].clone()
    assert ops.verify_commit_step_indices(**kwargs)[1] is None
    assert torch.equal(kwargs["mamba_steps_to_track"], poisoned)


# --------------------------------------------------------------------------------------------------
# G2 scatter_mamba_states_after_mtp_verify


def _scatter_oracle(kwargs: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
    ssm = kwargs["ssm_states"].clone()
    conv = [state.clone() for state in kwargs["conv_states"]]
    oracle.scatter_mamba_states_after_mtp_verify(
        ssm,
        kwargs["intermediate_ssm"],
        conv,
        kwargs["intermediate_conv_windows"],
        kwargs["state_indices"].tolist(),
        kwargs["last_correct_step_indices"].tolist(),
        _as_list(kwargs["mamba_track_indices"]),
        _as_list(kwargs["mamba_steps_to_track"]),
    )
    return ssm, conv


@pytest.mark.parametrize("case", _cases("scatter_mamba_states_after_mtp_verify", "random", "edge"))
def test_scatter_matches_oracle(case):
    kwargs = case.build(CPU)
    ssm, conv = _scatter_oracle(kwargs)
    before = _snapshot(kwargs, ("ssm_states", "conv_states"))
    got_ssm, got_conv = ops.scatter_mamba_states_after_mtp_verify(**kwargs)
    assert got_ssm is kwargs["ssm_states"]
    assert all(a is b for a, b in zip(got_conv, kwargs["conv_states"], strict=True))
    assert_same_bits(kwargs["ssm_states"], ssm)
    for actual, wanted in zip(kwargs["conv_states"], conv, strict=True):
        assert_same_bits(actual, wanted)
    _assert_unchanged(kwargs, before)


def _strided(tensor: torch.Tensor) -> torch.Tensor:
    """The same values with a gap after every entry element: entries no longer contiguous."""
    wide = torch.zeros(*tensor.shape[:-1], 2 * tensor.shape[-1], dtype=tensor.dtype)
    wide[..., ::2] = tensor
    return wide[..., ::2]


#: One mismatch each of the second conv pair against the SSM pair (or within itself), and the
#: argument its error names: every clause of the fast passing path has a named failure.
_CONV_PAIR_MISMATCHES = {
    "conv not a tensor": (lambda conv, windows: ([1.0], windows), TypeError, r"conv_states\[1\]"),
    "windows not a tensor": (
        lambda conv, windows: (conv, None),
        TypeError,
        r"intermediate_conv_windows\[1\]",
    ),
    "dtype": (lambda conv, windows: (conv, windows.double()), TypeError, r"intermediate_conv_windows\[1\]"),
    "conv rank": (lambda conv, windows: (conv[0, 0, 0], windows), ValueError, r"conv_states\[1\]"),
    "windows rank": (
        lambda conv, windows: (conv, windows[..., 0]),
        ValueError,
        r"intermediate_conv_windows\[1\]",
    ),
    "layers": (
        lambda conv, windows: (conv[:1], windows[:1]),
        ValueError,
        r"conv_states\[1\]: expected 2 layers",
    ),
    "lines": (
        lambda conv, windows: (conv[:, 1:], windows),
        ValueError,
        r"conv_states\[1\]: expected \d+ cache lines",
    ),
    "windows layers": (
        lambda conv, windows: (conv, windows[:1]),
        ValueError,
        r"intermediate_conv_windows\[1\]",
    ),
    "entry": (lambda conv, windows: (conv, windows[..., 1:]), ValueError, r"intermediate_conv_windows\[1\]"),
    "rows": (
        lambda conv, windows: (conv, windows[:, 1:]),
        ValueError,
        r"intermediate_conv_windows\[1\]: expected M, D",
    ),
    "steps": (
        lambda conv, windows: (conv, windows[:, :, 1:]),
        ValueError,
        r"intermediate_conv_windows\[1\]: expected M, D",
    ),
    "entry not contiguous": (
        lambda conv, windows: (_strided(conv), windows),
        ValueError,
        r"conv_states\[1\]: each state entry",
    ),
}


@pytest.mark.parametrize("mismatch", list(_CONV_PAIR_MISMATCHES))
def test_each_state_pair_mismatch_is_named(mismatch):
    """The state pairs are checked by one passing-path predicate and, on a miss, by the checks that
    name the argument: each mismatch gets its own error, never an unnamed one."""
    kwargs = mamba_cases.build_scatter_mamba_states_after_mtp_verify(CPU, bs=3, dtype=torch.float32)
    mutate, error, match = _CONV_PAIR_MISMATCHES[mismatch]
    conv, windows = mutate(kwargs["conv_states"][1], kwargs["intermediate_conv_windows"][1])
    kwargs["conv_states"][1], kwargs["intermediate_conv_windows"][1] = conv, windows
    with pytest.raises(error, match=match):
        ops.scatter_mamba_states_after_mtp_verify(**kwargs)


def test_commit_reads_the_first_bs_lines_of_longer_tables():
    """``states.state_indices`` longer than the batch: its first bs lines are the ones written."""
    kwargs = mamba_cases.build_commit_mamba_states_after_verify(CPU, bs=4, seed=3)
    states = kwargs["states"]
    exact = dataclasses.replace(
        states,
        ssm_states=states.ssm_states.clone(),
        conv_states=[c.clone() for c in states.conv_states],
        state_indices=states.state_indices[:4].clone(),
    )
    longer = dataclasses.replace(
        states,
        state_indices=torch.cat(
            (states.state_indices[:4], torch.tensor([0, 1], dtype=states.state_indices.dtype))
        ),
    )
    ops.commit_mamba_states_after_verify(**{**kwargs, "states": longer})
    ops.commit_mamba_states_after_verify(**{**kwargs, "states": exact})
    assert_same_bits(longer.ssm_states, exact.ssm_states)
    for got, wanted in zip(longer.conv_states, exact.conv_states, strict=True):
        assert_same_bits(got, wanted)
    short = dataclasses.replace(states, state_indices=states.state_indices[:3])
    with pytest.raises(ValueError, match=r"states.state_indices: expected at least bs = 4 entries, got 3"):
        ops.commit_mamba_states_after_verify(**{**kwargs, "states": short})


def test_scatter_all_padding_rows_writes_nothing():
    """Every row padding: the lines keep their bits (NaN included), line 0 too."""
    kwargs = mamba_cases.build_scatter_mamba_states_after_mtp_verify(
        CPU, bs=4, dtype=torch.float32, tracking=True
    )
    kwargs["ssm_states"][:, 0] = float("nan")
    kwargs["last_correct_step_indices"] = torch.tensor([-1, 4, -1, 9])
    kwargs["mamba_steps_to_track"] = torch.tensor([0, 1, 2, 3])
    kwargs["mamba_track_indices"] = torch.tensor([-1, -5, 100, -1])
    before = [kwargs["ssm_states"].clone(), *[state.clone() for state in kwargs["conv_states"]]]
    ops.scatter_mamba_states_after_mtp_verify(**kwargs)
    for actual, wanted in zip([kwargs["ssm_states"], *kwargs["conv_states"]], before, strict=True):
        assert_same_bits(actual, wanted)


# --------------------------------------------------------------------------------------------------
# G3 commit_mamba_states_after_verify


def _commit_oracle(kwargs: dict, last: list[int] | None = None, track: list[int] | None = None):
    states = kwargs["states"]
    bs = kwargs["accept_index"].shape[0]
    interval = states.mamba_track_interval
    computed_last, computed_track = oracle.verify_commit_step_indices(
        kwargs["accept_index"].tolist(),
        kwargs["accept_lens"].tolist(),
        kwargs["draft_token_num"],
        kwargs["seq_lens"].tolist(),
        interval,
    )
    last = computed_last if last is None else last
    track = computed_track if track is None else track
    ssm = states.ssm_states.clone()
    conv = [state.clone() for state in states.conv_states]
    oracle.scatter_mamba_states_after_mtp_verify(
        ssm,
        states.intermediate_ssm,
        conv,
        states.intermediate_conv_windows,
        states.state_indices[:bs].tolist(),
        last,
        None if interval is None else states.mamba_track_indices[:bs].tolist(),
        track,
    )
    return last, track, ssm, conv


@pytest.mark.parametrize("case", _cases("commit_mamba_states_after_verify", "random", "edge"))
def test_commit_matches_oracle(case):
    kwargs = case.build(CPU)
    states = kwargs["states"]
    assert isinstance(states, MambaVerifyStates)
    before = _snapshot(kwargs, ())
    fields = {field.name: getattr(states, field.name) for field in dataclasses.fields(states)}
    before_states = _snapshot(fields, ("ssm_states", "conv_states"))
    if kwargs["accept_index"].shape[0] == 0:
        assert ops.commit_mamba_states_after_verify(**kwargs) is None
        return
    last, track, ssm, conv = _commit_oracle(kwargs)
    got_last, got_track = ops.commit_mamba_states_after_verify(**kwargs)
    assert got_last.tolist() == last and _as_list(got_track) == track
    assert_same_bits(states.ssm_states, ssm)
    for actual, wanted in zip(states.conv_states, conv, strict=True):
        assert_same_bits(actual, wanted)
    _assert_unchanged(kwargs, before)
    _assert_unchanged(fields, before_states)


def test_commit_uses_the_callers_steps():
    kwargs = mamba_cases.build_commit_mamba_states_after_verify(CPU, bs=5, mamba_track_interval=2, seed=4)
    given_last = torch.tensor([0, 1, -1, 2, 3], dtype=torch.int32)
    last, track, ssm, conv = _commit_oracle(kwargs, last=given_last.tolist())
    got_last, got_track = ops.commit_mamba_states_after_verify(**kwargs, last_correct_step_indices=given_last)
    assert got_last is given_last and got_track.tolist() == track
    assert_same_bits(kwargs["states"].ssm_states, ssm)
    given_track = torch.tensor([1, -1, 0, 0, 2])
    last, _, ssm, conv = _commit_oracle(kwargs, track=given_track.tolist())
    got_last, got_track = ops.commit_mamba_states_after_verify(**kwargs, mamba_steps_to_track=given_track)
    assert got_last.tolist() == last and got_track is given_track
    assert_same_bits(kwargs["states"].ssm_states, ssm)


@pytest.mark.parametrize(
    ("given", "dispatched"),
    [
        ((), {"commit_mamba_states_after_verify"}),
        (("last",), {"verify_commit_step_indices", "scatter_mamba_states_after_mtp_verify"}),
        (("track",), {"verify_commit_step_indices", "scatter_mamba_states_after_mtp_verify"}),
        (("last", "track"), {"scatter_mamba_states_after_mtp_verify"}),
    ],
)
def test_commit_dispatches(given, dispatched):
    """Without caller steps G3 is its own device op; with both it is G2; with one, G1 then G2."""
    kwargs = mamba_cases.build_commit_mamba_states_after_verify(CPU, bs=4, mamba_track_interval=2, seed=5)
    if "last" in given:
        kwargs["last_correct_step_indices"] = torch.tensor([0, 1, 2, 3])
    if "track" in given:
        kwargs["mamba_steps_to_track"] = torch.tensor([-1, 0, -1, 1])
    opdefs = (
        ops.verify_commit_step_indices,
        ops.scatter_mamba_states_after_mtp_verify,
        ops.commit_mamba_states_after_verify,
    )
    for opdef in opdefs:
        opdef.clear_bindings()
    ops.commit_mamba_states_after_verify(**kwargs)
    assert {opdef.name for opdef in opdefs if opdef._bound} == dispatched


@pytest.mark.parametrize("given", [(), ("last",)])
def test_commit_allocates_its_steps_under_graph_capture(monkeypatch, given):
    """G3 has no output parameters: the steps it computes are allocated even while a graph captures
    (the optional outputs of other ops must be passed then)."""
    import spec_hal.validation

    kwargs = mamba_cases.build_commit_mamba_states_after_verify(CPU, bs=4, mamba_track_interval=2, seed=6)
    if "last" in given:
        kwargs["last_correct_step_indices"] = torch.tensor([0, 1, 2, 3])
    given_last = kwargs.get("last_correct_step_indices")
    expected_last, expected_track, _, _ = _commit_oracle(
        kwargs, last=None if given_last is None else given_last.tolist()
    )
    monkeypatch.setattr(spec_hal.validation, "is_capturing", lambda device: True)
    with pytest.raises(ValueError, match="left None during graph capture"):
        ops.verify_commit_step_indices(kwargs["accept_index"], kwargs["accept_lens"], 4)
    last, track = ops.commit_mamba_states_after_verify(**kwargs)
    assert last.tolist() == expected_last and track.tolist() == expected_track


def test_commit_nothing_to_do():
    kwargs = mamba_cases.build_commit_mamba_states_after_verify(CPU, bs=3)
    assert (
        ops.commit_mamba_states_after_verify(None, kwargs["accept_index"], kwargs["accept_lens"], 4) is None
    )
    before = kwargs["states"].ssm_states.clone()
    empty = torch.zeros(3, 0, dtype=torch.int64)
    assert ops.commit_mamba_states_after_verify(kwargs["states"], empty, kwargs["accept_lens"], 4) is None
    assert torch.equal(kwargs["states"].ssm_states, before)


# --------------------------------------------------------------------------------------------------
# Goldens and errors


@pytest.mark.parametrize("case", [case for op in mamba_cases.BUILDERS for case in _cases(op, "golden")])
def test_golden(case):
    kwargs = case.build(CPU)
    result = getattr(ops, case.op)(**kwargs)
    expected = case.expected()
    assert compare({name: result if name == "result" else kwargs[name] for name in expected}, expected) == []


@pytest.mark.parametrize(
    "bad", [pytest.param(bad, id=f"{bad.op}:{bad.name}") for bad in mamba_cases.bad_cases()]
)
def test_bad_case(bad):
    kwargs = bad.build(CPU)
    with pytest.raises(bad.error, match=bad.match):
        getattr(ops, bad.op)(**kwargs)


# --------------------------------------------------------------------------------------------------
# Meta tensors and torch.compile


def _to_meta(value):
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, list):
        return [_to_meta(item) for item in value]
    if isinstance(value, VerifyStates):
        return VerifyStates(
            **{field.name: _to_meta(getattr(value, field.name)) for field in dataclasses.fields(value)}
        )
    return value


@pytest.mark.parametrize(
    ("op", "sizes", "opdefs"),
    [
        ("verify_commit_step_indices", {"mamba_track_interval": 2}, (ops.verify_commit_step_indices,)),
        (
            "scatter_mamba_states_after_mtp_verify",
            {"tracking": True},
            (ops.scatter_mamba_states_after_mtp_verify,),
        ),
        (
            "commit_mamba_states_after_verify",
            {"mamba_track_interval": 2},
            (ops.commit_mamba_states_after_verify,),
        ),
    ],
)
def test_meta_runs_the_portable_reference(op, sizes, opdefs):
    kwargs = {
        name: _to_meta(value)
        for name, value in mamba_cases.BUILDERS[op](CPU, bs=3, idx_dtype=torch.int32, **sizes).items()
    }
    for opdef in opdefs:
        opdef.clear_bindings()
    getattr(ops, op)(**kwargs)
    for opdef in opdefs:
        bound = [fn for (device, _), fn in opdef._bound.items() if device.type == "meta"]
        assert bound and all(fn is opdef.reference for fn in bound)


def test_compiled_scatter_matches_eager():
    eager = mamba_cases.build_scatter_mamba_states_after_mtp_verify(CPU, bs=6, tracking=True, seed=7)
    compiled = mamba_cases.build_scatter_mamba_states_after_mtp_verify(CPU, bs=6, tracking=True, seed=7)

    def step(**kwargs):
        ssm, conv = ops.scatter_mamba_states_after_mtp_verify(**kwargs)
        return ssm.float().sum() + conv[1].float().sum()  # reads after the op must see its writes

    torch._dynamo.reset()
    total = torch.compile(step, fullgraph=True, backend="aot_eager")(**compiled)
    assert torch.equal(total, step(**eager))
    assert_same_bits(compiled["ssm_states"], eager["ssm_states"])
    for actual, wanted in zip(compiled["conv_states"], eager["conv_states"], strict=True):
        assert_same_bits(actual, wanted)
