"""``spec-hal``, the command line.

``spec-hal info`` explains the detected device (every probe's three answers), the binding of every
op (provider, and why the others were not chosen), plugins and versions; ``--json`` gives the same
data with top-level keys schema_version, device, probes, ops, plugins, versions, triton_launches
(planned launches or Triton's own launch path, and why; null without Triton).

Exit codes: 0 success; 1 a conformance check failed; 2 the command cannot run as asked (a usage
error, an unknown op or provider in ``SPEC_HAL_OPS``, an absent device, a missing extra), said in
one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__, composition, config, plugins, registry
from .errors import DeviceSelectionError, SpecHalError
from .reporting import (
    bench_progress,
    check_progress,
    end_status_line,
    git_commit,
    unwritable_reason,
    versions,
)

#: Version of the layout of ``spec-hal info --json`` (and of ``bench --sweep --json``): raised when
#: a key changes meaning or goes away.
SCHEMA_VERSION = 1

DESCRIPTION = (
    "spec_hal: vendor-neutral device ops for speculative decoding. "
    "'spec-hal COMMAND --help' describes a command."
)


def _binding_rows(descriptor: registry.DeviceDescriptor) -> list[dict[str, Any]]:
    importlib.import_module("spec_hal.ops")
    rows = []
    for name, op in sorted(registry.ops().items()):
        row: dict[str, Any] = {"op": name, "class": op.op_class}
        try:
            choice = registry.choose(name, descriptor, None)
        except SpecHalError as exc:
            row.update(
                provider=None, intended=None, reason=str(exc), fallback=None, skipped=[], declines=None
            )
        else:
            row.update(
                provider=choice.impl.provider,
                intended=choice.intent.provider,
                reason=choice.intent.reason,
                fallback=choice.fallback.reason if choice.fallback else None,
                skipped=[{"provider": p, "why": w} for p, w in choice.skipped],
                declines=_declared_limit(choice.impl.supports),
            )
        rows.append(row)
    return rows


def _declared_limit(supports: Any) -> str | None:
    """What a provider declines, in words: the first line of its ``supports`` docstring (None where
    it serves every variant)."""
    if supports is None:
        return None
    doc = (getattr(supports, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else "some variants (its supports() says which when called)"


def _detection_for_info() -> tuple[registry.Detection, str | None]:
    """The detection, and what is wrong with ``SPEC_HAL_DEVICE`` where it names a device that is
    unknown or absent (then the detection without it: info explains a bad setting)."""
    try:
        return registry.detect(), None
    except DeviceSelectionError as exc:
        return registry.detect(honour_override=False), str(exc)


def info_data(device_name: str | None = None) -> dict[str, Any]:
    """Everything ``spec-hal info`` shows, as plain data."""
    detection, bad_setting = _detection_for_info()
    descriptor = registry.device(device_name) if device_name else detection.device
    probes = {p.vendor: p.to_json() for p in detection.probes}
    ops = _binding_rows(descriptor)  # loads the vendor's bindings: first, for their failure below
    return {
        "schema_version": SCHEMA_VERSION,
        "device": {
            "name": descriptor.name,
            "detected": detection.device.name,
            "reason": detection.reason
            if descriptor is detection.device
            else f"explaining {descriptor.name} on request (--device)",
            "bad_setting": bad_setting,
            "usable_here": probes.get(descriptor.name, {}).get("usable", False),
            "torch_device_type": descriptor.device_type,
            "priority": descriptor.priority,
            "priority_reason": descriptor.priority_reason,
            "dist_backend": descriptor.dist_backend,
            "capabilities": vars(descriptor.capabilities) | {},
            "notes": list(descriptor.notes),
            "proven": _proven(descriptor),
            "bindings_failed": registry.binding_failures().get(descriptor.name),
        },
        "probes": [p.to_json() | {"priority": registry.device(p.vendor).priority} for p in detection.probes],
        "ops": ops,
        "plugins": [r.to_json() for r in plugins.reports()],
        "versions": versions(__version__),
        "triton_launches": _triton_launches(),
    }


def _triton_launches() -> dict[str, Any] | None:
    """How this process launches the Triton family's kernels: planned launches, or Triton's own
    path, and why (None without Triton)."""
    try:
        from .kernels.triton.launch import launch_path
    except ImportError:
        return None
    planned, reason = launch_path()
    return {"planned": planned, "reason": reason}


def _proven(descriptor: registry.DeviceDescriptor) -> str:
    """What this project has verified of a vendor, in one line (its descriptor's ``evidence``):
    hardware, compiled for targets, interpreter, emulated (never more than was seen)."""
    return "; ".join(descriptor.evidence)


def vendor_matrix() -> str:
    """Markdown table: op x built-in vendor -> intended provider (what `spec-hal info --device` binds).

    A vendor's intents depend on the kernel families it binds (the Triton family's coverage is its
    launcher table), so each vendor's bindings are loaded first."""
    public = set(importlib.import_module("spec_hal.ops").__all__)  # not ops other code defined
    vendors = [registry.REGISTRY.load_bindings(d.name) for d in composition.builtin_descriptors()]
    lines = ["| op | " + " | ".join(v.name for v in vendors) + " |", "|---|" + "---|" * len(vendors)]
    for name in sorted(set(registry.ops()) & public):
        cells = [registry.intent_of(v, name).provider for v in vendors]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| vendor | tested how |", "|---|---|"]
    lines += [f"| {v.name} | {_proven(v)} |" for v in vendors]
    return "\n".join(lines)


def _print_info(data: dict[str, Any]) -> None:
    dev = data["device"]
    shown = {name: value or "-" for name, value in data["versions"].items()}  # as the versions table
    print(f"spec_hal {shown['spec_hal']}  torch {shown['torch']}  triton {shown['triton']}")
    print(
        f"\ndevice: {dev['name']} (torch device type '{dev['torch_device_type']}', dist backend {dev['dist_backend']})"
    )
    if dev["bad_setting"]:
        print(f"  BAD SETTING: {dev['bad_setting']} (explained without it; other commands refuse it)")
    print(f"  why: {dev['reason']}")
    caps = ", ".join(f"{k}={v}" for k, v in dev["capabilities"].items())
    print(f"  capabilities: {caps}")
    for note in dev["notes"]:
        print(f"  note: {note}")
    print(f"  proven: {dev['proven']}")
    if dev["bindings_failed"]:
        print(f"  BINDINGS FAILED: {dev['bindings_failed']} (its providers are not registered)")
    print("\nprobes (detection order):")
    for probe in data["probes"]:
        mark = "usable" if probe["usable"] else "no"
        print(f"  {probe['priority']:>4} {probe['vendor']:<8} {mark}")
        for key in ("installed", "present", "visible"):
            check = probe[key]
            print(f"         {key:<9} {'yes' if check['ok'] else 'no ':<3}  {check['reason']}")
    print(f"\nops bound on {dev['name']}:")
    width = max((len(r["op"]) for r in data["ops"]), default=10)
    for row in data["ops"]:
        status = "FALLBACK: " + row["fallback"] if row["fallback"] else row["reason"]
        print(f"  {row['op']:<{width}}  {str(row['provider']):<10} {status}")
        for other in row["skipped"]:
            if other["why"] != row["fallback"]:  # the fallback line already says why
                print(f"  {'':<{width}}    not chosen: {other['provider']} ({other['why']})")
        if row.get("declines"):
            print(f"  {'':<{width}}    declines: {row['declines']}")
    print("\nplugins:")
    if not config.plugins_enabled():
        print(f"  disabled by {config.as_set(config.ENV_PLUGINS)} (none is imported)")
    elif not data["plugins"]:
        print("  none found (entry-point group spec_hal.devices)")
    for plugin in data["plugins"]:
        print(f"  {plugin['name']} ({plugin['target']}): {plugin['status']} - {plugin['detail']}")
    print("\nversions:")
    for name, value in data["versions"].items():
        print(f"  {name:<28} {value or '-'}")
    if data["triton_launches"]:
        print(f"\ntriton launches: {data['triton_launches']['reason']}")


def check_op_overrides(descriptor: registry.DeviceDescriptor) -> None:
    """Refuse a ``SPEC_HAL_OPS`` that names an unknown op, or a provider the op does not have (or
    that declines) on ``descriptor``: one error up front instead of one per op."""
    importlib.import_module("spec_hal.ops")
    try:
        overrides = config.op_overrides()
    except ValueError as exc:
        raise SpecHalError(str(exc)) from None
    unknown = sorted(set(overrides) - set(registry.ops()))
    if unknown:
        raise SpecHalError(
            f"{config.ENV_OPS} names unknown op(s): {', '.join(unknown)} (spec-hal info lists the ops)"
        )
    for op in overrides:
        registry.choose(op, descriptor, None)  # a BindingError names the op and the providers it has


def _usable(name: str | None, emulated: bool = False) -> registry.DeviceDescriptor:
    """The device a command runs ops on (default: the detected one). An absent device is an error,
    unless its providers are emulated on CPU tensors."""
    from .conformance.runner import absent_reason

    descriptor = registry.device(name) if name else registry.current_device()
    why = None if emulated else absent_reason(descriptor)
    if why is not None:
        raise SpecHalError(why)
    check_op_overrides(descriptor)
    return descriptor


def check_writable(flag: str, path: str | None) -> None:
    """Refuse an output path the command could not write, before it runs: a report lost after a
    long run, with a traceback, is worse than a usage error."""
    why = unwritable_reason(path)
    if why is not None:
        raise SpecHalError(f"{flag} {path}: {why}")


def _cmd_info(args: argparse.Namespace) -> int:
    if args.matrix:
        print(vendor_matrix())
        return 0
    check_op_overrides(registry.device(args.device) if args.device else _detection_for_info()[0].device)
    data = info_data(args.device)
    if args.json:
        json.dump(data, sys.stdout, indent=2, default=str)
        print()
    else:
        _print_info(data)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    import time

    from .conformance.runner import Selection, report, run_suite, unavailable_providers

    check_writable("--report", args.report)
    if args.emulate:  # first: torch.compile's backends import Triton
        _interpret_triton_kernels(registry.device(args.device) if args.device else registry.current_device())
    inductor_ops = _selected_ops(args.inductor_ops, "--inductor-ops") or frozenset()
    _check_compile_backend(args.compile_backend)
    descriptor = _usable(args.device, args.emulate)
    ops = _selected_ops(args.ops)
    missing = unavailable_providers(descriptor, ops)
    if missing:
        raise SpecHalError(
            f"check --device {descriptor.name} would not test {descriptor.name}'s own providers: "
            + "; ".join(missing)
        )
    selection = Selection(
        ops=ops,
        small_only=args.small,
        compile=not args.no_compile,
        compile_backend=args.compile_backend,
        inductor_ops=inductor_ops,
        emulated=args.emulate,
    )
    started = time.time()
    results = run_suite(descriptor, selection, check_progress())
    end_status_line()
    data = report(results, descriptor, time.time() - started, args.emulate)
    print_check(data)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        print(f"report written to {args.report}")
    return 1 if data["summary"].get("fail") or not results else 0


def _interpret_triton_kernels(descriptor: registry.DeviceDescriptor) -> None:
    """``--emulate`` of a vendor binding the Triton family runs its kernels on CPU tensors, in
    Triton's interpreter, which ``triton.jit`` picks when a function is decorated (Triton's own
    library functions too, at its import): set ``TRITON_INTERPRET=1`` before Triton is imported, or
    refuse where it already was."""
    if registry.TRITON not in descriptor.families or os.environ.get("TRITON_INTERPRET") == "1":
        return
    if sys.modules.get("triton") is not None:  # None: an import blocked, nothing decorated
        raise SpecHalError(
            f"check --device {descriptor.name} --emulate runs Triton kernels in Triton's interpreter: "
            "set TRITON_INTERPRET=1 before starting (Triton was imported without it)"
        )
    os.environ["TRITON_INTERPRET"] = "1"


def _cmd_bench(args: argparse.Namespace) -> int:
    from . import bench

    check_writable("--json", args.json)
    check_writable("--plot", args.plot)
    selected = _selected_ops(args.ops)
    ops = set(selected) if selected is not None else None
    if args.sweep:
        if args.plot or args.host_profile is not None:
            raise SpecHalError(
                "--sweep times launch configurations only: --plot and --host-profile do not apply"
            )
        return _cmd_bench_sweep(args, ops)
    if any(v is not None for v in (args.sweep_kib, args.sweep_warps, args.sweep_row_programs)):
        raise SpecHalError(
            "--sweep-kib, --sweep-warps and --sweep-row-programs choose the candidates of --sweep"
        )
    if args.plot:
        _require_matplotlib()
    descriptor = _usable(args.device)

    def checkpoint(partial: dict[str, Any]) -> None:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(partial, handle, indent=1)

    data = bench.run(descriptor.name, ops, args.sizes, bench_progress(), checkpoint if args.json else None)
    end_status_line()
    if args.host_profile is not None:
        from .bench import host_profile

        data["host_profile"] = host_profile.run(
            descriptor.name, ops, args.host_profile, progress=bench_progress()
        )
        end_status_line()
    bench.print_table(data)
    if args.host_profile is not None:
        print()
        host_profile.print_profiles(data["host_profile"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        print(f"results written to {args.json}")
    if args.plot:
        from .bench.report import plot

        plot(data, args.plot)
        print(f"plot written to {args.plot}")
    return 0


def _require_matplotlib() -> None:
    """``--plot`` needs matplotlib: say so before benchmarking, not after."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SpecHalError('--plot needs matplotlib: pip install "spec-hal[bench]"') from None


def _cmd_bench_sweep(args: argparse.Namespace, ops: set[str] | None) -> int:
    import time

    from .bench import sweep

    descriptor = _usable(args.device)
    rows = sweep.run(
        descriptor.name,
        ops,
        args.sweep_kib,
        args.sweep_warps,
        emit=lambda line: print(line, flush=True),
        programs=args.sweep_row_programs,
    )
    if args.json:
        data = {
            "schema_version": SCHEMA_VERSION,
            "device": descriptor.name,
            "date": time.strftime("%Y-%m-%d"),
            "commit": git_commit(),
            "versions": versions(__version__),
            "sweep": rows,
        }
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        print(f"results written to {args.json}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    if args.device is None or args.device.lower() in {name.lower() for name in registry.devices()}:
        _usable(args.device)
    else:  # a torch device string ("cuda:1"): the vendor of its type must be present
        import torch

        try:
            device_type = torch.device(args.device).type
        except RuntimeError:
            known = ", ".join(sorted(registry.devices()))
            raise SpecHalError(
                f"--device {args.device!r} is neither a spec_hal device ({known}) nor a torch device"
            ) from None
        _usable(registry.vendor_for(device_type).name)
    return int(demo.main(args))


def _selected_ops(text: str | None, flag: str = "--ops") -> frozenset[str] | None:
    """``--ops a,b``: public op names (None: all); an unknown name is an error, not an empty run."""
    if not text:
        return None
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(names - set(importlib.import_module("spec_hal.ops").__all__))
    if unknown:
        raise SpecHalError(f"{flag}: unknown op(s): {', '.join(unknown)} (spec-hal info lists the ops)")
    return names


def _check_compile_backend(name: str) -> None:
    """``--compile-backend``: a backend torch.compile knows (else every compile check would fail
    on it, counted as a failed conformance check)."""
    import torch

    known = torch.compiler.list_backends(exclude_tags=())
    if name not in known:
        raise SpecHalError(
            f"--compile-backend: unknown torch.compile backend {name!r}; known: {', '.join(known)}"
        )


def summary_line(summary: dict[str, int]) -> str:
    """``N pass[, N fail][, N skip]``, in that order (counts of zero left out, except pass)."""
    counts = [f"{summary.get('pass', 0)} pass"]
    counts += [f"{summary[status]} {status}" for status in ("fail", "skip") if summary.get(status)]
    return ", ".join(counts)


def skip_reasons(results: list[dict[str, Any]]) -> list[str]:
    """One line per reason a check was skipped: how many, why, and which ops."""
    by_reason: dict[str, list[str]] = {}
    for row in results:
        if row["status"] == "skip":
            by_reason.setdefault(row["reason"], []).append(row["op"])
    lines = []
    for reason, ops in sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0])):
        names = sorted(set(ops))
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"  {len(ops):>4} skipped: {reason} ({shown})")
    return lines


def print_check(data: dict[str, Any]) -> None:
    """The summary of a conformance report: totals, a table per (op, provider), skip reasons."""
    table: dict[tuple[str, str], dict[str, int]] = {}
    for row in data["results"]:
        cell = table.setdefault((row["op"], row["provider"]), {})
        cell[row["status"]] = cell.get(row["status"], 0) + 1
    where = (
        f"{data['device']} (EMULATED: its providers on CPU tensors)"
        if data.get("emulated")
        else data["device"]
    )
    on = f"{data['device_name']}, " if data.get("device_name") else ""  # reports before it lack the name
    print(f"conformance on {where} ({on}{data['seconds']} s): {summary_line(data['summary'])}")
    width = max((len(op) for op, _ in table), default=10)
    print(f"  {'op':<{width}}  {'provider':<12} pass  fail  skip")
    for (op, provider), cell in sorted(table.items()):
        print(
            f"  {op:<{width}}  {provider:<12} {cell.get('pass', 0):>4}  {cell.get('fail', 0):>4}  {cell.get('skip', 0):>4}"
        )
    reasons = skip_reasons(data["results"])
    if reasons:
        print("skip reasons:")
        print("\n".join(reasons))
    failures = [row for row in data["results"] if row["status"] == "fail"]
    if failures:
        print(f"{len(failures)} failing check(s), listed as they ran (FAIL lines above)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def _counts(text: str) -> list[int]:
    """argparse type of the ``--sweep-*`` candidate lists: positive integers, comma-separated."""
    from .bench.sweep import parse_counts

    try:
        return parse_counts(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spec-hal", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"spec_hal {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="detected device, probes, op bindings, plugins, versions")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.add_argument("--device", help="explain this device's bindings (even if it is absent here)")
    info.add_argument(
        "--matrix", action="store_true", help="markdown table of every op's intended provider per vendor"
    )
    info.set_defaults(run=_cmd_info)

    check = sub.add_parser("check", help="run the conformance suite on a device (default: the detected one)")
    check.add_argument("--device", help="device to check (default: the detected device)")
    check.add_argument("--report", help="write the JSON report to this file")
    check.add_argument("--ops", help="comma-separated op names (default: all)")
    check.add_argument("--small", action="store_true", help="small cases only (Triton interpreter)")
    check.add_argument(
        "--emulate",
        action="store_true",
        help="run the device's providers on CPU tensors (tests; results are emulated)",
    )
    check.add_argument("--no-compile", action="store_true", help="skip the torch.compile checks")
    check.add_argument(
        "--compile-backend", default="aot_eager", help="torch.compile backend (default aot_eager)"
    )
    check.add_argument("--inductor-ops", help="comma-separated ops whose compile check uses inductor")
    check.set_defaults(run=_cmd_check)

    bench = sub.add_parser(
        "bench", help="time every op against the portable provider, launch floor and copy bandwidth"
    )
    bench.add_argument("--device", help="device to benchmark (default: the detected device)")
    bench.add_argument("--ops", help="comma-separated op names (default: all)")
    bench.add_argument(
        "--sizes",
        choices=("quick", "full"),
        default="quick",
        help="quick: batch sizes 1, 64, 256 (default); full: 1 to 512 plus each bandwidth-bound op's "
        "large sizes (long contexts, many KV layers)",
    )
    bench.add_argument("--json", metavar="FILE", help="write the results as JSON")
    bench.add_argument(
        "--plot",
        metavar="FILE.png",
        help='write a PNG plot (needs matplotlib: pip install "spec-hal[bench]")',
    )
    bench.add_argument(
        "--host-profile",
        nargs="?",
        type=_positive,
        const=64,
        default=None,
        metavar="BS",
        help="also cProfile each op's eager public call at batch size BS (default 64): host time per "
        "call and the functions with the most own time, printed after the table and in the JSON",
    )
    bench.add_argument(
        "--sweep",
        action="store_true",
        help="instead of the bench: time the Triton providers of the copy-bound and vocabulary ops (--ops narrows "
        "them) under alternative launch configurations, in graph replays (accelerators only)",
    )
    bench.add_argument(
        "--sweep-kib",
        type=_counts,
        metavar="LIST",
        help="with --sweep: tile sizes in KiB, each as both the copy and the vocabulary tile, comma-separated "
        "(default: $SWEEP_KIB, else 8,16,32)",
    )
    bench.add_argument(
        "--sweep-warps",
        type=_counts,
        metavar="LIST",
        help="with --sweep: the tiles' warp counts, comma-separated (default: $SWEEP_WARPS, else 4,8,16)",
    )
    bench.add_argument(
        "--sweep-row-programs",
        type=_counts,
        metavar="LIST",
        help="with --sweep: row_programs values (below that many rows the renormalisation splits rows "
        "into chunks), comma-separated (default: $SWEEP_ROW_PROGRAMS, else the vendor's own)",
    )
    bench.set_defaults(run=_cmd_bench)

    from . import demo

    demo_parser = sub.add_parser(
        "demo", help="an end-to-end speculative decoding loop built from spec_hal ops"
    )
    demo.add_arguments(demo_parser)
    demo_parser.set_defaults(run=_cmd_demo)

    from . import aot

    compile_parser = sub.add_parser(
        "compile", help="compile the Triton kernels ahead of time for each vendor's real targets (no device)"
    )
    aot.add_arguments(compile_parser)
    compile_parser.set_defaults(run=aot.main)
    return parser


class LineLogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Log records on stderr on a line of their own: on a terminal, the progress line (rewritten in
    place) is cleared first instead of having the record appended to it."""

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream.isatty():
            self.stream.write("\r" + " " * 80 + "\r")
        super().emit(record)


def main(argv: Sequence[str] | None = None) -> int:
    handler = LineLogHandler(sys.stderr)
    # spec_hal's own messages start with "spec_hal:" (they are also read without this handler)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config.check_booleans()
        return int(args.run(args))
    except SpecHalError as exc:
        print(f"spec-hal: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into a reader that stopped early (| head)
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
