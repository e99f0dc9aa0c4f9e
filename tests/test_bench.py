"""``spec-hal bench``: the bytes each op moves (the bandwidth column), how a row is derived, the
launch configurations and ops ``--sweep`` times, and ``--host-profile``."""

from __future__ import annotations

import dataclasses
import json
from inspect import signature
from pathlib import Path

import pytest
import torch

from spec_hal import ops as spec_hal_ops
from spec_hal.bench import (
    DrawnNoise,
    Timing,
    _accepted,
    _row,
    bench_facts,
    builders,
    bytes_moved,
    run,
    set_ceiling,
    settle_launch_reference,
    sizes_for,
)
from spec_hal.bench.report import missed_targets, section
from spec_hal.errors import SpecHalError
from spec_hal.ops import KVBuffers


def test_kv_move_counts_only_lanes_with_both_slots():
    kv = KVBuffers([torch.zeros(8, 4, dtype=torch.bfloat16) for _ in range(3)])  # 8-byte rows
    kwargs = {
        "kv": kv,
        "tgt_loc": torch.tensor([1, 2, -1, 4, 5]),
        "src_loc": torch.tensor([6, -1, 3, 7, 0]),
        "segment_lens": None,
    }
    moved_lanes = 3  # lanes 0, 3 and 4 have a target and a source
    assert bytes_moved("move_kv_cache", kwargs) == 2 * moved_lanes * 3 * 8


def test_mamba_scatter_counts_written_lanes_of_both_line_sets():
    layers, lines, rows, steps = 2, 5, 3, 4
    ssm = torch.zeros(layers, lines, 2, 2)  # 16-byte entries
    conv = [torch.zeros(layers, lines, 3)]  # 12-byte entries
    kwargs = {
        "ssm_states": ssm,
        "intermediate_ssm": torch.zeros(layers, rows, steps, 2, 2),
        "conv_states": conv,
        "intermediate_conv_windows": [torch.zeros(layers, rows, steps, 3)],
        "state_indices": torch.tensor([0, 7, 2]),  # line 7 is out of range: padding
        "last_correct_step_indices": torch.tensor([1, 0, -1]),  # step -1: padding
        "mamba_track_indices": torch.tensor([3, 4, 1]),
        "mamba_steps_to_track": torch.tensor([-1, 2, 3]),
    }
    written = 1 + 2  # row 0's commit; rows 1 and 2 tracked
    assert bytes_moved("scatter_mamba_states_after_mtp_verify", kwargs) == 2 * written * layers * (16 + 12)


def test_draft_extend_reads_only_the_selected_logits_rows():
    kwargs = {
        "logits": torch.zeros(10, 32),
        "row_indices": torch.tensor([3, 9]),
        "hidden_states": torch.zeros(10, 6, dtype=torch.float16),
        "dsa_topk_indices": None,
    }
    assert bytes_moved("draft_extend_topk1_postprocess", kwargs) == 2 * 32 * 4 + 2 * 2 * 6 * 2


@pytest.mark.parametrize("op", ["tree_speculative_sampling_target_only", "chain_speculative_sampling"])
def test_tree_and_chain_sampling_count_one_target_and_draft_row_per_request(op):
    builder = builders()[op]
    sizes = {"bs": 3, "vocab": 40, "topk": 2, "num_steps": 2}
    kwargs = builder(
        torch.device("cpu"), **{k: v for k, v in sizes.items() if k in signature(builder).parameters}
    )
    bs, nodes, vocab = kwargs["target_probs"].shape
    assert (bs, vocab) == (3, 40) and nodes > 1
    assert bytes_moved(op, kwargs) == 8 * bs * vocab  # not every node's row of both tensors


def test_draft_kv_indices_follow_the_ops_formula():
    seq_lens = torch.tensor([5, 0, 7])
    kwargs = {
        "req_pool_indices": torch.arange(3),
        "req_to_token": torch.zeros(3, 16, dtype=torch.int32),
        "seq_lens": seq_lens,
        "positions": seq_lens,
        "page_size": 1,
        "topk": 2,
        "num_steps": 3,
        "kv_indices": torch.zeros(3, 64, dtype=torch.int32),
        "kv_indptr": torch.zeros(3, 7, dtype=torch.int32),
    }
    bs, k, s, prefix = 3, 2, 3, 12
    expected = (
        4 * (prefix + bs * k * s) + 4 * s * k * prefix + 2 * bs * k * s * (s + 1) + 4 * s * (bs * k + 1)
    )
    assert bytes_moved("generate_draft_decode_kv_indices", kwargs) == expected


def test_bandwidth_is_taken_from_the_graph_replay_when_measured():
    data = {"copy_bandwidth_gbs": 1000.0, "launch_floor_us": 2.0, "launch_host_us": 10.0}
    measured = {
        "time": Timing(100.0, 1.0),  # eager events: host gaps included
        "graph": Timing(50.0, 1.0),
        "host": Timing(14.0, 1.0),
        "bytes": 25_000_000,
    }
    row = _row("move_kv_cache", "triton", {"bs": 4}, measured, "bandwidth", data)
    assert row["pct_copy_bw"] == 50.0  # 25 MB in 50 us = 500 GB/s
    assert row["x_floor"] == 25.0 and row["host_over_launch_us"] == 4.0
    del measured["graph"]
    assert _row("move_kv_cache", "triton", {"bs": 4}, measured, "bandwidth", data)["pct_copy_bw"] == 25.0


def test_the_launch_reference_is_the_median_of_the_runs_samples_and_rows_follow_it():
    rows = [{"op": "a", "host_us": 20.0, "host_over_launch_us": 10.0}, {"op": "b", "time_us": 3.0}]
    data = {"rows": rows, "launch_host_samples_us": [10.0]}
    settle_launch_reference(data)
    assert data["launch_host_us"] == 10.0 and rows[0]["host_over_launch_us"] == 10.0
    data["launch_host_samples_us"] += [16.0, 13.0]  # timed again between ops
    settle_launch_reference(data)
    assert data["launch_host_us"] == 13.0
    assert rows[0]["host_over_launch_us"] == 7.0 and "host_over_launch_us" not in rows[1]


def test_a_row_with_a_grid_floor_is_also_read_against_it():
    data = {"launch_floor_us": 1.0}
    measured = {
        "time": Timing(9.0, 1.0),
        "graph": Timing(3.0, 0.1),
        "grid_floor": Timing(2.5, 0.1),
        "bytes": 8,
    }
    row = _row("assign_extend_cache_locs", "triton", {"bs": 512}, measured, "latency", data)
    assert row["x_floor"] == 3.0 and row["grid_floor_us"] == 2.5 and row["x_grid_floor"] == 1.2
    del measured["grid_floor"]
    measured["grid_floor_error"] = "RuntimeError: no capture"
    row = _row("assign_extend_cache_locs", "triton", {"bs": 512}, measured, "latency", data)
    assert "x_grid_floor" not in row and row["note"] == "RuntimeError: no capture"


def test_the_latency_target_reads_the_grid_floor_where_the_run_measured_it():
    def row(**floors):
        return {
            "op": "assign_extend_cache_locs",
            "provider": "triton",
            "size": "bs=512",
            "class": "latency",
            **floors,
        }

    assert missed_targets({"launch_floor_us": 1.0, "rows": [row(x_floor=3.0, x_grid_floor=1.2)]}) == []
    assert missed_targets({"launch_floor_us": 1.0, "rows": [row(x_floor=1.2, x_grid_floor=1.6)]}) == [
        "- assign_extend_cache_locs, latency: bs=512: 1.6x"
    ]
    assert missed_targets({"launch_floor_us": 1.0, "rows": [row(x_floor=1.6)]}) == [
        "- assign_extend_cache_locs, latency: bs=512: 1.6x"
    ]


_RUN = {"copy_bandwidth_gbs": 4200.0, "launch_floor_us": 0.5}


def _size_rows(op: str) -> list[dict]:
    return [{"op": op, "provider": p, "bytes": 4_200_000} for p in ("portable", "triton")]


def test_the_ceiling_adds_an_empty_kernel_the_bytes_at_copy_bandwidth_and_the_drawn_noise_with_its_read():
    rows = _size_rows("fast_sample")
    noise = DrawnNoise(Timing(3.0, 0.1), nbytes=8_400_000)
    set_ceiling("fast_sample", "bandwidth", rows, {"time": Timing(90.0, 1.0), "graph": Timing(45.0, 1.0),
                "drawn_noise": noise}, _RUN)  # fmt: skip
    # 0.5 us empty kernel + 12.6 MB at 4200 GB/s (3 us) + the 3 us draw: no provider takes less than 6.5 us
    for row in rows:
        assert row["least_device_us"] == 6.5 and row["x_ceiling"] == round(45.0 / 6.5, 2)
        assert row["drawn_noise_us"] == 3.0
    rows = _size_rows("move_kv_cache")
    set_ceiling("move_kv_cache", "bandwidth", rows, {"time": Timing(9.0, 1.0)}, _RUN)  # eager time: no graph
    assert [row["x_ceiling"] for row in rows] == [6.0, 6.0] and "drawn_noise_us" not in rows[0]


def test_keyed_rows_sit_beside_the_generator_rows_and_their_ceiling_has_no_draw():
    """The sampling ops are timed keyed too (the noise computed in the provider) at every batch, 32k
    and 128k in a full run; their least device time is the launch and the bytes, no draw."""
    build = builders()["fast_sample"]
    full = list(sizes_for("fast_sample", build, "full"))
    keyed = [(s["bs"], s["vocab"]) for s in full if s.get("keyed")]
    assert keyed == [(b, v) for v in (32768, 131072) for b in (1, 8, 64, 256, 512)]
    generator_rows = [(s["bs"], s["vocab"]) for s in full if not s.get("keyed")]
    assert generator_rows == [(b, 32768) for b in (1, 8, 64, 256, 512)] + [(64, 131072), (512, 131072)]
    assert all(s.get("keyed") is None for s in sizes_for("fast_topk", builders()["fast_topk"], "full"))
    rows = _size_rows("fast_sample")
    set_ceiling("fast_sample", "bandwidth", rows, {"time": Timing(9.0, 1.0), "graph": Timing(7.0, 1.0)}, _RUN,
                draws=False)  # fmt: skip
    assert rows[0]["least_device_us"] == 1.5 and "drawn_noise_us" not in rows[0]  # 0.5 + 4.2 MB / 4200 GB/s


def test_no_ceiling_without_the_drawn_noise_a_bandwidth_class_or_a_portable_row():
    rows = _size_rows("sample_draft_proposal")
    set_ceiling("sample_draft_proposal", "bandwidth", rows,
                {"time": Timing(9.0, 1.0), "drawn_noise_error": "RuntimeError: no capture"}, _RUN)  # fmt: skip
    assert (
        "x_ceiling" not in rows[0] and rows[1]["note"] == "no ceiling: drawn noise RuntimeError: no capture"
    )
    for op_class, portable in (("latency", {"time": Timing(9.0, 1.0)}), ("bandwidth", {})):
        rows = _size_rows("move_kv_cache")
        set_ceiling("move_kv_cache", op_class, rows, portable, _RUN)
        assert "x_ceiling" not in rows[0]


def test_the_noise_the_bench_times_is_what_each_public_call_draws(monkeypatch):
    """The ops that draw noise before they dispatch are those whose builder names ``noise_like``,
    in that argument's shape."""
    import sys

    drawn: list[tuple[str, tuple]] = []
    current = [""]
    for module in [m for name, m in sys.modules.items() if name.startswith("spec_hal.ops")]:
        original = getattr(module, "exponential_noise", None)
        if original is not None:

            def recording(shape, device, generator, original=original):
                drawn.append((current[0], tuple(shape)))
                return original(shape, device, generator)

            monkeypatch.setattr(module, "exponential_noise", recording)
    cpu = torch.device("cpu")
    shapes = {}
    for op, builder in sorted(builders().items()):
        shapes[op] = builder(
            cpu, **_accepted(builder, {"bs": 2, "topk": 2, "num_steps": 2, "page_size": 1, "vocab": 64})
        )
        current[0] = op
        getattr(spec_hal_ops, op)(**shapes[op])
    noise_like = {op: bench_facts(op).noise_like for op in builders() if bench_facts(op).noise_like}
    assert {op for op, _ in drawn} == set(noise_like) == {"fast_sample", "sample_draft_proposal"}
    for op, shape in drawn:
        assert shape == tuple(shapes[op][noise_like[op]].shape)


def test_vocabulary_ops_below_five_times_portable_from_64_rows_are_missed_with_their_ceiling():
    def row(op="fast_sample", provider="triton", bs=64, speedup=2.0, **extra):
        return {
            "op": op,
            "provider": provider,
            "size": f"vocab=32768 bs={bs}",
            "class": "bandwidth",
            "bytes": 1 << 20,
            "time_us": 10.0,
            "speedup_vs_portable": speedup,
            **extra,
        }

    data = {
        "launch_floor_us": 1.0,
        "rows": [
            row(x_ceiling=3.9),
            row(bs=8),  # below the batch the target starts at
            row(provider="portable", speedup=1.0),
            row(op="fast_topk", speedup=5.0),  # met
            row(op="move_kv_cache"),  # not a vocabulary op
        ],
    }
    assert missed_targets(data) == ["- fast_sample, 5x portable: vocab=32768 bs=64: 2.0x (at most 3.9x)"]
    del data["rows"][0]["x_ceiling"]  # a run before the ceiling was measured
    assert missed_targets(data) == ["- fast_sample, 5x portable: vocab=32768 bs=64: 2.0x"]


def test_the_rendered_section_gives_a_missed_targets_ceiling_and_its_column():
    with open(
        Path(__file__).resolve().parents[1] / "docs/bench/h200-0276914.json", encoding="utf-8"
    ) as handle:
        data = json.load(handle)
    assert "| x_ceiling |" not in section(data, "run.json")  # a run before the ceilings
    size = "vocab=32768 bs=512"
    rows = {r["provider"]: r for r in data["rows"] if r["op"] == "fast_sample" and r["size"] == size}
    measured = {
        "time": Timing(rows["portable"]["graph_us"], 1.0),
        "drawn_noise": DrawnNoise(Timing(30.0, 1.0), 0),
    }
    set_ceiling("fast_sample", "bandwidth", list(rows.values()), measured, data)
    text = section(data, "run.json")
    triton = rows["triton"]
    assert "x_ceiling" in text.split("\n| op |")[1].split("\n")[0]
    assert f"bs=512: {triton['speedup_vs_portable']}x (at most {triton['x_ceiling']}x)" in text
    # the bytes at the copy bandwidth, as a share of the least device time
    seconds = triton["bytes"] / (data["copy_bandwidth_gbs"] * 1e9)
    assert (
        f"bs=512: {triton['pct_copy_bw']}% (at most {100 * seconds * 1e6 / triton['least_device_us']:.1f}%)"
        in text
    )


@pytest.mark.parametrize(("pct", "missed"), [(59.0, True), (61.0, False)])
def test_the_vocabulary_ops_bandwidth_target_is_sixty_percent(pct, missed):
    rows = [
        {
            "op": "top_k_renorm_prob",
            "provider": "triton",
            "size": "vocab=131072 bs=512",
            "class": "bandwidth",
            "bytes": 1 << 30,
            "pct_copy_bw": pct,
        }
    ]
    lines = missed_targets({"launch_floor_us": 1.0, "rows": rows})
    assert lines == (["- top_k_renorm_prob, bandwidth >= 60%: vocab=131072 bs=512: 59.0%"] if missed else [])


def test_cpu_run_measures_every_provider_against_portable():
    data = run("cpu", {"assign_extend_cache_locs", "verify_tree_greedy"}, "quick")
    rows = [r for r in data["rows"] if r["provider"] != "naive-loop"]
    assert {r["op"] for r in rows} == {"assign_extend_cache_locs", "verify_tree_greedy"}
    for row in rows:
        assert row["time_us"] > 0 and row["bytes"] > 0
        if row["provider"] == "portable":
            assert row["speedup_vs_portable"] == 1.0
    assert any(r["provider"] == "cpu" for r in rows)  # assign_extend_cache_locs has a CPU provider
    assert data["dispatch"]["dispatch_overhead_us"] < data["dispatch"]["public_us"]


# --------------------------------------------------------------------------------------------------
# --sweep: which launch configurations and ops it times (the timing itself needs an accelerator)


@dataclasses.dataclass(frozen=True)
class _Config:  # stands in for kernels.triton.config.LaunchConfig (which needs Triton to import)
    name: str
    num_warps: int = 4
    copy_num_warps: int = 4
    copy_block_bytes: int = 8192
    row_programs: int = 256
    vocab_block_bytes: int = 32768
    vocab_num_warps: int = 16


def test_sweep_candidates_cross_tile_sizes_with_warp_counts():
    from spec_hal.bench.sweep import candidates

    base = _Config("hopper", num_warps=2)
    found = candidates(base, [8, 32], [4, 8])
    assert [c.name for c in found] == ["tile8k-w4", "tile8k-w8", "tile32k-w4", "tile32k-w8"]
    assert [(c.copy_block_bytes, c.copy_num_warps) for c in found] == [
        (8192, 4),
        (8192, 8),
        (32768, 4),
        (32768, 8),
    ]
    # the vocabulary tile is the copy tile's
    assert [(c.vocab_block_bytes, c.vocab_num_warps) for c in found] == [
        (8192, 4),
        (8192, 8),
        (32768, 4),
        (32768, 8),
    ]
    assert all(c.num_warps == 2 and c.row_programs == 256 for c in found)  # only the tiles change


def test_sweep_candidates_cross_row_programs_when_asked():
    from spec_hal.bench.sweep import candidates, row_programs

    found = candidates(_Config("hopper"), [8], [4, 8], [128, 1024])
    assert [c.name for c in found] == [
        "tile8k-w4-rp128",
        "tile8k-w4-rp1024",
        "tile8k-w8-rp128",
        "tile8k-w8-rp1024",
    ]
    assert [(c.copy_num_warps, c.row_programs) for c in found] == [(4, 128), (4, 1024), (8, 128), (8, 1024)]
    assert row_programs(None, {}) is None  # the vendor's own only
    assert row_programs(None, {"SWEEP_ROW_PROGRAMS": "64,512"}) == [64, 512]
    assert row_programs([32], {"SWEEP_ROW_PROGRAMS": "64"}) == [32]
    with pytest.raises(SpecHalError, match="SWEEP_ROW_PROGRAMS='0'"):
        row_programs(None, {"SWEEP_ROW_PROGRAMS": "0"})


def test_sweep_counts_come_from_the_option_then_the_environment_then_the_defaults():
    from spec_hal.bench.sweep import parse_counts, tile_kib, warp_counts

    assert tile_kib(None, {}) == [8, 16, 32] and warp_counts(None, {}) == [4, 8, 16]
    environ = {"SWEEP_KIB": "4,128", "SWEEP_WARPS": "16"}
    assert tile_kib(None, environ) == [4, 128] and warp_counts(None, environ) == [16]
    assert tile_kib([2], environ) == [2] and warp_counts([1], environ) == [1]
    assert parse_counts(" 8, 16,,8 ") == [8, 16]
    for bad in ("0", "-4", "x", ",", ""):
        with pytest.raises(ValueError):
            parse_counts(bad)
    with pytest.raises(SpecHalError, match="SWEEP_WARPS='4,x'"):
        warp_counts(None, {"SWEEP_WARPS": "4,x"})


def test_sweep_ops_are_the_launchers_walking_a_vendor_tile():
    pytest.importorskip("triton")
    from spec_hal.bench import bench_facts, builders
    from spec_hal.bench.sweep import sizes_of, sweep_ops, tiles
    from spec_hal.kernels.triton.family import LAUNCHERS

    swept = tiles()
    assert swept == {launcher.op: launcher.tile for launcher in LAUNCHERS if launcher.tile}
    assert {
        "move_kv_cache",
        "scatter_mamba_states_after_mtp_verify",
        "fast_topk",
        "top_p_renorm_prob",
    } <= set(swept)
    assert sweep_ops(None) == list(swept)
    assert sweep_ops({"scatter_mamba_states_after_mtp_verify", "move_kv_cache"}) == [
        op for op in swept if op in ("scatter_mamba_states_after_mtp_verify", "move_kv_cache")
    ]
    with pytest.raises(SpecHalError, match="cannot time fill_bonus_tokens"):
        sweep_ops({"fill_bonus_tokens", "move_kv_cache"})
    known = builders()
    for op, tile in swept.items():
        assert op in known, f"no inputs to sweep {op} with"
        large = list(map(dict, bench_facts(op).large_sizes)) or [{"bs": 64}, {"bs": 512}]
        swept_sizes = sizes_of(op)
        assert swept_sizes[-len(large) :] == large
        at_typical_vocabulary = [s["bs"] for s in swept_sizes if s.get("vocab", 32768) == 32768]
        assert len(set(at_typical_vocabulary)) == len(at_typical_vocabulary), op  # no size twice
        if tile == "vocabulary":
            assert {1, 64, 512} <= set(at_typical_vocabulary), op
    # an op walking the vocabulary sweeps its large sizes, batches its rows alone do not fill the
    # device at, and one past the walks' copy_tile_programs
    fast_topk_large = list(map(dict, bench_facts("fast_topk").large_sizes))
    assert sizes_of("fast_topk") == [{"bs": 1}, {"bs": 64}, {"bs": 512}, *fast_topk_large]
    assert sizes_of("chain_speculative_sampling")[:2] == [{"bs": 1}, {"bs": 512}]  # its bs 64 is a large size


def test_without_triton_the_sweep_says_so(monkeypatch):
    import builtins

    from spec_hal.bench import sweep

    real_import = builtins.__import__

    def no_triton(name, *args, **kwargs):
        if (
            name.startswith("triton")
            or "kernels.triton" in name
            or (args[2:3] and "kernels.triton" in str(args))
        ):
            raise ModuleNotFoundError("No module named 'triton'", name="triton")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_triton)
    with pytest.raises(SpecHalError, match="Triton is not installed"):
        sweep.sweep_ops(None)


def test_sweep_refuses_the_cpu():
    from spec_hal.bench import sweep

    with pytest.raises(SpecHalError, match="on an accelerator"):
        sweep.run("cpu", ["move_kv_cache"])


def test_host_profile_of_a_public_call():
    from spec_hal.bench import host_profile

    (entry,) = host_profile.run("cpu", {"assign_extend_cache_locs"}, bs=8, calls=20)
    assert entry["op"] == "assign_extend_cache_locs" and "bs=8" in entry["size"]
    assert entry["per_call_us"] > 0 and 0 < len(entry["top"]) <= 14
    assert {"function", "calls", "own_us_per_call", "cumulative_us_per_call"} <= set(entry["top"][0])
    assert "tottime" in entry["text"]


# --------------------------------------------------------------------------------------------------
# What the bench prints and draws


def _data(rows, **more):
    base = {
        "device": "cpu",
        "device_name": "test cpu",
        "date": "today",
        "commit": None,
        "versions": {"torch": "2.x", "triton": None},
        "dispatch": {"public_us": 3.0, "validation_us": 1.0, "dispatch_overhead_us": 0.5, "direct_us": 1.5},
        "rows": rows,
    }
    return base | more


def _timed(op, provider, size, time_us, spread_us=1.0):
    return {"op": op, "provider": provider, "size": size, "time_us": time_us, "spread_us": spread_us}


def test_header_says_unknown_for_a_run_outside_a_git_checkout():
    import io

    from spec_hal.bench import print_table

    out = io.StringIO()
    print_table(_data([_timed("fast_topk", "portable", "bs=1", 10.0)]), out)
    assert "commit unknown," in out.getvalue() and "commit None" not in out.getvalue()


def test_the_dispatch_line_gives_the_median_over_the_triton_rows_then_the_single_op_split():
    from spec_hal.bench.report import dispatch_line

    triton = [
        _timed("fast_topk", "triton", f"bs={b}", 10.0) | {"host_dispatch_us": d}
        for b, d in ((1, 0.4), (8, 9.0), (64, 0.6))
    ]
    line = dispatch_line(_data([_timed("fast_topk", "portable", "bs=1", 10.0), *triton]), "us")
    assert line.startswith(
        "dispatch overhead: median 0.60 us over 3 Triton rows (target < 1); fast_topk alone:"
    )
    assert line.endswith("public call 3.00 us = validation 1.00 + dispatch 0.50 + provider 1.50")
    assert "median" not in dispatch_line(_data([_timed("fast_topk", "portable", "bs=1", 10.0)]), "us")


def test_a_noisy_run_is_flagged():
    import io

    from spec_hal.bench import NOISY_SPREAD, median_relative_spread, noise_warning, print_table

    quiet = [_timed("fast_topk", "portable", f"bs={b}", 10.0, 1.0) for b in (1, 64, 256)]
    noisy = [_timed("fast_topk", "portable", f"bs={b}", 10.0, 6.0) for b in (1, 64, 256)]
    assert median_relative_spread(quiet) == 0.1 < NOISY_SPREAD < median_relative_spread(noisy) == 0.6
    assert noise_warning({"median_relative_spread": 0.1}) is None
    out = io.StringIO()
    print_table(_data(noisy, median_relative_spread=0.6), out)
    assert "warning: noisy timings (median spread 60% of the median time" in out.getvalue()


def test_a_portable_row_spread_past_its_median_is_flagged_by_name():
    import io

    from spec_hal.bench import noise_warning, print_table

    rows = [_timed("fast_topk", "portable", f"bs={b}", 10.0, 1.0) for b in (1, 64, 256)]
    rows[1] = _timed("fast_topk", "portable", "bs=64", 10.0, 12.0)
    rows.append(_timed("fast_topk", "triton", "bs=1", 10.0, 30.0))  # not portable: not named
    out = io.StringIO()
    print_table(_data(rows, median_relative_spread=0.1), out)
    (line,) = [line for line in out.getvalue().splitlines() if line.startswith("warning:")]
    assert line.startswith("warning: 1 portable row(s) spread more than their median time (fast_topk bs=64)")
    assert noise_warning(_data(rows[:1], median_relative_spread=0.1)) is None


def test_a_run_records_its_schema_version_and_spread():
    data = run("cpu", {"fill_bonus_tokens"}, "quick")
    assert data["schema_version"] == 1
    assert data["median_relative_spread"] is not None and data["median_relative_spread"] >= 0


def test_plot_gives_each_provider_one_colour_and_keeps_the_title_clear():
    pytest.importorskip("matplotlib")
    from spec_hal.bench.report import figure

    rows = []
    for index in range(34):  # as many panels as a full run: nine rows of them under the title
        providers = ("cpu", "portable") if index == 2 else ("portable", "cpu", "naive-loop")
        rows += [_timed(f"op_{index:02d}", p, f"bs={b}", 10.0 * b) for p in providers for b in (1, 64)]
    rows += [_timed("op_00", "cpu", f"bs={b} num_layers=60", 20.0 * b) for b in (64, 512)]
    drawn = figure(_data(rows))
    colours: dict[str, set] = {}
    for axis in drawn.axes:
        for line in axis.get_lines():
            provider = line.get_label().split()[0]
            colours.setdefault(provider, set()).add(line.get_color())
    assert set(colours) == {"portable", "cpu", "naive-loop"}
    assert all(len(found) == 1 for found in colours.values()), colours
    assert len({next(iter(found)) for found in colours.values()}) == 3
    drawn.canvas.draw()
    renderer = drawn.canvas.get_renderer()
    title = drawn._suptitle.get_window_extent(renderer)
    assert "commit unknown" in drawn._suptitle.get_text()
    for axis in drawn.axes:
        if axis.get_visible() and axis.axison:
            assert axis.get_tightbbox(renderer).y1 <= title.y0


def test_missed_targets_include_an_intended_portable_provider_and_skip_an_unbound_one():
    def row(op, provider, intended):
        return {
            "op": op,
            "provider": provider,
            "intended": intended,
            "size": "bs=64",
            "class": "bandwidth",
            "bytes": 1 << 30,
            "pct_copy_bw": 10.0,
        }

    data = {
        "launch_floor_us": 1.0,
        "rows": [row("fast_topk", "portable", "portable"), row("move_kv_cache", "portable", "triton")],
    }
    missed = missed_targets(data)
    assert any(line.startswith("- fast_topk, bandwidth") for line in missed)
    assert not any("move_kv_cache" in line for line in missed)


def test_the_rendered_header_says_how_the_launch_reference_was_taken():
    from spec_hal.bench.report import section

    with open(
        Path(__file__).resolve().parents[1] / "docs/bench/history/h200-506c2e3.json", encoding="utf-8"
    ) as handle:
        data = json.load(handle)
    samples = data["launch_host_samples_us"]
    text = section(data, "run.json")
    assert f"median of {len(samples)} timings across the run" in text
    assert f"the first, at the start, {samples[0]:.2f} µs" in text
    del data["launch_host_samples_us"]  # runs before the reference was timed again say nothing more
    assert "timings across the run" not in section(data, "run.json")


def _host_row(op: str, over: float, launches: int, launcher: float) -> dict:
    return {
        "op": op,
        "provider": "triton",
        "size": "bs=64",
        "host_over_launch_us": over,
        "host_launches": launches,
        "host_launcher_us": launcher,
    }


def test_the_host_target_allows_three_microseconds_per_launch_to_the_triton_rows_alone():
    data = {
        "launch_floor_us": 1.0,
        "rows": [
            _host_row("one_launch", 3.5, 1, 4.0),
            _host_row("two_launches", 5.5, 2, 8.0),
            _host_row("twelve_launches", 30.0, 12, 50.0),
            _host_row("at_the_allowance", 6.0, 2, 8.0),
            {"op": "portable_op", "provider": "portable", "size": "bs=64", "host_over_launch_us": 99.0},
            # A run from before the breakdown: no launch count, so one launch's allowance.
            {"op": "older_run", "provider": "triton", "size": "bs=64", "host_over_launch_us": 3.5},
        ],
    }
    missed = [line for line in missed_targets(data) if ", host:" in line]
    assert missed == [
        "- older_run, host: bs=64: +3.5 us (allowed +3)",
        "- one_launch, host: bs=64: +3.5 us (allowed +3)",
    ]


def test_the_host_floor_line_says_what_the_compiled_launcher_alone_leaves_of_the_allowance():
    from spec_hal.bench.report import host_floor_line

    rows = [
        _host_row("one_launch", 3.5, 1, 4.0),
        _host_row("two_launches", 5.5, 2, 9.0),
        _host_row("twelve_launches", 48.0, 12, 54.0),
    ]
    line = host_floor_line({"launch_host_us": 10.0, "rows": rows}, "us")
    assert line == (
        "host allowance (+3 us per launch over the empty JIT launch): 1 of 3 Triton rows within; "
        "the compiled launcher alone takes a median 4.50 us per planned launch; rows where it alone "
        "exceeds the row's whole allowed host time: 1 (twelve_launches bs=64)"
    )
    assert host_floor_line({"rows": rows}, "us") is None  # no launch reference in the run
    older = {"op": "older_run", "provider": "triton", "size": "bs=1", "host_over_launch_us": 1.0}
    assert host_floor_line({"launch_host_us": 10.0, "rows": [older]}, "us") is None  # no breakdown
    # An older row counts against its allowance, the launcher's figures come from the others.
    with_older = host_floor_line({"launch_host_us": 10.0, "rows": [*rows, older]}, "us")
    assert (
        with_older is not None
        and "2 of 4 Triton rows within" in with_older
        and "median 4.50 us" in with_older
    )
