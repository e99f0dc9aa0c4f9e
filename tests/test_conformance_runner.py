"""The conformance runner: the opcheck case class, the report's schema version, and the refusals
that keep a run from testing something other than asked (an absent device, missing providers)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest
import torch
from builtin_vendors import ACCELERATORS

from spec_hal import registry
from spec_hal.conformance import runner
from spec_hal.conformance.runner import CPU, Selection, absent_reason, planned, result_of, run_opcheck_case
from spec_hal.ops import fast_topk
from spec_hal.testing import isolated_registry


def _opcheck_of_fast_topk(provider):
    """The opcheck of fast_topk on its golden case, served by ``provider`` (a provider function)."""
    case = runner.opcheck_case(runner.all_cases(), "fast_topk")
    assert case is not None and case.kind == "golden"
    with isolated_registry():
        fast_topk.register_impl("cpu", provider.__name__, provider)
        thunk = functools.partial(run_opcheck_case, case, CPU, provider.__name__)
        return result_of("cpu", "fast_topk", provider.__name__, "opcheck", case.name, thunk)


def test_opcheck_passes_a_provider_that_writes_only_its_outputs():
    result = _opcheck_of_fast_topk(_sorted_topk)
    assert result.status == "pass", result.reason


def test_opcheck_fails_a_provider_that_writes_an_input_the_schema_calls_read_only():
    def scribbling(values, k, dim, out_values, out_indices):
        _sorted_topk(values, k, dim, out_values, out_indices)
        values.zero_()  # values is not declared mutated: compiled code would read stale data

    result = _opcheck_of_fast_topk(scribbling)
    assert result.status == "fail"
    assert "test_schema" in result.reason and "values" in result.reason, result.reason


def _sorted_topk(values, k, dim, out_values, out_indices):
    top_values, top_indices = torch.sort(values, dim=dim, descending=True, stable=True)
    out_values.copy_(top_values.narrow(dim, 0, k))
    out_indices.copy_(top_indices.narrow(dim, 0, k))


def test_every_device_op_and_provider_gets_one_opcheck():
    descriptor = registry.device("cpu")
    ops = frozenset({"fast_topk", "assign_extend_cache_locs"})
    rows = [
        (op, provider, name)
        for op, provider, case_class, name, _ in planned(descriptor, Selection(ops=ops, compile=False))
        if case_class == "opcheck"
    ]
    expected = {(op, p) for op in ops for p in runner.providers_for(op, descriptor)}
    assert sorted((op, provider) for op, provider, _ in rows) == sorted(expected)
    without = planned(descriptor, Selection(ops=ops, compile=False, opcheck=False))
    assert not [row for row in without if row[2] == "opcheck"]


def test_the_report_carries_its_schema_version_and_what_it_ran_on(monkeypatch):
    import platform

    data = runner.report([], registry.device("cpu"), 0.0)
    assert data["schema_version"] == runner.SCHEMA_VERSION == 1
    assert (
        data["device_name"]
        == f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"
    )
    # An accelerator's report names its model, as its runtime does: not just "cuda".
    runtime = type("Runtime", (), {"device_name": lambda self, device: f"model of {device}"})()
    monkeypatch.setattr(registry, "runtime_of", lambda descriptor: runtime)
    assert runner.report([], registry.device("cuda"), 0.0)["device_name"] == "model of cuda"
    assert (
        runner.report([], registry.device("cuda"), 0.0, emulated=True)["device_name"] == data["device_name"]
    )


def test_an_empty_capture_is_not_reported_as_a_wrong_stream(monkeypatch):
    """A case on empty tensors launches nothing: torch's warning that the captured graph is empty
    (and so on a wrong device or stream) is not shown; any other warning of the capture is."""
    import warnings

    from spec_hal import runtime

    def capture(fn, device, generators=()):
        fn()
        warnings.warn(
            "The CUDA Graph is empty. This usually means ... wrong device or stream.",
            UserWarning,
            stacklevel=2,
        )
        return fn

    monkeypatch.setattr(runtime, "capture_graph", capture)
    case = _invariance_case("keyed_uniform")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert runner.run_replay_invariance_case(case, CPU, "portable") == []
    assert caught == []

    def capture_warning_otherwise(fn, device, generators=()):
        warnings.warn("another capture warning", UserWarning, stacklevel=2)
        return fn

    monkeypatch.setattr(runtime, "capture_graph", capture_warning_otherwise)
    with pytest.warns(UserWarning, match="another capture warning"):
        runner.run_replay_invariance_case(case, CPU, "portable")


def test_a_graph_that_recorded_nothing_fails_the_replay_checks(monkeypatch):
    """The capture's warm-up call writes the buffers: a graph that recorded none of the work (its
    empty-graph warning hidden) must still fail, since the replay checks write the buffers anew."""
    from spec_hal import runtime

    def capture_nothing(fn, device, generators=()):
        fn()  # the warm-up on the side stream
        return lambda: None

    monkeypatch.setattr(runtime, "capture_graph", capture_nothing)
    case = _invariance_case("keyed_uniform")
    assert runner.run_replay_invariance_case(case, CPU, "portable")[0].startswith("replay vs eager")
    assert runner.run_graph_case(case, case, CPU, "portable")


def test_an_absent_device_is_named_with_its_probes_reason():
    assert absent_reason(registry.device("cpu")) is None
    probes = {p.vendor: p for p in registry.detect().probes}
    for name in ACCELERATORS:
        why = absent_reason(registry.device(name))
        assert (why is None) == probes[name].usable
        if why is not None:
            assert why.startswith(f"no {name} device here: {probes[name].reason}")


def test_intended_providers_that_are_not_registered_are_listed():
    descriptor = registry.device("cpu")
    assert runner.unavailable_providers(descriptor) == []
    with isolated_registry():
        registry.declare_intent(
            "cpu", "fast_topk", registry.Intent("absent_kernel", "a kernel not installed")
        )
        lines = runner.unavailable_providers(descriptor)
        assert runner.unavailable_providers(descriptor, frozenset({"fast_sample"})) == []
    assert len(lines) == 1 and "'absent_kernel'" in lines[0] and "fast_topk" in lines[0]


def test_the_pytest_form_under_xdist_reports_every_check_once_and_can_leave_out_compile(tmp_path):
    """``pytest --pyargs spec_hal.conformance -n 2``: the workers hand their results to the
    controller, whose report holds each planned check once (each worker alone would hold a part);
    ``--spec-hal-no-compile`` leaves the torch.compile checks out."""
    report = tmp_path / "report.json"
    selected = "fast_topk and (edge or compile)"
    command = [
        sys.executable, "-m", "pytest", "--pyargs", "spec_hal.conformance", "--spec-hal-device=cpu",
        "--spec-hal-no-compile", "-n", "2", "-q", "-p", "no:cacheprovider", "-k", selected,
        f"--spec-hal-report={report}",
    ]  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_HAL_")}
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=environment, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    reported = [
        (r["op"], r["provider"], r["case_class"], r["case"])
        for r in json.loads(report.read_text())["results"]
    ]
    with runner.device_context(registry.device("cpu")):
        planned_all = [
            check[:4] for check in planned(registry.device("cpu"), Selection(ops=frozenset({"fast_topk"})))
        ]
    compiled = [check for check in planned_all if check[2].startswith("compile")]
    assert compiled  # the selection would have compile checks without the option
    expected = [check for check in planned_all if check[2] == "edge"]
    assert expected and sorted(reported) == sorted(expected)


# --------------------------------------------------------------------------------------------------
# Invariance checks (D8)


def _invariance_case(op: str):
    return next(c for c in runner.all_cases() if c.op == op and c.rows and c.small)


def _keyed_uniform_reference(seeds, positions, step, domain, out):
    registry.ops()["keyed_uniform"].reference(seeds, positions, step, domain, out)


def test_the_batch_check_catches_rows_that_follow_the_batch():
    from spec_hal.ops import keyed_uniform

    def batch_sized(seeds, positions, step, domain, out):  # a last bit that follows the batch
        _keyed_uniform_reference(seeds, positions, step, domain, out)
        out.add_(out.shape[0] * 2.0**-24)

    case = _invariance_case("keyed_uniform")
    with isolated_registry():
        keyed_uniform.register_impl("cpu", "batch_sized", batch_sized)
        keyed_uniform.register_impl("cpu", "rowwise", _keyed_uniform_reference)
        assert runner.run_invariance_case(case, CPU, "rowwise", 16) == []
        problems = runner.run_invariance_case(case, CPU, "batch_sized", 16)
    labels = {problem.split(":")[0] for problem in problems}
    assert labels == {"alone (first row)", "alone (last row)", "slice", "repeated into 16 rows"}


def test_the_run_to_run_and_replay_checks_catch_a_provider_that_draws_anew(monkeypatch):
    """Replay is checked bitwise against eager: a provider whose output changes from call to call
    fails it, and the run-to-run check (a replay stands in for a captured graph on the CPU)."""
    from spec_hal import runtime
    from spec_hal.ops import keyed_uniform

    calls = [0]

    def drifting(seeds, positions, step, domain, out):
        _keyed_uniform_reference(seeds, positions, step, domain, out)
        calls[0] += 1
        out.add_(calls[0] * 2.0**-24)

    monkeypatch.setattr(runtime, "capture_graph", lambda fn, device, generators=(): fn)
    case = _invariance_case("keyed_uniform")
    with isolated_registry():
        keyed_uniform.register_impl("cpu", "drifting", drifting)
        keyed_uniform.register_impl("cpu", "rowwise", _keyed_uniform_reference)
        assert runner.run_replay_invariance_case(case, CPU, "rowwise") == []
        assert runner.run_replay_invariance_case(case, CPU, "drifting")[0].startswith("replay vs eager")
        assert runner.run_invariance_case(case, CPU, "drifting", 16)[0].startswith("run to run")


def test_request_moves_rebase_flat_node_ids():
    """A tree verify's requests taken out of order: flat ids follow each request to its new place."""
    case = next(c for c in runner.all_cases() if c.op == "verify_tree_greedy" and c.rows)
    kwargs = case.build(CPU)
    batch, nodes = kwargs["candidates"].shape
    index = torch.tensor([batch - 1, 0])
    part = runner._take_rows(case, kwargs, index, batch)
    assert torch.equal(part["retrieve_index"], torch.arange(2)[:, None] * nodes + torch.arange(nodes))
    assert torch.equal(part["predicts"], kwargs["predicts"].view(batch, -1)[index].flatten())
    assert torch.equal(part["retrieve_next_token"], kwargs["retrieve_next_token"][index])


def public_ops() -> dict:
    """spec_hal's own ops (not those other tests define)."""
    import spec_hal.ops

    return {name: op for name, op in registry.ops().items() if name in spec_hal.ops.__all__}


def variants_the_small_cases_reach() -> dict[str, dict[str, set]]:
    """Per op with a declared variant, the values each of its arguments takes across the
    conformance suite's small cases (what a provider's ``supports`` would be asked)."""
    import collections

    seen: dict[str, dict[str, set]] = collections.defaultdict(lambda: collections.defaultdict(set))
    keyed = [op for op in public_ops().values() if op.variant]

    def recording(op):
        def dispatch(device, *args):
            for name, part in zip(op.variant, op.variant_of(args), strict=True):
                seen[op.name][name].add(part)
            type(op).dispatch(op, device, *args)

        return dispatch

    for op in keyed:
        op.dispatch = recording(op)  # an instance attribute: the contract's own call finds it
    try:
        for case in runner.all_cases():
            if case.small:
                runner.call(case, runner.fresh_build(case, CPU))
    finally:
        for op in keyed:
            del op.dispatch
    return seen


def test_every_declared_variant_is_exercised_by_the_suite():
    """A declared variant is what a provider may decline: each of its arguments must take more
    than one value across the suite's cases, so that a provider declining one is checked against
    the others (an argument of one possible dtype declares nothing a provider could decline)."""
    seen = variants_the_small_cases_reach()
    keyed = {name: op.variant for name, op in public_ops().items() if op.variant}
    assert keyed, "no op declares a variant"
    constant = [
        f"{op}.{name}: only {sorted(map(repr, seen[op][name]))}"
        for op, names in keyed.items()
        for name in names
        if len(seen[op][name]) < 2
    ]
    assert constant == [], "declare only arguments a provider could decline"
