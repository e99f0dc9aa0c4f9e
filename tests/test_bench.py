"""``spec-hal bench``: the bytes each op moves (the bandwidth column) and how a row is derived."""

from __future__ import annotations

import torch

from spec_hal.bench import Timing, _row, bytes_moved, run
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


def test_draft_kv_indices_follow_the_ops_formula():
    seq_lens = torch.tensor([5, 0, 7])
    kwargs = {"seq_lens": seq_lens, "topk": 2, "num_steps": 3}
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
