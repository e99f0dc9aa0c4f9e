"""``spec-hal bench``: per-op timings against the portable provider, the launch floor and the copy
bandwidth ceiling, all measured in the same run on the same device.

Inputs come from the conformance builders (``spec_hal.conformance.cases.<family>.BUILDERS``), so a
benchmarked call is a conformant call. On the CPU: wall time with warm-up and repeats (median and
spread). On accelerators: device time with events over rotating input sets, graph-replay time, and
eager host time per call; plus an empty Triton kernel (the launch floor), for each Triton row
empty kernels launched with the row's own grids and warps (its grid floor), and a large
device-to-device copy (the bandwidth ceiling), from which each bandwidth-bound row gets the least
device time any provider could take in the run (:func:`set_ceiling`).
"""

from __future__ import annotations

import datetime
import functools
import inspect
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .. import ops as public_ops
from .. import registry, runtime
from .._version import __version__
from ..conformance.case import bench_facts_of
from ..conformance.runner import (
    bench_facts,
    builders,
    device_context,
    device_model,
    tensors_in,
    torch_device_of,
)
from ..ops.sampling.draft import exponential_noise
from ..reporting import git_commit, versions
from ..testing import use_provider
from . import host
from .naive import NAIVE_LOOPS
from .report import COLUMNS, dispatch_line, host_floor_line

#: Version of the layout of :func:`run`'s result (the JSON of ``spec-hal bench --json``): raised when
#: a key changes meaning or goes away.
SCHEMA_VERSION = 1
#: Typical batch sizes; "full" adds more, and the large sizes of bandwidth-bound ops.
QUICK_SIZES = [{"bs": 1}, {"bs": 64}, {"bs": 256}]
FULL_SIZES = [{"bs": b} for b in (1, 8, 64, 256, 512)]
#: The vocabularies at which the bench times an op's keyed draws (``seeds=``: the noise computed in
#: the provider) beside its generator rows, at each batch size of the run.
KEYED_VOCABS = {"quick": (32768,), "full": (32768, 131072)}


@dataclass
class Timing:
    median_us: float
    spread_us: float  # interquartile range


def _timing(samples_s: list[float]) -> Timing:
    samples = sorted(s * 1e6 for s in samples_s)
    quartiles = (
        statistics.quantiles(samples, n=4) if len(samples) >= 4 else [samples[0], samples[0], samples[-1]]
    )
    return Timing(statistics.median(samples), quartiles[2] - quartiles[0])


def time_host(
    fn: Callable[[], Any], *, warmup: int = 3, repeats: int = 20, min_seconds: float = 0.05
) -> Timing:
    """Wall time per call (CPU work, or host time of an asynchronous launch)."""
    return _timing(host.samples(fn, repeats=repeats, warmup=warmup, min_seconds=min_seconds))


def time_device(calls: list[Callable[[], Any]], device: torch.device, *, repeats: int = 50) -> Timing:
    """Device time per call with events, rotating over ``calls`` (distinct input sets)."""
    rt = registry.runtime_of(registry.vendor_for(device.type))
    for fn in calls:
        fn()
    runtime.synchronize(device)
    samples = rt.time_each([calls[i % len(calls)] for i in range(repeats)], device)  # type: ignore[attr-defined]
    return _timing(samples)


def time_graph(
    fn: Callable[[], Any],
    device: torch.device,
    *,
    calls_per_graph: int = 20,
    repeats: int = 20,
    generators: Sequence[torch.Generator] = (),
) -> Timing:
    """Device time per call when ``calls_per_graph`` calls replay from one captured graph."""

    def calls() -> None:
        for _ in range(calls_per_graph):
            fn()

    replay = runtime.capture_graph(calls, device, generators)
    rt = registry.runtime_of(registry.vendor_for(device.type))
    samples = rt.time_each([replay] * repeats, device)  # type: ignore[attr-defined]
    return _timing([s / calls_per_graph for s in samples])


def times_keyed(builder: Callable[..., Any]) -> bool:
    """Whether the bench times keyed draws of the op beside its generator rows: its builder builds
    keyed calls (``keyed=True``: ``seeds=``, the noise computed in the provider)."""
    return "keyed" in inspect.signature(builder).parameters


def _accepted(builder: Callable[..., Any], sizes: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(builder).parameters
    return {k: v for k, v in sizes.items() if k in params}


#: The typical tree of the spec (K 4, S 3), page size 1, a 32k vocabulary; each size overrides these.
TYPICAL = {"topk": 4, "num_steps": 3, "page_size": 1, "vocab": 32768}


def sizes_for(op: str, builder: Callable[..., Any], which: str) -> Iterator[dict[str, Any]]:
    seen = []
    batches = QUICK_SIZES if which == "quick" else FULL_SIZES
    base = batches if which == "quick" else FULL_SIZES + list(map(dict, bench_facts_of(builder).large_sizes))
    if times_keyed(builder):
        base = base + [{**b, "vocab": v, "keyed": True} for v in KEYED_VOCABS[which] for b in batches]
    for sizes in base:
        accepted = _accepted(builder, TYPICAL | sizes)
        if accepted and accepted not in seen:
            seen.append(accepted)
            yield accepted


def bytes_moved(op: str, kwargs: dict[str, Any]) -> int:
    """Bytes read + written by one call: the op's own count (``spec_hal.ops.<op>.bytes_moved``)."""
    return int(getattr(public_ops, op).bytes_moved(**kwargs))


def _call(op: str, kwargs: dict[str, Any]) -> Callable[[], Any]:
    fn = getattr(public_ops, op)
    return lambda: fn(**kwargs)


#: Triton's warps per program where a launch names none.
TRITON_DEFAULT_WARPS = 4
#: A launch shape: the (grid, num_warps) of each Triton launch one call makes.
LaunchShape = tuple[tuple[tuple[int, ...], int], ...]


def launch_shape(call: Callable[[], Any]) -> LaunchShape:
    """The grid and warps of each Triton launch ``call`` makes (it runs once); empty when it makes
    none (a torch provider, or Triton not installed)."""
    return tuple(
        (launch.grid, int(launch.options.get("num_warps", TRITON_DEFAULT_WARPS)))
        for launches, _ in host.each_launch(host.recorded_launches(call))
        for launch in launches
    )


def grid_floor(device: torch.device, shape: LaunchShape) -> Timing:
    """Device time of empty kernels launched with ``shape``'s grids and warps, replayed from a
    graph: the floor of a latency-bound op making those launches."""
    from ..kernels.triton.empty import launch_empty_shaped

    marker = torch.zeros(1, device=device)
    return time_graph(lambda: launch_empty_shaped(marker, shape), device)


def _measure(
    op: str,
    builder: Callable[..., dict[str, Any]],
    sizes: dict[str, Any],
    device: torch.device,
    provider: str,
    floors: dict[LaunchShape, Timing] | None = None,
) -> dict[str, Any]:
    """Timings of ``op`` at ``sizes`` through ``provider``; ``floors``: the grid floors measured so
    far in this run, by launch shape (filled as new shapes come)."""
    # Three input sets rotate so caches do not flatter; one set when it alone is far larger than L2.
    first = (
        builder(device, seed=0, **sizes)
        if "seed" in inspect.signature(builder).parameters
        else builder(device, **sizes)
    )
    big = sum(t.nbytes for _, t in tensors_in(first)) > (256 << 20)
    more = (
        []
        if big
        else [
            builder(device, seed=seed, **sizes)
            for seed in (1, 2)
            if "seed" in inspect.signature(builder).parameters
        ]
    )
    inputs = [first, *more]
    row: dict[str, Any] = {}
    with use_provider(op, provider):
        calls = [_call(op, kwargs) for kwargs in inputs]
        if device.type == "cpu":
            row["time"] = time_host(calls[0])
        else:
            row["time"] = time_device(calls, device)
            # Host time rotates the input sets (three of the same shapes, or as many as there are).
            row["host"] = time_host(host.rotating(calls))
            if provider == registry.TRITON:
                row["host_breakdown"] = host.breakdown(
                    op, inputs, drain=functools.partial(runtime.synchronize, device)
                )
            if runtime.supports_graph_capture(device):
                try:
                    generators = [
                        v
                        for v in inputs[0].values()
                        if isinstance(v, torch.Generator) and v.device.type == device.type
                    ]
                    row["graph"] = time_graph(calls[0], device, generators=generators)
                except Exception as exc:  # an uncapturable provider is a finding, not a crash
                    row["graph_error"] = f"{type(exc).__name__}: {exc}"
                if provider == registry.TRITON and "graph" in row and floors is not None:
                    try:
                        shape = launch_shape(calls[0])
                        if shape and shape not in floors:
                            floors[shape] = grid_floor(device, shape)
                        if shape:
                            row["grid_floor"] = floors[shape]
                    except Exception as exc:  # the row stands without its grid floor
                        row["grid_floor_error"] = f"{type(exc).__name__}: {exc}"
                if provider == registry.PORTABLE and draws_noise(op, sizes):
                    try:
                        noise_like = inputs[0][bench_facts(op).noise_like or ""]
                        row["drawn_noise"] = _drawn_noise(noise_like.shape, device)
                    except Exception as exc:  # the op's rows then get no ceiling
                        row["drawn_noise_error"] = f"{type(exc).__name__}: {exc}"
    row["bytes"] = bytes_moved(op, inputs[0])
    return row


def draws_noise(op: str, sizes: dict[str, Any]) -> bool:
    """Whether the public call at ``sizes`` draws the race's noise before it dispatches (its
    builder's ``noise_like``; keyed calls compute theirs in the provider)."""
    return bench_facts(op).noise_like is not None and not sizes.get("keyed")


@dataclass
class DrawnNoise:
    timing: Timing  # graph replay of the draw
    nbytes: int  # what a provider reads of it


def _drawn_noise(shape: torch.Size, device: torch.device) -> DrawnNoise:
    """The Exp(1) noise a public call draws before it dispatches, drawn as it draws it."""
    generator = torch.Generator(device=device).manual_seed(0)
    draw = functools.partial(exponential_noise, shape, device, generator)
    return DrawnNoise(time_graph(draw, device, generators=[generator]), 4 * shape.numel())


def set_ceiling(
    op: str,
    op_class: str,
    rows: list[dict[str, Any]],
    portable: dict[str, Any],
    data: dict[str, Any],
    draws: bool | None = None,
) -> None:
    """On each row of one op and size of an accelerator run (a bandwidth-bound op with a portable
    row; ``portable``: what :func:`_measure` measured of it): ``least_device_us``, the least device
    time any provider can take in this run, and ``x_ceiling``, the portable provider's time over it
    (the largest speed-up over portable any provider can reach). The least time: one empty kernel's
    (the launch floor), plus the op's bytes at the copy bandwidth, plus, where the public call draws
    noise first (``draws``; by default where the op can: its builder's ``noise_like``), that draw and
    the provider's read of it (``drawn_noise_us``). A noise-drawing op whose draw could not be timed
    gets no ceiling, and a note says why."""
    copy_gbs, launch_us = data.get("copy_bandwidth_gbs"), data.get("launch_floor_us")
    if op_class != "bandwidth" or not copy_gbs or not launch_us or not rows or "time" not in portable:
        return
    noise: DrawnNoise | None = portable.get("drawn_noise")
    if (bench_facts(op).noise_like is not None if draws is None else draws) and noise is None:
        for row in rows:
            error = portable.get("drawn_noise_error", "not timed")
            row["note"] = "; ".join(filter(None, [row.get("note"), f"no ceiling: drawn noise {error}"]))
        return
    portable_us = (portable.get("graph") or portable["time"]).median_us
    nbytes = rows[0]["bytes"] + (noise.nbytes if noise else 0)
    least_us = launch_us + nbytes / (copy_gbs * 1e3) + (noise.timing.median_us if noise else 0.0)
    for row in rows:
        if noise:
            row["drawn_noise_us"] = round(noise.timing.median_us, 2)
        row["least_device_us"] = round(least_us, 2)
        row["x_ceiling"] = round(portable_us / least_us, 2)


def dispatch_overhead(device: torch.device) -> dict[str, float]:
    """Host time of ``spec_hal.ops.fast_topk`` pieces: the public call, ``dispatch`` (lookup + call),
    and the bound provider called directly. Overhead = dispatch - direct."""
    op = public_ops.fast_topk
    values = torch.randn(8, 64, device=device)
    out_values = torch.empty(8, 4, device=device)
    out_indices = torch.empty(8, 4, dtype=torch.int64, device=device)
    args = (values, 4, 1, out_values, out_indices)  # the provider arguments
    bound = op.bind(device, op.variant_of(args) if op.variant else None)
    public = time_host(lambda: op(values, 4, out=(out_values, out_indices)), repeats=2000)
    dispatch = time_host(lambda: op.dispatch(device, *args), repeats=2000)
    direct = time_host(lambda: bound(*args), repeats=2000)
    return {
        "public_us": public.median_us,
        "dispatch_us": dispatch.median_us,
        "direct_us": direct.median_us,
        "dispatch_overhead_us": dispatch.median_us - direct.median_us,
        "validation_us": public.median_us - dispatch.median_us,
    }


def run(
    device_name: str | None = None,
    ops: set[str] | None = None,
    which: str = "quick",
    progress: Callable[[str], None] | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Benchmark ``ops`` (default all) on a device; ``checkpoint(data)`` runs after each op so that a
    run cut short by a time limit keeps what it measured."""
    descriptor = registry.device(device_name) if device_name else registry.current_device()
    device = torch_device_of(descriptor)
    rows: list[dict[str, Any]] = []
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "device": descriptor.name,
        "device_name": device_model(descriptor, device),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "sizes": which,
        "versions": versions(__version__),
        "rows": rows,
    }
    with device_context(descriptor):
        if device.type != "cpu":
            data["launch_floor_us"], first_launch_us, data["launch_host_compiled_us"] = _launch_floor(device)
            if first_launch_us is not None:
                data["launch_host_samples_us"] = [round(first_launch_us, 2)]
                settle_launch_reference(data)
            data["copy_bandwidth_gbs"] = _copy_bandwidth(device)
        data["dispatch"] = dispatch_overhead(device)
        floors: dict[LaunchShape, Timing] = {}
        plan = [
            (op, b, s)
            for op, b in sorted(builders().items())
            if ops is None or op in ops
            for s in sizes_for(op, b, which)
        ]
        for index, (op, builder, sizes) in enumerate(plan, 1):
            if progress:
                progress(f"[{index}/{len(plan)}] {op} {sizes}")
            if index > 1 and plan[index - 2][0] != op:
                if "launch_host_samples_us" in data:  # the reference, timed again between ops
                    data["launch_host_samples_us"].append(round(_launch_host(device), 2))
                    settle_launch_reference(data)
                if checkpoint:
                    checkpoint(data)
            providers = [i.provider for i in registry.implementations(op, descriptor.name)]
            portable_time = None
            portable: dict[str, Any] = {}
            size_rows = []
            op_class = registry.ops()[op].op_class
            for provider in sorted(providers, key=lambda p: p != registry.PORTABLE):
                measured = _measure(op, builder, sizes, device, provider, floors)
                row = _row(op, provider, sizes, measured, op_class, data)
                row["intended"] = registry.intent_of(descriptor, op).provider
                if provider == registry.PORTABLE:
                    portable_time = row.get("graph_us") or row["time_us"]
                    portable = measured
                row["speedup_vs_portable"] = (
                    round(portable_time / (row.get("graph_us") or row["time_us"]), 2)
                    if portable_time
                    else None
                )
                rows.append(row)
                size_rows.append(row)
            if device.type != "cpu":
                set_ceiling(op, op_class, size_rows, portable, data, draws_noise(op, sizes))
            naive = NAIVE_LOOPS.get(op)
            if naive is not None and device.type == "cpu":
                kwargs = builder(device, **sizes)
                timing = time_host(functools.partial(naive, **kwargs), repeats=5, warmup=1, min_seconds=0.0)
                rows.append(
                    {
                        "op": op,
                        "provider": "naive-loop",
                        "size": _size_label(sizes),
                        "time_us": round(timing.median_us, 2),
                        "spread_us": round(timing.spread_us, 2),
                        "speedup_vs_portable": round(portable_time / timing.median_us, 3)
                        if portable_time
                        else None,
                    }
                )
        if device.type == "cpu" and (ops is None or "generate_token_bitmask" in ops):
            rows += _grammar_rows(which, progress)
    data["median_relative_spread"] = median_relative_spread(rows)
    return data


def settle_launch_reference(data: dict[str, Any]) -> None:
    """``launch_host_us``: the median of the empty JIT launch's host times taken across the run
    (``launch_host_samples_us``, one at the start and one between ops), so that the reference sees
    the host as the rows did, not as it was at one moment; every row's ``host_over_launch_us``
    follows it."""
    reference = statistics.median(data["launch_host_samples_us"])
    data["launch_host_us"] = reference
    for row in data["rows"]:
        if "host_us" in row:
            row["host_over_launch_us"] = round(row["host_us"] - reference, 1)


#: A median interquartile range above this share of the median time means other work disturbed the
#: run (an idle machine stays near a tenth).
NOISY_SPREAD = 0.25


def median_relative_spread(rows: list[dict[str, Any]]) -> float | None:
    """The median over rows of spread / time: how repeatable this run's timings were."""
    ratios = [
        r["spread_us"] / r["time_us"] for r in rows if r.get("spread_us") is not None and r.get("time_us")
    ]
    return round(statistics.median(ratios), 3) if ratios else None


def noise_warning(data: dict[str, Any]) -> str | None:
    """Warnings (one a line) when the run's timings were noisy (see :data:`NOISY_SPREAD`), or when a
    portable row spread more than its median time (every speed-up of its op and size divides by
    that median), else None."""
    warnings = []
    spread = data.get("median_relative_spread")
    if spread is not None and spread > NOISY_SPREAD:
        warnings.append(
            f"warning: noisy timings (median spread {spread:.0%} of the median time, an idle machine "
            f"stays under {NOISY_SPREAD:.0%}): other work shares this machine; compare ratios within "
            "this run, or rerun on an idle machine"
        )
    unsteady = [
        f"{row['op']} {row['size']}"
        for row in data.get("rows", ())
        if row.get("provider") == "portable" and (row.get("spread_us") or 0) > (row.get("time_us") or 0)
    ]
    if unsteady:
        shown = ", ".join(unsteady[:4]) + (f" and {len(unsteady) - 4} more" if len(unsteady) > 4 else "")
        warnings.append(
            f"warning: {len(unsteady)} portable row(s) spread more than their median time ({shown}): "
            "the speed-ups measured against them are not to be trusted; rerun those ops (--ops)"
        )
    return "\n".join(warnings) or None


def _grammar_rows(which: str, progress: Callable[[str], None] | None) -> list[dict[str, Any]]:
    """Grammar masks over draft trees (host op): spec_hal's traversal through the xgrammar adapter
    against xgrammar's own ``traverse_draft_tree`` on the same trees (skipped without xgrammar)."""
    from ..grammar import compare_with_xgrammar_traversal

    try:
        import xgrammar  # noqa: F401
    except ImportError:
        return []
    if progress:
        progress("generate_token_bitmask vs xgrammar.traverse_draft_tree")
    nodes = (8, 64) if which == "quick" else (8, 16, 32, 64)
    rows = []
    for result in compare_with_xgrammar_traversal(
        draft_token_nums=nodes, repeats=3 if which == "quick" else 7
    ):
        size = f"bs={result['batch_size']} D={result['draft_token_num']} vocab={result['vocab_size']}"
        for provider, key in (
            ("spec_hal+xgrammar-adapter", "spec_hal_ms"),
            ("xgrammar-traverse_draft_tree", "xgrammar_ms"),
        ):
            rows.append(
                {
                    "op": "generate_token_bitmask",
                    "provider": provider,
                    "class": "host",
                    "size": size,
                    "time_us": round(result[key] * 1e3, 1),
                    "note": f"xgrammar/spec_hal time: {result['xgrammar_ms'] / result['spec_hal_ms']:.2f}",
                }
            )
    return rows


def _size_label(sizes: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())


def _row(
    op: str,
    provider: str,
    sizes: dict[str, Any],
    measured: dict[str, Any],
    op_class: str,
    data: dict[str, Any],
) -> dict[str, Any]:
    timing: Timing = measured["time"]
    row: dict[str, Any] = {
        "op": op,
        "provider": provider,
        "class": op_class,
        "size": _size_label(sizes),
        "time_us": round(timing.median_us, 2),
        "spread_us": round(timing.spread_us, 2),
        "bytes": measured["bytes"],
    }
    if "host" in measured:
        row["host_us"] = round(measured["host"].median_us, 2)
        if data.get("launch_host_us"):  # target: an empty Triton launch + 3 us per launch of the row
            row["host_over_launch_us"] = round(row["host_us"] - data["launch_host_us"], 1)
    for layer, value in measured.get("host_breakdown", {}).items():
        row[f"host_{layer}"] = value if layer == "launches" else round(value, 2)
    if "graph" in measured:
        row["graph_us"] = round(measured["graph"].median_us, 2)
        if data.get("launch_floor_us"):
            row["x_floor"] = round(row["graph_us"] / data["launch_floor_us"], 2)
        if "grid_floor" in measured:  # empty kernels launched like the op's own launches
            row["grid_floor_us"] = round(measured["grid_floor"].median_us, 2)
            row["x_grid_floor"] = round(row["graph_us"] / measured["grid_floor"].median_us, 2)
    notes = [measured[key] for key in ("graph_error", "grid_floor_error") if key in measured]
    if notes:
        row["note"] = "; ".join(notes)
    if data.get("copy_bandwidth_gbs") and op_class == "bandwidth":
        # Device time: the graph replay where measured (events around eager calls include host gaps).
        device_us = row.get("graph_us") or timing.median_us
        achieved = measured["bytes"] / (device_us * 1e-6) / 1e9
        row["pct_copy_bw"] = round(100 * achieved / data["copy_bandwidth_gbs"], 1)
    return row


def _launch_floor(device: torch.device) -> tuple[float | None, float | None, float | None]:
    """An empty Triton kernel: (device time per launch in a graph replay, host time per eager launch
    through Triton's JIT, host time per eager launch through the launch plans, as the family's
    kernels launch)."""
    try:
        from ..kernels.triton.empty import launch_empty, launch_empty_compiled
    except ImportError:
        return None, None, None
    marker = torch.zeros(1, device=device)
    device_us = time_graph(lambda: launch_empty(marker), device, calls_per_graph=50).median_us
    host_us = _launch_host(device, marker)
    compiled_us = time_host(lambda: launch_empty_compiled(marker), repeats=2000).median_us
    runtime.synchronize(device)
    return device_us, host_us, compiled_us


def _launch_host(device: torch.device, marker: torch.Tensor | None = None) -> float:
    """Host microseconds per eager launch of an empty Triton kernel through Triton's JIT."""
    from ..kernels.triton.empty import launch_empty

    if marker is None:
        marker = torch.zeros(1, device=device)
    host_us = time_host(lambda: launch_empty(marker), repeats=2000).median_us
    runtime.synchronize(device)
    return host_us


def _copy_bandwidth(device: torch.device, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    timing = time_device([lambda: dst.copy_(src)], device, repeats=20)
    return 2 * nbytes / (timing.median_us * 1e-6) / 1e9


def print_table(data: dict[str, Any], stream: Any = sys.stdout) -> None:
    print(
        f"spec-hal bench on {data['device']} ({data['device_name']}), {data['date']}, "
        f"commit {data['commit'] or 'unknown'}, torch {data['versions']['torch']}, "
        f"triton {data['versions']['triton'] or 'not installed'}",
        file=stream,
    )
    if data.get("launch_floor_us") is not None:
        print(
            f"launch floor (empty Triton kernel): {data['launch_floor_us']:.2f} us device time in a graph, "
            f"{data['launch_host_us']:.2f} us host time per eager launch",
            file=stream,
        )
    if data.get("copy_bandwidth_gbs"):
        print(f"device-to-device copy bandwidth: {data['copy_bandwidth_gbs']:.0f} GB/s", file=stream)
    print(dispatch_line(data, "us"), file=stream)
    print_host_breakdown(data, stream)
    present = [c for c in COLUMNS if any(c in row for row in data["rows"])]
    widths = (
        {c: max(len(c), *(len(str(row.get(c, ""))) for row in data["rows"])) for c in present}
        if data["rows"]
        else {}
    )
    print("  ".join(c.ljust(widths[c]) for c in present), file=stream)
    for row in data["rows"]:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in present), file=stream)
    warning = noise_warning(data)
    if warning:
        print(warning, file=stream)


#: The host-time layers of a Triton row (``spec_hal/bench/host.py``), in call order.
HOST_LAYERS = ("validation", "dispatch", "glue", "binder", "launcher")


def print_host_breakdown(data: dict[str, Any], stream: Any = sys.stdout) -> None:
    """Where each Triton row's eager host time goes, against the run's empty Triton launch."""
    rows = [row for row in data["rows"] if "host_binder_us" in row]
    if not rows:
        return
    launch = data.get("launch_host_us")
    over = [row["host_over_launch_us"] for row in rows if "host_over_launch_us" in row]
    if launch is not None and over:
        ordered = sorted(over)
        print(
            f"host time over an empty Triton JIT launch ({launch:.2f} us), {len(ordered)} Triton rows: "
            f"median {statistics.median(ordered):+.1f} us, 90th percentile "
            f"{ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]:+.1f} us, worst {ordered[-1]:+.1f} us",
            file=stream,
        )
    floor = host_floor_line(data, "us")
    if floor:
        print(floor, file=stream)
    print("host breakdown (us): op size host over " + " ".join(HOST_LAYERS) + " launches", file=stream)
    for row in rows:
        layers = " ".join(f"{row.get(f'host_{layer}_us', float('nan')):.2f}" for layer in HOST_LAYERS)
        print(
            f"  {row['op']} {row['size']} {row.get('host_us')} {row.get('host_over_launch_us')} {layers} "
            f"{row.get('host_launches')}",
            file=stream,
        )
