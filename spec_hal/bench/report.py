"""Turn bench JSON into docs/performance.md and its plot (nobody edits figures by hand).

python -m spec_hal.bench.report --plot docs/bench/speedups.png docs/bench/*.json > docs/performance.md

renders the page from the newest run of each op among the files given (and, with ``--plot``, its one
figure); ``--full RUN.json ...`` renders instead every row and column of each run, run by run.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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
    naive = [r for r in data["rows"] if r["provider"] == "naive-loop" and _batch(r) == NAIVE_TARGET_BS]
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


#: The ops whose passes run over a whole vocabulary row (the sampling path). From
#: :data:`SPEEDUP_TARGET_MIN_BS` rows on, their target is 60 % of the copy bandwidth and
#: :data:`SPEEDUP_TARGET_X` times the portable provider.
VOCABULARY_OPS = (
    "top_k_renorm_prob",
    "top_p_renorm_prob",
    "fast_topk",
    "fast_sample",
    "renorm_draft_probs",
    "sample_draft_proposal",
)
#: Times the portable provider's device time (graph replay) a vocabulary op's providers aim at ...
SPEEDUP_TARGET_X = 5.0
#: ... from this many rows on (fewer rows are latency-bound).
SPEEDUP_TARGET_MIN_BS = 64
#: Bandwidth targets (share of the device-to-device copy bandwidth of the same run).
BANDWIDTH_TARGET = {"scatter_mamba_states_after_mtp_verify": 90.0, **dict.fromkeys(VOCABULARY_OPS, 60.0)}
BANDWIDTH_TARGET_DEFAULT = 75.0
#: Below this many bytes a "bandwidth-bound" op is latency-bound in practice: no bandwidth target.
BANDWIDTH_BOUND_BYTES = 16 << 20
LATENCY_TARGET_X_FLOOR = 1.5
#: Times faster than a naive per-request loop the portable (or CPU) provider aims to be, at this batch.
NAIVE_TARGET_X = 10.0
NAIVE_TARGET_BS = 256
HOST_TARGET_OVER_LAUNCH_US = 3.0


def host_allowance_us(row: dict[str, Any]) -> float:
    """The host target's allowance of a row over the run's empty Triton JIT launch: 3 µs for its
    first launch and 3 µs for each further one (runs before the breakdown recorded no launch count:
    one launch)."""
    return HOST_TARGET_OVER_LAUNCH_US * max(1, row.get("host_launches") or 1)


def _has_speedup_target(row: dict[str, Any]) -> bool:
    """Whether the speed-up target applies to ``row``: a vocabulary op's non-portable row of at
    least :data:`SPEEDUP_TARGET_MIN_BS` rows with a speed-up over the portable provider."""
    batch = _batch(row)
    return (
        row["op"] in VOCABULARY_OPS
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


def _batch(row: dict[str, Any]) -> int | None:
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
    share = BANDWIDTH_TARGET.get(row["op"], BANDWIDTH_TARGET_DEFAULT)
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


def _bound(row: dict[str, Any]) -> bool:
    """Whether the run's vendor serves ``row``'s op with ``row``'s provider: every non-portable
    provider, and the portable one where the vendor intends it (never the naive loop)."""
    unbound_portable = row["provider"] == "portable" and row.get("intended", "portable") != "portable"
    return not unbound_portable and row["provider"] != "naive-loop"


def missed_targets(data: dict[str, Any]) -> list[str]:
    """One line per (op, target) missed by the bound providers of an accelerator run."""
    lines: dict[tuple[str, str], list[str]] = {}
    for row in filter(_bound, data["rows"]):
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


# --------------------------------------------------------------------------------------------------
# The page: the newest run of each op, by family


@dataclass
class Run:
    path: str
    data: dict[str, Any]


def newest_runs(runs: list[Run]) -> dict[str, Run]:
    """The newest run (by its recorded date) that measured each op, by op name. The runs must be of
    one device: the page compares providers on one device."""
    names = sorted({run.data["device_name"] for run in runs})
    if len(names) > 1:
        raise ValueError(f"runs of several devices ({', '.join(names)}): the page reads one device's")
    newest: dict[str, Run] = {}
    for run in sorted(runs, key=lambda r: r.data["date"]):
        for row in run.data["rows"]:
            newest[row["op"]] = run
    return newest


def families(ops: Iterable[str]) -> dict[str, list[str]]:
    """``ops`` by family (the ``spec_hal.ops`` submodule that defines each), the families and their
    ops in the order of ``spec_hal.ops.__all__``; ops it no longer exports under ``other``."""
    from .. import ops as public_ops

    order = {name: index for index, name in enumerate(public_ops.__all__)}
    grouped: dict[str, list[str]] = {}
    for op in sorted(ops, key=lambda name: (order.get(name, len(order)), name)):
        family = _family_of(op)
        grouped.setdefault(family, []).append(op)
    return grouped


def _family_of(op: str) -> str:
    from .. import ops as public_ops

    module = getattr(getattr(public_ops, op, None), "__module__", "") or ""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["spec_hal", "ops"] and len(parts) > 2 else "other"


def family_title(family: str) -> str:
    """The first line of the family module's docstring, without its letter."""
    import importlib

    try:
        doc = importlib.import_module(f"spec_hal.ops.{family}").__doc__ or ""
    except ImportError:
        return "ops no longer in spec_hal.ops"
    line = doc.strip().splitlines()[0].replace("``", "`").rstrip(" .")
    return re.sub(r"^Family \w+: ", "", line)


def _span(values: list[float], unit: str = "") -> str:
    """The lowest and highest of ``values`` as the run recorded them."""
    if not values:
        return "—"
    low, high = min(values), max(values)
    return f"{low}{unit}" if low == high else f"{low}{unit}–{high}{unit}"


def bound_provider(rows: list[dict[str, Any]]) -> str:
    """The provider the run's vendor serves the op with: the rows' intent where recorded, else the
    non-portable provider measured."""
    intended = {row["intended"] for row in rows if "intended" in row}
    if len(intended) == 1:
        return intended.pop()
    others = sorted({row["provider"] for row in rows} - {"portable", "naive-loop"})
    return others[0] if others else "portable"


def target_cell(rows: list[dict[str, Any]], data: dict[str, Any]) -> str:
    """How the op's bound rows stand against each target that applies to them: ``met n/n`` or
    ``missed m/n`` with the lowest and highest of the missed readings (and limits)."""
    by_target: dict[str, list[Verdict]] = {}
    for row in rows:
        for verdict in verdicts(row, data):
            by_target.setdefault(verdict.target, []).append(verdict)
    cells = []
    for target, found in by_target.items():
        missed = sorted((v for v in found if not v.met), key=lambda v: v.value)
        if not missed:
            cells.append(f"{target}: met {len(found)}/{len(found)}")
            continue
        low, high = (f"{v.shown}{v.limit}" for v in (missed[0], missed[-1]))
        shown = low if low == high else f"{low} to {high}"
        cells.append(f"{target}: **missed {len(missed)}/{len(found)}** ({shown})")
    return "; ".join(cells) or "—"


def _figures(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [row[key] for row in rows if row.get(key) is not None]


def family_table(ops: list[str], newest: dict[str, Run]) -> list[str]:
    lines = [
        "| op | run | bound | batch | device µs | portable device µs | x portable | host µs | portable host µs | targets |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for op in ops:
        data = newest[op].data
        rows = [row for row in data["rows"] if row["op"] == op]
        provider = bound_provider(rows)
        served = [row for row in rows if row["provider"] == provider]
        portable = [row for row in rows if row["provider"] == "portable"]
        batches = sorted({b for b in map(_batch, rows) if b is not None})
        page = _family_of(op)
        link = f"[`{op}`](ops/{page}.md#{op})" if page != "other" else f"`{op}`"
        lines.append(
            " | ".join(
                [
                    f"| {link}",
                    f"[{data['commit'] or 'unknown'}]({_link(newest[op].path)})",
                    provider,
                    f"{batches[0]}–{batches[-1]}" if batches else "—",
                    _span(_figures(served, "graph_us") or _figures(served, "time_us")),
                    _span(_figures(portable, "graph_us") or _figures(portable, "time_us")),
                    _span(_figures(served, "speedup_vs_portable"), "x"),
                    _span(_figures(served, "host_us")),
                    _span(_figures(portable, "host_us")),
                    target_cell([row for row in served if _bound(row)], data) + " |",
                ]
            )
        )
    return lines


def target_summary(newest: dict[str, Run]) -> list[str]:
    """Per target: what it asks, and how many of the page's bound rows (and ops) meet it."""
    asks = {
        "latency": f"a latency-bound op's device time at most {LATENCY_TARGET_X_FLOOR:g}x that of empty "
        "Triton kernels launched with the op's own grids",
        **{
            f"bandwidth >= {share:.0f}%": f"a bandwidth-bound op moving {BANDWIDTH_BOUND_BYTES >> 20} MiB "
            f"or more reaches {share:.0f}% of the copy bandwidth ("
            + (
                ", ".join(f"`{op}`" for op, s in BANDWIDTH_TARGET.items() if s == share)
                if share != BANDWIDTH_TARGET_DEFAULT
                else "the other bandwidth-bound ops"
            )
            + ")"
            for share in sorted({*BANDWIDTH_TARGET.values(), BANDWIDTH_TARGET_DEFAULT}, reverse=True)
        },
        f"{SPEEDUP_TARGET_X:g}x portable": f"the vocabulary ops from {SPEEDUP_TARGET_MIN_BS} rows on: "
        f"{SPEEDUP_TARGET_X:g}x the portable provider's device time",
        "host": f"a Triton row's eager host time at most the empty Triton launch's + "
        f"{HOST_TARGET_OVER_LAUNCH_US:g} µs per launch it makes",
        "faster than portable": "every bound non-portable provider faster than portable in device time",
    }
    tally: dict[str, list[int]] = {target: [0, 0] for target in asks}
    missing: dict[str, set[str]] = {target: set() for target in asks}
    applies: dict[str, set[str]] = {target: set() for target in asks}
    for op, run in newest.items():
        for row in run.data["rows"]:
            if row["op"] != op or not _bound(row):
                continue
            for verdict in verdicts(row, run.data):
                tally[verdict.target][0] += verdict.met
                tally[verdict.target][1] += 1
                applies[verdict.target].add(op)
                if not verdict.met:
                    missing[verdict.target].add(op)
    lines = ["| target | what it asks | rows met | ops meeting it at every size |", "|---|---|---|---|"]
    for target, ask in asks.items():
        met, measured = tally[target]
        if measured:
            ops = len(applies[target])
            lines.append(
                f"| {target} | {ask} | {met} of {measured} | {ops - len(missing[target])} of {ops} |"
            )
    return lines


def _dispatch_summary(newest: dict[str, Run]) -> str | None:
    layers = [
        row["host_dispatch_us"]
        for op, run in newest.items()
        for row in run.data["rows"]
        if row["op"] == op and "host_dispatch_us" in row
    ]
    if not layers:
        return None
    median = statistics.median(layers)
    verdict = "met" if median < 1 else "**missed**"
    return (
        f"- Dispatch (the lookup and call of the bound provider, `host_dispatch_us`): median "
        f"{median:.2f} µs over the {len(layers)} Triton rows above; target under 1 µs: {verdict}."
    )


def _measured(value: float | None, spec: str, unit: str) -> str:
    return "—" if value is None else f"{value:{spec}} {unit}"


def _link(path: str) -> str:
    """``path`` (from the repository root) as a link from docs/, where the page lives."""
    return os.path.relpath(path, "docs")


PAGE_TERMS = """\
## What is measured

`spec-hal bench` calls every op with inputs shaped like a decoding step (the batch is the number of
requests; the sampling ops read a vocabulary of 32k, some sizes 128k; the KV and mamba ops also move
the layers of a large model) through each provider on the same GPU, in the same process:
`portable`, the torch reference that runs on any device, and the provider spec_hal binds on that
device (`triton` here, or `portable` where a kernel does not beat torch).

- **Device time**: GPU time per call, from a CUDA graph of calls replayed (*graph replay*): what the
  op costs inside a captured decoding step, with no Python or launch cost.
- **Host time**: wall time of one eager (uncaptured) call on the CPU: argument checks, dispatch
  and the launch. A small op's eager call costs its host time, whatever its device time.
- **x portable**: the portable provider's device time over the bound provider's, at the same size
  in the same run: 3x is three times faster than torch; 1x where spec_hal serves the op with torch.
- **Empty kernel** and **empty launch**: an empty Triton kernel's device time and its launch's host
  time, the least any kernel costs; **copy bandwidth**: a device-to-device copy's GB/s in the run.

Each op's figures come from the newest run that measured it (the *run* column, linked to its
file); a figure is the run's own, or the lowest and highest over the op's sizes (the *batch*
column). *Bound* is the provider spec_hal serves the op with on this device. A *targets* cell says,
per target that applies to the op, at how many of its sizes the bound provider meets or misses it,
with the lowest and highest reading missed; "allowed" is the target's allowance, "at most" the most
any provider could reach in that run. `python -m spec_hal.bench.report --full FILE` renders every
size and column of a run. Older runs, A/Bs and sweeps: [bench history](bench/history/README.md).
"""


def load_runs(paths: list[str]) -> list[Run]:
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            runs.append(Run(path, json.load(handle)))
    return runs


def render_page(runs: list[Run], plot_path: str | None = None) -> str:
    """The page: the runs it reads, what is measured, the targets, the plot and a table per family."""
    newest = newest_runs(runs)
    used = [run for run in runs if run in newest.values()]
    command = "python -m spec_hal.bench.report " + (f"--plot {plot_path} " if plot_path else "")
    device = used[0].data["device_name"]
    parts = [
        "# Performance",
        "",
        f"What spec_hal's ops cost on the {device} against the portable torch provider: device and "
        "host time, per op family, from the newest run of each op, and the targets they meet or miss.",
        "",
        f"<!-- Generated by `{command}{' '.join(run.path for run in runs)} > docs/performance.md`: edit "
        "spec_hal/bench/report.py or the runs, not this page. -->",
        "",
        "## The runs",
        "",
        "| run file | device | commit | date | torch / Triton | ops | empty kernel (device) | empty launch (host) | copy bandwidth |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in used:
        data, versions = run.data, run.data["versions"]
        taken = sum(1 for r in newest.values() if r is run)
        parts.append(
            f"| [`{os.path.basename(run.path)}`]({_link(run.path)}) | {data['device_name']} | "
            f"`{data['commit'] or 'unknown'}` | {data['date'][:16].replace('T', ' ')} | {versions['torch']} / "
            f"{versions['triton']} | {taken} | {_measured(data.get('launch_floor_us'), '.2f', 'µs')} | "
            f"{_measured(data.get('launch_host_us'), '.2f', 'µs')} | "
            f"{_measured(data.get('copy_bandwidth_gbs'), '.0f', 'GB/s')} |"
        )
    parts += ["", PAGE_TERMS, "## Targets", ""]
    parts += target_summary(newest)
    dispatch = _dispatch_summary(newest)
    parts += ["", *([dispatch] if dispatch else [])]
    if not any(row["provider"] == "naive-loop" for run in used for row in run.data["rows"]):
        parts.append(
            f"- CPU runs also time a per-request Python loop, which the portable provider aims to beat "
            f"{NAIVE_TARGET_X:g}x at a batch of {NAIVE_TARGET_BS} (not measured in these runs)."
        )
    if plot_path:
        parts += [
            "",
            f"![x portable against the batch, per family: {device}]({_link(plot_path)})",
        ]
    grouped = families(newest)
    for family, ops in grouped.items():
        parts += ["", f"## {family}: {family_title(family)}", "", *family_table(ops, newest)]
    return "\n".join(parts) + "\n"


def speedup_figure(runs: list[Run]) -> Any:
    """x portable (device time) against the batch, one panel per family and one line per op (and
    per configuration beyond the batch), from the newest run of each op; the portable provider at
    1x, and the vocabulary ops' target where a panel has one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    newest = newest_runs(runs)
    grouped = families(newest)
    cols = 4
    rows = max(1, -(-len(grouped) // cols))
    drawn, axes = plt.subplots(
        rows, cols, figsize=(4.5 * cols, 5 * rows + 0.5), squeeze=False, layout="constrained"
    )
    for axis, (family, ops) in zip(axes.flat, grouped.items(), strict=False):
        colours = plt.get_cmap("tab20")
        for index, op in enumerate(ops):
            data = newest[op].data
            op_rows = [row for row in data["rows"] if row["op"] == op]
            provider = bound_provider(op_rows)
            if provider == "portable":  # served by torch: 1x, the portable line
                continue
            served = [r for r in op_rows if r["provider"] == provider and r.get("speedup_vs_portable")]
            lines = _configurations(served)
            for style, (configuration, points) in enumerate(lines.items()):
                points.sort()
                axis.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    marker="o",
                    markersize=3,
                    color=colours((2 * index + index // 10) % 20),  # the strong shades first
                    linestyle=LINE_STYLES[style % len(LINE_STYLES)],
                    label=f"{op} {configuration}".strip(),
                )
        axis.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="portable")
        if any(op in VOCABULARY_OPS for op in ops):
            axis.axhline(SPEEDUP_TARGET_X, color="red", linestyle=":", linewidth=1, label="vocabulary target")
        axis.set_title(f"{family}: x portable", fontsize=9)
        axis.set_xscale("log", base=2)
        axis.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        axis.set_yscale("log")
        axis.set_xlabel("batch", fontsize=8)
        axis.legend(fontsize=6, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    for axis in list(axes.flat)[len(grouped) :]:
        axis.axis("off")
    used = sorted({(r.data["commit"], r.data["date"][:10]) for r in newest.values()})
    drawn.suptitle(
        f"spec_hal on {runs[0].data['device_name']} against the portable provider, device time; runs "
        + ", ".join(f"{commit} ({date})" for commit, date in used)
    )
    return drawn


def _configurations(rows: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """(batch, x portable) points by the sizes besides the batch that vary among ``rows``: named by
    their vocabulary where only that varies, else "large" for every configuration but the first."""
    sizes = [dict(part.split("=", 1) for part in row["size"].split() if "=" in part) for row in rows]
    varying = sorted({k for s in sizes for k in s if k != "bs" and len({t.get(k) for t in sizes}) > 1})
    labels: dict[tuple[str | None, ...], str] = {}
    lines: dict[str, list[tuple[int, float]]] = {}
    for row, size in zip(rows, sizes, strict=True):
        if "bs" not in size:
            continue
        key = tuple(size.get(k) for k in varying)
        if key not in labels:
            labels[key] = (
                f"vocab {int(size['vocab']) // 1024}k" if varying == ["vocab"] else "large" if labels else ""
            )
        lines.setdefault(labels[key], []).append((int(size["bs"]), row["speedup_vs_portable"]))
    return lines


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m spec_hal.bench.report", description="render docs/performance.md from bench runs"
    )
    parser.add_argument("--plot", help="also write the page's figure to this PNG (matplotlib)")
    parser.add_argument(
        "--full", action="store_true", help="every row and column of each run instead of the page"
    )
    parser.add_argument("json", nargs="+", help="spec-hal bench --json outputs")
    args = parser.parse_args(argv)
    if args.full:
        sys.stdout.write(render_full(args.json))
        return
    runs = load_runs(args.json)
    if args.plot:
        import matplotlib.pyplot as plt

        drawn = speedup_figure(runs)
        drawn.savefig(args.plot, dpi=80)
        plt.close(drawn)
    sys.stdout.write(render_page(runs, args.plot))


if __name__ == "__main__":
    main()
