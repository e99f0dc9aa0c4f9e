"""docs/performance.md: what each op costs on one device against the portable provider, from the
newest run of each op among the bench runs given: the runs it reads, what is measured, the targets
met and missed, one figure and a table per op family, every figure a run's own or the lowest and
highest of a run's over an op's sizes.

python -m spec_hal.bench.page --plot docs/bench/speedups.png docs/bench/*.json > docs/performance.md
python -m spec_hal.bench.page --full RUN.json ...   # every row and column of each run instead
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

from .report import (
    BANDWIDTH_BOUND_BYTES,
    BANDWIDTH_TARGET_DEFAULT,
    HOST_TARGET_OVER_LAUNCH_US,
    LATENCY_TARGET_X_FLOOR,
    LINE_STYLES,
    NAIVE_TARGET_BS,
    NAIVE_TARGET_X,
    SPEEDUP_TARGET_MIN_BS,
    SPEEDUP_TARGET_X,
    Verdict,
    bandwidth_targets,
    batch_of,
    is_bound,
    is_vocabulary_pass,
    render_full,
    verdicts,
)


@dataclass
class Run:
    """A bench run's JSON and the path it was read from (the page links it)."""

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


def rows_of(op: str, newest: dict[str, Run]) -> list[dict[str, Any]]:
    """``op``'s rows in the newest run that measured it, every provider's."""
    return [row for row in newest[op].data["rows"] if row["op"] == op]


def families(ops: Iterable[str]) -> dict[str, list[str]]:
    """``ops`` by family (the ``spec_hal.ops`` submodule that defines each), the families and their
    ops in the order of ``spec_hal.ops.__all__``; names it does not export under ``other``."""
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
        return "rows of no `spec_hal.ops` family"
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
        rows = rows_of(op, newest)
        provider = bound_provider(rows)
        served = [row for row in rows if row["provider"] == provider]
        portable = [row for row in rows if row["provider"] == "portable"]
        batches = sorted({b for b in map(batch_of, rows) if b is not None})
        family = _family_of(op)
        link = f"[`{op}`](ops/{family}.md#{op})" if family != "other" else f"`{op}`"
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
                    target_cell([row for row in served if is_bound(row)], data) + " |",
                ]
            )
        )
    return lines


def target_summary(newest: dict[str, Run]) -> list[str]:
    """Per target: what it asks, and how many of the page's bound rows (and ops) meet it."""
    targets = bandwidth_targets()
    asks = {
        "latency": f"a latency-bound op's device time at most {LATENCY_TARGET_X_FLOOR:g}x that of empty "
        "Triton kernels launched with the op's own grids",
        **{
            f"bandwidth >= {share:.0f}%": f"a bandwidth-bound op moving {BANDWIDTH_BOUND_BYTES >> 20} MiB "
            f"or more reaches {share:.0f}% of the copy bandwidth ("
            + (
                ", ".join(f"`{op}`" for op, s in targets.items() if s == share)
                if share != BANDWIDTH_TARGET_DEFAULT
                else "the other bandwidth-bound ops"
            )
            + ")"
            for share in sorted({*targets.values(), BANDWIDTH_TARGET_DEFAULT}, reverse=True)
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
        for row in filter(is_bound, rows_of(op, newest)):
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
        row["host_dispatch_us"] for op in newest for row in rows_of(op, newest) if "host_dispatch_us" in row
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
any provider could reach in that run. `python -m spec_hal.bench.page --full FILE` renders every
size and column of a run. Older runs, A/Bs and sweeps: [bench history](bench/history/README.md).
"""


def load_runs(paths: list[str]) -> list[Run]:
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            runs.append(Run(path, json.load(handle)))
    return runs


def in_short(newest: dict[str, Run]) -> str:
    """One paragraph: how many ops have a kernel of their own, how their device time compares with
    the portable provider's, which ops are left to torch, and how often the host target is met."""
    kernel_rows, left_to_torch, host = [], [], []
    for op, run in newest.items():
        rows = rows_of(op, newest)
        provider = bound_provider(rows)
        if provider == "portable":
            left_to_torch.append(op)
            continue
        for row in rows:
            if row["provider"] == provider and row.get("speedup_vs_portable") is not None:
                kernel_rows.append(row["speedup_vs_portable"])
                host += [v.met for v in verdicts(row, run.data) if v.target == "host"]
    if not kernel_rows:
        return "In short: spec_hal serves every op here with the portable provider."
    faster = sum(speedup >= 1 for speedup in kernel_rows)
    kernels = len(newest) - len(left_to_torch)
    text = (
        f"In short: spec_hal serves {kernels} of these {len(newest)} ops with a kernel of its own, faster "
        f"than torch in device time at {faster} of the {len(kernel_rows)} sizes measured "
        f"({min(kernel_rows)}x to {max(kernel_rows)}x the portable provider)"
    )
    if left_to_torch:
        verb = "stays" if len(left_to_torch) == 1 else "stay"
        text += "; " + ", ".join(f"`{op}`" for op in sorted(left_to_torch)) + f" {verb} with torch"
    if host:
        text += f". The eager host time meets its target at {sum(host)} of {len(host)} sizes"
    return text + "."


def render_page(runs: list[Run], plot_path: str | None = None) -> str:
    """The page: the runs it reads, what is measured, the targets, the plot and a table per family."""
    newest = newest_runs(runs)
    used = [run for run in runs if run in newest.values()]
    command = "python -m spec_hal.bench.page " + (f"--plot {plot_path} " if plot_path else "")
    device = used[0].data["device_name"]
    parts = [
        "# Performance",
        "",
        f"What spec_hal's ops cost on the {device} against the portable torch provider: device and "
        "host time, per op family, from the newest run of each op, and the targets they meet or miss.",
        "",
        in_short(newest),
        "",
        f"<!-- Generated by `{command}{' '.join(run.path for run in runs)} > docs/performance.md`: edit "
        "spec_hal/bench/page.py or the runs, not this page. -->",
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
            op_rows = rows_of(op, newest)
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
        if any(is_vocabulary_pass(op) for op in ops):
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
        prog="python -m spec_hal.bench.page", description="render docs/performance.md from bench runs"
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
