"""Bench JSON read for people: the targets and how each row stands against them, and a run's full
tables and plot (nobody edits figures by hand). ``python -m spec_hal.bench.page`` writes
docs/performance.md from them, and with ``--full`` a run's full tables.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass
from typing import Any

from ..conformance.runner import bench_facts, builders

COLUMNS = [
    "op",
    "provider",
    "size",
    "time_us",
    "spread_us",
    "speedup_vs_portable",
    "x_ceiling",
    "graph_us",
    "x_floor",
    "x_grid_floor",
    "host_us",
    "host_over_launch_us",
    # where a Triton row's host time goes (spec_hal/bench/host.py)
    "host_validation_us",
    "host_dispatch_us",
    "host_glue_us",
    "host_binder_us",
    "host_launcher_us",
    "pct_copy_bw",
    "note",
]


#: Size keys every row of an op shares (not worth a legend entry).
TYPICAL_KEYS = {"topk", "num_steps", "page_size", "vocab"}


def plot(data: dict[str, Any], path: str) -> None:
    """Write :func:`figure` as a PNG."""
    import matplotlib.pyplot as plt

    drawn = figure(data)
    drawn.savefig(path, dpi=80)
    plt.close(drawn)


#: Line styles of one provider's lines in one panel (its non-batch configurations: large sizes).
LINE_STYLES = ("-", "--", ":", "-.")


def figure(data: dict[str, Any]) -> Any:
    """Time against batch size per op, one panel per op: one line per provider (and non-batch
    configuration), each provider in one colour across all panels, the launch floor drawn in."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = sorted({row["op"] for row in data["rows"]})
    providers = sorted({row["provider"] for row in data["rows"]})
    colours = {provider: f"C{index % 10}" for index, provider in enumerate(providers)}
    cols = 4
    rows = max(1, -(-len(ops) // cols))
    # constrained layout keeps the title clear of the first row of panels
    drawn, axes = plt.subplots(
        rows, cols, figsize=(4 * cols, 3 * rows + 0.5), squeeze=False, layout="constrained"
    )
    for axis, op in zip(axes.flat, ops, strict=False):
        by_provider: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for row in data["rows"]:
            match = re.search(r"bs=(\d+)", row["size"])
            if row["op"] == op and match:
                # one line per provider and non-batch configuration (the large sizes are lines of their own)
                extra = [p for p in row["size"].split() if p.split("=")[0] not in TYPICAL_KEYS | {"bs"}]
                key = (row["provider"], " ".join(extra))
                by_provider.setdefault(key, []).append(
                    (int(match.group(1)), row.get("graph_us") or row["time_us"])
                )
        styles: dict[str, int] = {}
        for (provider, configuration), points in sorted(by_provider.items()):
            points.sort()
            style = LINE_STYLES[styles.setdefault(provider, 0) % len(LINE_STYLES)]
            styles[provider] += 1
            axis.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker="o",
                color=colours[provider],
                linestyle=style,
                label=f"{provider} {configuration}".strip(),
            )
        if data.get("launch_floor_us"):
            axis.axhline(data["launch_floor_us"], color="grey", linestyle="--", label="launch floor")
        axis.set_title(op, fontsize=8)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("bs", fontsize=7)
        axis.set_ylabel("us", fontsize=7)
        axis.legend(fontsize=6)
    for axis in list(axes.flat)[len(ops) :]:
        axis.axis("off")
    drawn.suptitle(
        f"spec-hal bench: {data['device']} ({data['device_name']}), commit {data['commit'] or 'unknown'}"
    )
    return drawn


def markdown_table(data: dict[str, Any]) -> str:
    present = [c for c in COLUMNS if any(c in row for row in data["rows"])]
    lines = ["| " + " | ".join(present) + " |", "|" + "---|" * len(present)]
    for row in data["rows"]:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in present) + " |")
    return "\n".join(lines)


def with_device_speedups(data: dict[str, Any]) -> dict[str, Any]:
    """Speed-ups over the portable provider from device (graph) time where measured, so that an
    accelerator run's ratio is not the ratio of two host-bound eager timings."""
    portable = {
        (r["op"], r["size"]): r.get("graph_us") or r["time_us"]
        for r in data["rows"]
        if r["provider"] == "portable"
    }
    for row in data["rows"]:
        base = portable.get((row["op"], row["size"]))
        if base and row["provider"] != "naive-loop":
            row["speedup_vs_portable"] = round(base / (row.get("graph_us") or row["time_us"]), 2)
    return data


def _launch_samples_note(data: dict[str, Any]) -> str:
    """How the run's launch reference was taken, where it was timed more than once."""
    samples = data.get("launch_host_samples_us") or []
    if len(samples) < 2:
        return ""
    return (
        f" (median of {len(samples)} timings across the run, {min(samples):.2f}-{max(samples):.2f} µs; "
        f"the first, at the start, {samples[0]:.2f} µs)"
    )


def dispatch_line(data: dict[str, Any], unit: str, op: str = "fast_topk") -> str:
    """The dispatch layer's cost (the lookup and call of the bound provider): its median over the
    Triton rows' host breakdowns where the run has them (a difference of two medians per row, less
    noisy than one op's), then the single-op split of ``fast_topk`` (named ``op`` in the line)."""
    d = data["dispatch"]
    layers = [row["host_dispatch_us"] for row in data["rows"] if "host_dispatch_us" in row]
    median = (
        f"median {statistics.median(layers):.2f} {unit} over {len(layers)} Triton rows (target < 1); "
        if layers
        else ""
    )
    return (
        f"dispatch overhead: {median}{op} alone: public call {d['public_us']:.2f} {unit} = validation "
        f"{d['validation_us']:.2f} + dispatch {d['dispatch_overhead_us']:.2f} + provider {d['direct_us']:.2f}"
    )


def section(data: dict[str, Any], source: str) -> str:
    data = with_device_speedups(data)
    versions = data["versions"]
    head = [
        f"## {data['device']}: {data['device_name']}",
        "",
        f"{data['date']}, commit `{data['commit'] or 'unknown'}`, torch {versions['torch']}, triton {versions['triton']}, "
        f"sizes `{data['sizes']}`; from `{source}`.",
        "",
    ]
    if data.get("launch_floor_us") is not None:
        head.append(
            f"- Launch floor (empty Triton kernel): {data['launch_floor_us']:.2f} µs device time in a graph replay, "
            f"{data.get('launch_host_us') or float('nan'):.2f} µs host time per eager launch"
            + _launch_samples_note(data)
            + (
                f" ({data['launch_host_compiled_us']:.2f} µs through the Triton family's own launch path)"
                if data.get("launch_host_compiled_us")
                else ""
            )
        )
    if data.get("copy_bandwidth_gbs"):
        head.append(f"- Device-to-device copy bandwidth: {data['copy_bandwidth_gbs']:.0f} GB/s")
    head.append("- " + dispatch_line(data, "µs", "`spec_hal.ops.fast_topk`"))
    floor = host_floor_line(data, "µs")
    if floor:
        head.append("- " + floor)
    naive = [r for r in data["rows"] if r["provider"] == "naive-loop" and batch_of(r) == NAIVE_TARGET_BS]
    for row in naive:
        ratio = 1 / row["speedup_vs_portable"] if row.get("speedup_vs_portable") else None
        verdict = "meets" if ratio and ratio >= NAIVE_TARGET_X else "MISSES"
        head.append(
            f"- {row['op']} at bs {NAIVE_TARGET_BS}: portable/CPU provider is {ratio:.0f}x faster than a naive per-request loop ({verdict} the {NAIVE_TARGET_X:g}x target)"
            if ratio
            else f"- {row['op']}: no ratio"
        )
    plot_path = source.rsplit(".", 1)[0] + ".png"
    if os.path.exists(plot_path):
        head += ["", f"![{data['device']} timings against batch size]({os.path.relpath(plot_path, 'docs')})"]
    missed = missed_targets(data)
    if missed:
        head += ["", "Targets missed in this run (why: see Findings above):", *missed]
    return "\n".join(head) + "\n\n" + markdown_table(data) + "\n"


#: Times the portable provider's device time (graph replay) a vocabulary pass's providers aim at ...
SPEEDUP_TARGET_X = 5.0
#: ... from this many rows on (fewer rows are latency-bound).
SPEEDUP_TARGET_MIN_BS = 64
#: Bandwidth targets (share of the device-to-device copy bandwidth of the same run): a vocabulary
#: pass's (from :data:`SPEEDUP_TARGET_MIN_BS` rows on), and every other op's unless its builder
#: states its own (``Benched.bandwidth_target``).
VOCABULARY_BANDWIDTH_TARGET = 60.0
BANDWIDTH_TARGET_DEFAULT = 75.0
#: Below this many bytes a "bandwidth-bound" op is latency-bound in practice: no bandwidth target.
BANDWIDTH_BOUND_BYTES = 16 << 20
LATENCY_TARGET_X_FLOOR = 1.5
#: Times faster than a naive per-request loop the portable (or CPU) provider aims to be, at this batch.
NAIVE_TARGET_X = 10.0
NAIVE_TARGET_BS = 256
HOST_TARGET_OVER_LAUNCH_US = 3.0


def is_vocabulary_pass(op: str) -> bool:
    """Whether ``op`` passes over whole vocabulary rows (the sampling path; its builder says so)."""
    return bench_facts(op).vocabulary_pass


def bandwidth_target(op: str) -> float:
    """The share of the copy bandwidth (%) ``op`` aims at: its builder's own, a vocabulary pass's,
    else :data:`BANDWIDTH_TARGET_DEFAULT`."""
    facts = bench_facts(op)
    if facts.bandwidth_target is not None:
        return facts.bandwidth_target
    return VOCABULARY_BANDWIDTH_TARGET if facts.vocabulary_pass else BANDWIDTH_TARGET_DEFAULT


def bandwidth_targets() -> dict[str, float]:
    """Every op whose bandwidth target is not the default, with its target (builder order)."""
    found = {op: bandwidth_target(op) for op in builders()}
    return {op: share for op, share in found.items() if share != BANDWIDTH_TARGET_DEFAULT}


def host_allowance_us(row: dict[str, Any]) -> float:
    """The host target's allowance of a row over the run's empty Triton JIT launch: 3 µs for its
    first launch and 3 µs for each further one (runs before the breakdown recorded no launch count:
    one launch)."""
    return HOST_TARGET_OVER_LAUNCH_US * max(1, row.get("host_launches") or 1)


def _has_speedup_target(row: dict[str, Any]) -> bool:
    """Whether the speed-up target applies to ``row``: a vocabulary op's non-portable row of at
    least :data:`SPEEDUP_TARGET_MIN_BS` rows with a speed-up over the portable provider."""
    batch = batch_of(row)
    return (
        is_vocabulary_pass(row["op"])
        and row["provider"] != "portable"
        and batch is not None
        and batch >= SPEEDUP_TARGET_MIN_BS
        and row.get("speedup_vs_portable") is not None
    )


def _has_host_target(row: dict[str, Any]) -> bool:
    """Whether the host target applies to ``row``: a Triton row timed against the run's empty launch."""
    return row.get("provider") == "triton" and "host_over_launch_us" in row


def host_floor_line(data: dict[str, Any], unit: str) -> str | None:
    """How the Triton rows stand against their host allowances, and what the compiled launcher
    alone (the last layer, Triton's own C entry point, past every Python layer) leaves of them: its
    median cost per planned launch, against the 3 µs each further launch is allowed, and the rows
    where it alone takes more than the row's whole host time is allowed. None without a breakdown."""
    launch = data.get("launch_host_us")
    rows = [row for row in data["rows"] if _has_host_target(row)]
    broken_down = [row for row in rows if row.get("host_launches") and "host_launcher_us" in row]
    if launch is None or not broken_down:
        return None
    within = sum(row["host_over_launch_us"] <= host_allowance_us(row) for row in rows)
    per_launch = statistics.median(row["host_launcher_us"] / row["host_launches"] for row in broken_down)
    beyond = [
        f"{row['op']} {row['size']}"
        for row in broken_down
        if row["host_launcher_us"] > launch + host_allowance_us(row)
    ]
    return (
        f"host allowance (+{HOST_TARGET_OVER_LAUNCH_US:g} {unit} per launch over the empty JIT launch): "
        f"{within} of {len(rows)} Triton rows within; the compiled launcher alone takes a median "
        f"{per_launch:.2f} {unit} per planned launch; rows where it alone exceeds the row's whole "
        f"allowed host time: {len(beyond)}" + (f" ({'; '.join(beyond)})" if beyond else "")
    )


@dataclass(frozen=True)
class Verdict:
    """How one row stands against one target: ``shown`` is its reading (``2.0x``, ``59.0%``,
    ``+3.5 us``), ``value`` the number behind it, ``limit`` what the target allows or the most any
    provider could reach where the run measured that (``(at most 3.9x)``, ``(allowed +3)``)."""

    target: str
    met: bool
    value: float
    shown: str
    limit: str = ""


def batch_of(row: dict[str, Any]) -> int | None:
    """The batch of ``row``'s size (its ``bs=``), None without one."""
    match = re.search(r"\bbs=(\d+)", row["size"])
    return int(match.group(1)) if match else None


def verdicts(row: dict[str, Any], data: dict[str, Any]) -> list[Verdict]:
    """Every target that applies to ``row`` of an accelerator run (none on a run without a launch
    floor), met or not."""
    if not data.get("launch_floor_us"):
        return []
    found = []
    if row.get("class") == "latency":
        # Against empty kernels launched like the op's own launches where the run measured them.
        x_floor = row.get("x_grid_floor", row.get("x_floor", 0))
        found.append(Verdict("latency", x_floor <= LATENCY_TARGET_X_FLOOR, x_floor, f"{x_floor}x"))
    share = bandwidth_target(row["op"])
    bandwidth_bound = row.get("class") == "bandwidth" and row.get("bytes", 0) >= BANDWIDTH_BOUND_BYTES
    if bandwidth_bound and row.get("pct_copy_bw") is not None:
        limit = ""
        if "drawn_noise_us" in row:  # the op's bytes at the copy bandwidth, of its least device time
            at_most = 100 * row["bytes"] / (data["copy_bandwidth_gbs"] * 1e3) / row["least_device_us"]
            limit = f" (at most {at_most:.1f}%)"
        pct = row["pct_copy_bw"]
        found.append(Verdict(f"bandwidth >= {share:.0f}%", pct >= share, pct, f"{pct}%", limit))
    if _has_host_target(row):
        over, allowed = row["host_over_launch_us"], host_allowance_us(row)
        found.append(Verdict("host", over <= allowed, over, f"+{over} us", f" (allowed +{allowed:g})"))
    if _has_speedup_target(row):
        # The most any provider could reach in this run, where the run measured it.
        speedup = row["speedup_vs_portable"]
        limit = f" (at most {row['x_ceiling']}x)" if "x_ceiling" in row else ""
        met = speedup >= SPEEDUP_TARGET_X
        found.append(Verdict(f"{SPEEDUP_TARGET_X:g}x portable", met, speedup, f"{speedup}x", limit))
    if row["provider"] != "portable" and row.get("speedup_vs_portable") is not None:
        speedup = row["speedup_vs_portable"]
        found.append(Verdict("faster than portable", speedup >= 1, speedup, f"{speedup}x"))
    return found


def is_bound(row: dict[str, Any]) -> bool:
    """Whether the run's vendor serves ``row``'s op with ``row``'s provider: every non-portable
    provider, and the portable one where the vendor intends it (never the naive loop)."""
    unbound_portable = row["provider"] == "portable" and row.get("intended", "portable") != "portable"
    return not unbound_portable and row["provider"] != "naive-loop"


def missed_targets(data: dict[str, Any]) -> list[str]:
    """One line per (op, target) missed by the bound providers of an accelerator run."""
    lines: dict[tuple[str, str], list[str]] = {}
    for row in filter(is_bound, data["rows"]):
        for verdict in verdicts(row, data):
            if not verdict.met:
                lines.setdefault((row["op"], verdict.target), []).append(
                    f"{row['size']}: {verdict.shown}{verdict.limit}"
                )
    return [
        f"- {op}, {target}: " + "; ".join(sizes[:3]) + ("; ..." if len(sizes) > 3 else "")
        for (op, target), sizes in sorted(lines.items())
    ]


#: What each column of ``--full`` means.
FULL_GLOSSARY = """\
Every figure is a run's measurement, and ratios are against the same run.
`time_us` is the median (CPU: wall time; accelerators: events around eager calls, so host-bound
when the op is small), `spread_us` the interquartile range, `graph_us` the device time per call
replayed from a captured graph, `x_floor` that over the empty-kernel floor (one program),
`x_grid_floor` that over empty kernels launched with the row's own grids and warps (Triton rows
of runs that record `grid_floor_us`; the latency target reads it where present), `host_us` the eager
host time per call and `host_over_launch_us` its excess over an empty Triton launch,
`host_validation_us` .. `host_launcher_us` where a Triton row's host time goes (the contract's
checks, the binding lookup, the provider's Python, the argument binding and the compiled launcher),
`speedup_vs_portable` the portable provider's time over this row's (graph time where measured),
`x_ceiling` the most any provider could reach: the portable provider's device time over the least
any provider can take in that run (an empty kernel's, plus the op's bytes at the copy bandwidth, plus
the noise a sampling op's public call draws from the caller's generator and the provider's read of
it); a missed target's 'at most' says the same of the row's speed-up or bandwidth share.
"""


def render_full(paths: list[str]) -> str:
    """Every row and column of each run, run by run (what the page summarises)."""
    parts = ["# Bench runs in full", "", FULL_GLOSSARY]
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            parts.append(section(json.load(handle), path))
    return "\n".join(parts)
