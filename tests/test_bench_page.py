"""docs/performance.md as ``spec_hal.bench.page`` renders it: the newest run of each op, its
figures as the run recorded them, the targets counted per op, and the page's one figure."""

from __future__ import annotations

import pytest

from spec_hal.bench.page import (
    Run,
    _configurations,
    family_title,
    in_short,
    newest_runs,
    render_page,
    speedup_figure,
    target_cell,
)


def _row(op, provider, bs, graph_us, *, speedup=None, cls="latency", **more):
    row = {
        "op": op,
        "provider": provider,
        "intended": "triton",
        "class": cls,
        "size": f"bs={bs}",
        "time_us": graph_us + 10,
        "graph_us": graph_us,
        "host_us": 20.0 + bs,
        "bytes": 64,
        "speedup_vs_portable": speedup if speedup is not None else 1.0,
    }
    return row | more


def _run(path, date, rows, device_name="test gpu"):
    data = {
        "device": "cuda",
        "device_name": device_name,
        "date": date,
        "commit": path.rsplit("-", 1)[-1].split(".")[0],
        "versions": {"torch": "2.x", "triton": "3.x"},
        "launch_floor_us": 1.0,
        "launch_host_us": 10.0,
        "copy_bandwidth_gbs": 1000.0,
        "rows": rows,
    }
    return Run(path, data)


def _pair(op, bs, portable_us, triton_us, **more):
    return [
        _row(op, "portable", bs, portable_us),
        _row(op, "triton", bs, triton_us, speedup=round(portable_us / triton_us, 2), **more),
    ]


def test_each_op_comes_from_the_newest_run_that_measured_it():
    older = _run(
        "docs/bench/h200-aaaaaaa.json",
        "2026-01-01T10:00:00+00:00",
        _pair("move_kv_cache", 1, 30.0, 3.0) + _pair("fill_bonus_tokens", 1, 12.0, 2.0),
    )
    newer = _run(
        "docs/bench/h200-bbbbbbb.json", "2026-01-01T11:00:00+00:00", _pair("move_kv_cache", 1, 40.0, 2.0)
    )
    newest = newest_runs([newer, older])
    assert newest == {"move_kv_cache": newer, "fill_bonus_tokens": older}
    page = render_page([older, newer])
    kv = next(line for line in page.splitlines() if line.startswith("| [`move_kv_cache`]"))
    # the newer run's figures, as recorded, and a link to its file (from docs/)
    assert "[bbbbbbb](bench/h200-bbbbbbb.json)" in kv
    assert "| 2.0 | 40.0 | 20.0x |" in kv
    assert "[`h200-aaaaaaa.json`](bench/h200-aaaaaaa.json)" in page  # each run it reads is named
    assert "## kv: KV data movement" in page and "## tree: " in page


def test_in_short_counts_the_kernels_sizes_and_ops_left_to_torch():
    rows = _pair("move_kv_cache", 1, 30.0, 3.0) + _pair("move_kv_cache", 8, 30.0, 40.0)
    rows += [_row("organize_draft_results", "portable", 1, 5.0, intended="portable")]
    run = _run("docs/bench/h200-ddddddd.json", "2026-01-01", rows)
    assert in_short(newest_runs([run])) == (
        "In short: spec_hal serves 1 of these 2 ops with a kernel of its own, faster than torch in "
        "device time at 1 of the 2 sizes measured (0.75x to 10.0x the portable provider); "
        "`organize_draft_results` stays with torch."
    )


def test_runs_of_two_devices_are_refused():
    one = _run("a.json", "2026-01-01", _pair("move_kv_cache", 1, 30.0, 3.0))
    other = _run("b.json", "2026-01-02", _pair("move_kv_cache", 1, 30.0, 3.0), device_name="other gpu")
    with pytest.raises(ValueError, match="several devices"):
        newest_runs([one, other])


def test_a_targets_cell_counts_the_sizes_and_gives_the_lowest_and_highest_missed():
    data = {"launch_floor_us": 1.0, "rows": []}
    rows = [
        _row("fill_bonus_tokens", "triton", bs, 2.0, speedup=3.0, x_floor=x_floor)
        for bs, x_floor in ((1, 1.2), (8, 1.7), (64, 2.4))
    ]
    assert target_cell(rows, data) == (
        "latency: **missed 2/3** (1.7x to 2.4x); faster than portable: met 3/3"
    )
    assert target_cell(rows[:1], data) == "latency: met 1/1; faster than portable: met 1/1"


def test_a_family_title_is_its_module_docstring_without_the_letter():
    assert family_title("kv") == "KV data movement"


def test_configurations_beyond_the_batch_are_lines_of_their_own():
    rows = [
        {"size": f"topk=4 vocab={vocab} bs={bs}", "speedup_vs_portable": float(bs)}
        for vocab, batches in ((32768, (1, 64)), (131072, (64, 512)))
        for bs in batches
    ]
    assert _configurations(rows) == {
        "vocab 32k": [(1, 1.0), (64, 64.0)],
        "vocab 128k": [(64, 64.0), (512, 512.0)],
    }
    large = [
        {"size": "bs=1", "speedup_vs_portable": 2.0},
        {"size": "bs=8 num_layers=60", "speedup_vs_portable": 3.0},
    ]
    assert _configurations(large) == {"": [(1, 2.0)], "large": [(8, 3.0)]}


def test_the_figure_has_a_panel_per_family_and_leaves_out_ops_served_by_torch():
    pytest.importorskip("matplotlib")
    served_by_torch = [
        _row("organize_draft_results", "portable", bs, 5.0, intended="portable") for bs in (1, 8)
    ]
    rows = [row for bs in (1, 8) for row in _pair("move_kv_cache", bs, 30.0, 3.0)]
    rows += [row for bs in (1, 8) for row in _pair("fill_bonus_tokens", bs, 12.0, 2.0)]
    drawn = speedup_figure([_run("docs/bench/h200-ccccccc.json", "2026-01-01", rows + served_by_torch)])
    titled = [axis for axis in drawn.axes if axis.get_title()]
    assert [axis.get_title() for axis in titled] == ["kv: x portable", "tree: x portable"]
    labels = {line.get_label() for axis in titled for line in axis.get_lines()}
    assert "fill_bonus_tokens" in labels and "organize_draft_results" not in labels
