"""The bench's host-time breakdown (spec_hal/bench/host.py) on CPU tensors: layers add up, the
provider arguments are the ones the contract dispatches, and the inputs rotate."""

from __future__ import annotations

import types

import pytest
import torch

from spec_hal import ops
from spec_hal.bench import host
from spec_hal.conformance.cases.index import BUILDERS
from spec_hal.conformance.cases.kv import BUILDERS as KV_BUILDERS
from spec_hal.opdef import OpDef


def _inputs(seeds=(0, 1, 2)):
    return [BUILDERS["assign_extend_cache_locs"](torch.device("cpu"), bs=8, seed=seed) for seed in seeds]


def test_breakdown_splits_the_public_call_into_layers():
    row = host.breakdown("assign_extend_cache_locs", _inputs(), repeats=20)
    assert {"public_us", "validation_us", "dispatch_us", "provider_us"} <= set(row)
    assert row["public_us"] > 0 and row["provider_us"] > 0
    assert abs(row["validation_us"] + row["dispatch_us"] + row["provider_us"] - row["public_us"]) < 1e-6
    assert "binder_us" not in row  # the CPU provider launches no Triton kernel


def test_provider_arguments_are_what_the_contract_dispatches():
    kwargs = _inputs((0,))[0]
    dispatch = OpDef.dispatch
    ((op, device, args),) = host._provider_args(ops.assign_extend_cache_locs, kwargs)
    assert op is ops.assign_extend_cache_locs and device == torch.device("cpu")
    assert args[0] is kwargs["req_pool_indices"] and args[-1] is kwargs["out"]
    assert OpDef.dispatch is dispatch  # the capture is undone
    with pytest.raises(TypeError):
        host._provider_args(ops.assign_extend_cache_locs, {})  # the call raises: undone too
    assert OpDef.dispatch is dispatch


def test_an_op_built_on_another_has_both_dispatches_timed_as_dispatches(monkeypatch):
    kwargs = KV_BUILDERS["move_accept_tokens_to_target_kvcache"](torch.device("cpu"), bs=4, seed=0)
    dispatched = [op for op, _, _ in host._provider_args(ops.move_accept_tokens_to_target_kvcache, kwargs)]
    assert dispatched == [ops.move_accept_tokens_to_target_kvcache, ops.move_kv_cache]
    # The provider loop calls both providers: the KV move's counts as the provider's, not the contract's.
    resolved = []
    provider_for = OpDef.provider_for

    def spied(op, device, args):
        resolved.append(op.name)
        return provider_for(op, device, args)

    monkeypatch.setattr(OpDef, "provider_for", spied)
    host.breakdown("move_accept_tokens_to_target_kvcache", [kwargs], repeats=20)
    assert resolved == ["move_accept_tokens_to_target_kvcache", "move_kv_cache"]


def test_inputs_rotate():
    calls = []
    rotating = host.rotating([lambda: calls.append(0), lambda: calls.append(1), lambda: calls.append(2)])
    for _ in range(6):
        rotating()
    assert calls == [0, 1, 2, 0, 1, 2]


def test_a_loop_queues_a_bounded_number_of_launches():
    assert host.capped_repeats(400, 0) == 400  # no launch: nothing to queue
    assert host.capped_repeats(400, 1) == 400
    assert host.capped_repeats(400, 2) == host.QUEUED_LAUNCHES // 2
    assert host.capped_repeats(400, 10) == host.QUEUED_LAUNCHES // 10
    assert host.capped_repeats(400, 10_000) == host.MIN_REPEATS


def test_a_launch_sequence_counts_as_its_launches(monkeypatch):
    """A recorded :class:`LaunchSequence` is one entry of several launches: the queue bound (below)
    and the launch shapes count each of them."""
    from spec_hal import bench

    def made(grid, warps):
        return types.SimpleNamespace(grid=grid, options={"num_warps": warps, "LEVEL": 0})

    digits = (made((4, 2), 4), made((4, 2), 8))
    sequence = types.SimpleNamespace(launches=digits)
    write = made((4, 1), 4)
    recorded = [(sequence, (1, 2)), (write, (3,))]
    assert host.each_launch(recorded) == [(digits, (1, 2)), ((write,), (3,))]
    monkeypatch.setattr(host, "recorded_launches", lambda call: recorded)
    assert bench.launch_shape(lambda: None) == (((4, 2), 4), ((4, 2), 8), ((4, 1), 4))


def test_each_timing_loop_starts_with_the_device_drained(monkeypatch):
    events = []
    real = host._median_seconds

    def timed(fn, repeats, drain):
        events.append(("loop", repeats))
        return real(fn, repeats, drain)

    monkeypatch.setattr(host, "_median_seconds", timed)
    host.breakdown("assign_extend_cache_locs", _inputs(), repeats=30, drain=lambda: events.append("drain"))
    # public, dispatch and provider loops; the CPU provider launches no Triton kernel (no stages)
    assert events == [("loop", 30), "drain"] * 3  # the drain comes first inside each loop


@pytest.mark.parametrize(
    "recorded",
    [[("launch", ())] * 16, [(types.SimpleNamespace(launches=("launch",) * 16), ())]],
    ids=["launches", "one_sequence"],
)
def test_an_op_making_many_launches_is_timed_over_fewer_calls(monkeypatch, recorded):
    repeats = []
    monkeypatch.setattr(host, "recorded_launches", lambda call: recorded)
    monkeypatch.setattr(host, "_launch_stages", lambda launches, repeats, drain: None)
    monkeypatch.setattr(host, "_median_seconds", lambda fn, count, drain: repeats.append(count) or 1e-6)
    host.breakdown("assign_extend_cache_locs", _inputs(), repeats=400)
    assert repeats == [host.QUEUED_LAUNCHES // 16] * 3


def test_the_breakdown_table_reports_the_spread_over_the_launch():
    import io

    from spec_hal.bench import print_host_breakdown

    rows = [
        {"op": f"op{i}", "size": "bs=1", "host_us": 20.0 + i, "host_over_launch_us": float(i)}
        | {f"host_{layer}_us": 1.0 for layer in ("validation", "dispatch", "glue", "binder", "launcher")}
        | {"host_launches": 1}
        for i in range(10)
    ]
    out = io.StringIO()
    print_host_breakdown({"rows": rows, "launch_host_us": 20.0}, out)
    text = out.getvalue()
    assert "10 Triton rows: median +4.5 us, 90th percentile +9.0 us, worst +9.0 us" in text
    assert "op3 bs=1 23.0 3.0 1.00 1.00 1.00 1.00 1.00 1" in text
