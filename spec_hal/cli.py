"""``spec-hal``: info | check | bench | demo.

``spec-hal info`` explains the detected device (every probe's three answers), the binding of every
op (provider, and why the others were not chosen), plugins and versions; ``--json`` gives the same
data with top-level keys device, probes, ops, plugins, versions.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__, plugins, registry
from .errors import SpecHalError

_VERSIONED_PACKAGES = (
    "torch",
    "triton",
    "numpy",
    "torch_npu",
    "torch_musa",
    "torchada",
    "intel_extension_for_pytorch",
    "xgrammar",
    "huggingface_hub",
)


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {"spec_hal": __version__}
    for name in _VERSIONED_PACKAGES:
        try:
            found[name] = version(name.replace("_", "-"))
        except PackageNotFoundError:
            try:
                found[name] = version(name)
            except PackageNotFoundError:
                found[name] = None
    return found


def git_commit() -> str | None:
    """The commit measured: ``SPEC_HAL_COMMIT`` (set by tools/h200_run.sh, whose copy has no .git),
    else ``git rev-parse`` of the working directory."""
    import os
    import subprocess

    if os.environ.get("SPEC_HAL_COMMIT"):
        return os.environ["SPEC_HAL_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _binding_rows(descriptor: registry.DeviceDescriptor) -> list[dict[str, Any]]:
    importlib.import_module("spec_hal.ops")
    rows = []
    for name, op in sorted(registry.ops().items()):
        row: dict[str, Any] = {"op": name, "class": op.op_class}
        try:
            choice = registry.choose(name, descriptor, None)
        except SpecHalError as exc:
            row.update(provider=None, intended=None, reason=str(exc), fallback=None, skipped=[])
        else:
            row.update(
                provider=choice.impl.provider,
                intended=choice.intent.provider,
                reason=choice.intent.reason,
                fallback=choice.fallback.reason if choice.fallback else None,
                skipped=[{"provider": p, "why": w} for p, w in choice.skipped],
            )
        rows.append(row)
    return rows


def info_data(device_name: str | None = None) -> dict[str, Any]:
    """Everything ``spec-hal info`` shows, as plain data."""
    detection = registry.detect()
    descriptor = registry.device(device_name) if device_name else detection.device
    probes = {p.vendor: p.to_json() for p in detection.probes}
    return {
        "device": {
            "name": descriptor.name,
            "detected": detection.device.name,
            "reason": detection.reason
            if descriptor is detection.device
            else f"explaining {descriptor.name} on request (--device)",
            "usable_here": probes.get(descriptor.name, {}).get("usable", False),
            "torch_device_type": descriptor.device_type,
            "priority": descriptor.priority,
            "priority_reason": descriptor.priority_reason,
            "dist_backend": descriptor.dist_backend,
            "capabilities": vars(descriptor.capabilities) | {},
            "notes": list(descriptor.notes),
        },
        "probes": [p.to_json() | {"priority": registry.device(p.vendor).priority} for p in detection.probes],
        "ops": _binding_rows(descriptor),
        "plugins": [r.to_json() for r in plugins.reports()],
        "versions": _versions(),
    }


#: How each built-in vendor's providers are verified in this project (docs/vendors.md).
TESTED_HOW = {
    "cuda": "hardware (H200 through tools/h200_run.sh); Triton also in the interpreter",
    "hip": "emulated: Triton interpreter with CDNA configuration; portable on CPU tensors",
    "musa": "emulated: Triton interpreter with MUSA configuration; portable on CPU tensors",
    "xpu": "emulated: Triton interpreter with Xe configuration; portable on CPU tensors",
    "npu": "emulated: portable providers on CPU tensors",
    "cpu": "hardware (every CI run)",
}


def vendor_matrix() -> str:
    """Markdown table: op x built-in vendor -> intended provider (what `spec-hal info --device` binds)."""
    public = set(importlib.import_module("spec_hal.ops").__all__)  # not ops other code defined
    vendors = list(TESTED_HOW)
    lines = ["| op | " + " | ".join(vendors) + " |", "|---|" + "---|" * len(vendors)]
    for name in sorted(set(registry.ops()) & public):
        cells = [registry.device(v).intent(name).provider for v in vendors]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| vendor | tested how |", "|---|---|"]
    lines += [f"| {v} | {how} |" for v, how in TESTED_HOW.items()]
    return "\n".join(lines)


def _print_info(data: dict[str, Any]) -> None:
    dev = data["device"]
    print(
        f"spec_hal {data['versions']['spec_hal']}  torch {data['versions']['torch']}  triton {data['versions']['triton']}"
    )
    print(
        f"\ndevice: {dev['name']} (torch device type '{dev['torch_device_type']}', dist backend {dev['dist_backend']})"
    )
    print(f"  why: {dev['reason']}")
    caps = ", ".join(f"{k}={v}" for k, v in dev["capabilities"].items())
    print(f"  capabilities: {caps}")
    for note in dev["notes"]:
        print(f"  note: {note}")
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
        for skipped in row["skipped"]:
            print(f"  {'':<{width}}    skipped {skipped['provider']}: {skipped['why']}")
    print("\nplugins:")
    if not data["plugins"]:
        print("  none found (entry-point group spec_hal.devices)")
    for plugin in data["plugins"]:
        print(f"  {plugin['name']} ({plugin['target']}): {plugin['status']} - {plugin['detail']}")
    print("\nversions:")
    for name, value in data["versions"].items():
        print(f"  {name:<28} {value or '-'}")


def _cmd_info(args: argparse.Namespace) -> int:
    if args.matrix:
        print(vendor_matrix())
        return 0
    data = info_data(args.device)
    if args.json:
        json.dump(data, sys.stdout, indent=2, default=str)
        print()
    else:
        _print_info(data)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    import time

    from .conformance.runner import Result, Selection, report, run_suite

    descriptor = registry.device(args.device) if args.device else registry.current_device()
    probe = next((p for p in registry.detect().probes if p.vendor == descriptor.name), None)
    if probe is not None and not probe.usable and not args.emulate:
        print(f"skipped: no {descriptor.name} device ({probe.reason})")
        return 0
    selection = Selection(
        ops=frozenset(args.ops.split(",")) if args.ops else None,
        small_only=args.small,
        compile=not args.no_compile,
        compile_backend=args.compile_backend,
        inductor_ops=frozenset(args.inductor_ops.split(",")) if args.inductor_ops else frozenset(),
        emulated=args.emulate,
    )
    done = [0]

    def progress(result: Result) -> None:
        done[0] += 1
        if result.status == "fail":  # at once: a run cut short by a time limit still shows it
            print(
                f"FAIL {result.op} [{result.provider}] {result.case_class} {result.case}: {result.reason[:300]}",
                flush=True,
            )
        if sys.stderr.isatty() or done[0] % 50 == 0:
            print(f"\r  {done[0]} checks ({result.op})".ljust(70), end="", file=sys.stderr, flush=True)

    started = time.time()
    results = run_suite(descriptor, selection, progress)
    print("", file=sys.stderr)
    data = report(results, descriptor, time.time() - started, args.emulate)
    _print_check(data)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        print(f"report written to {args.report}")
    return 1 if data["summary"].get("fail") or not results else 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from . import bench
    from .bench.report import plot

    def progress(message: str) -> None:
        print(f"\r{message}".ljust(80)[:80], end="", file=sys.stderr, flush=True)

    def checkpoint(partial: dict[str, Any]) -> None:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(partial, handle, indent=1)

    ops = set(args.ops.split(",")) if args.ops else None
    data = bench.run(args.device, ops, args.sizes, progress, checkpoint if args.json else None)
    print("", file=sys.stderr)
    bench.print_table(data)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
    if args.plot:
        plot(data, args.plot)
    return 0


def _print_check(data: dict[str, Any]) -> None:
    table: dict[tuple[str, str], dict[str, int]] = {}
    for row in data["results"]:
        cell = table.setdefault((row["op"], row["provider"]), {})
        cell[row["status"]] = cell.get(row["status"], 0) + 1
    where = (
        f"{data['device']} (EMULATED: its providers on CPU tensors)"
        if data.get("emulated")
        else data["device"]
    )
    print(
        f"conformance on {where} ({data['seconds']} s): "
        + ", ".join(f"{v} {k}" for k, v in sorted(data["summary"].items()))
    )
    width = max((len(op) for op, _ in table), default=10)
    print(f"  {'op':<{width}}  {'provider':<12} pass  fail  skip")
    for (op, provider), cell in sorted(table.items()):
        print(
            f"  {op:<{width}}  {provider:<12} {cell.get('pass', 0):>4}  {cell.get('fail', 0):>4}  {cell.get('skip', 0):>4}"
        )
    failures = [row for row in data["results"] if row["status"] == "fail"]
    if failures:
        print(f"{len(failures)} failing check(s), listed as they ran (FAIL lines above)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spec-hal", description=__doc__.split("\n")[0])
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
    bench.add_argument("--sizes", choices=("quick", "full"), default="quick")
    bench.add_argument("--json", help="write the results as JSON")
    bench.add_argument("--plot", help="write a PNG plot (needs matplotlib: the bench extra)")
    bench.set_defaults(run=_cmd_bench)

    from . import demo

    demo_parser = sub.add_parser(
        "demo", help="an end-to-end speculative decoding loop built from spec_hal ops"
    )
    demo.add_arguments(demo_parser)
    demo_parser.set_defaults(run=demo.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except SpecHalError as exc:
        print(f"spec-hal: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into a reader that stopped early (| head)
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
