"""``spec-hal compile``: the shared Triton family compiled ahead of time for each vendor's real chips,
with that vendor's launch configuration, on a machine without the device.

What is compiled is what the providers launch. Every op of the family's launcher table runs on inputs
from the conformance builders at the bench's sizes (``meta`` tensors, so nothing is allocated or
computed; CPU tensors where a builder needs data), with the op's dispatch sent to the family's
launcher and the launch recorded instead of run. Each distinct specialisation Triton itself would
make of a recorded launch (argument types, 16-byte alignment, integers equal to 1, constexprs, warps)
is compiled by ``triton.compile`` for every target of the vendor, and the compilers' resource reports
(registers, spills, shared memory, AMD occupancy) are kept.

This proves that the kernels build for those chips and fit their limits; it runs nothing. Which
Triton backend a vendor compiles through, its default targets and what is proven of it are fields of
its descriptor (``triton_backend``, ``compile_targets``, ``evidence``: ``spec-hal info`` states the
last).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .errors import SpecHalError

if TYPE_CHECKING:
    from .kernels.triton.launcher import Launcher
    from .registry import DeviceDescriptor

SCHEMA_VERSION = 1


# --------------------------------------------------------------------------------------------------
# Targets


@dataclass(frozen=True)
class Target:
    """A chip generation Triton compiles for.

    Attributes:
        name: ``gfx942`` or ``sm_90``: how the command line and the report spell it.
        backend: Triton's backend name of the target (``hip``, ``cuda``).
        arch: Triton's arch of the target (``"gfx942"``, ``90``).
        warp_size: lanes per warp (wavefront) on that chip.
        chips: the products it covers.
        max_shared_bytes: most shared memory (LDS) one program may use there; None when unknown.
    """

    name: str
    backend: str
    arch: str | int
    warp_size: int
    chips: str = ""
    max_shared_bytes: int | None = None

    def gpu_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)


#: Most threads one program may have, on every target here (CUDA blocks, AMD workgroups).
MAX_THREADS = 1024

KNOWN_TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("gfx90a", "hip", "gfx90a", 64, "MI250, MI210 (CDNA2)", 64 << 10),
        Target("gfx942", "hip", "gfx942", 64, "MI300X, MI325X (CDNA3)", 64 << 10),
        Target("gfx950", "hip", "gfx950", 64, "MI350X, MI355X (CDNA4)", 160 << 10),
        # Shared memory: the opt-in maximum per block (what Triton checks when it loads a kernel).
        Target("sm_80", "cuda", 80, 32, "A100", 163 << 10),
        Target("sm_90", "cuda", 90, 32, "H100, H200", 227 << 10),
        Target("sm_100", "cuda", 100, 32, "B200", 227 << 10),
    )
}


def parse_target(name: str) -> Target:
    """A target named on the command line: a known one, or any ``gfxNNN`` / ``sm_NN``."""
    if name in KNOWN_TARGETS:
        return KNOWN_TARGETS[name]
    if re.fullmatch(r"gfx[0-9a-f]{3,4}", name):
        # CDNA (gfx9xx) runs 64-lane wavefronts; RDNA (gfx10xx-12xx) kernels run in 32-lane mode.
        return Target(name, "hip", name, 64 if name.startswith("gfx9") else 32)
    match = re.fullmatch(r"sm_(\d{2,3})", name)
    if match:
        return Target(name, "cuda", int(match.group(1)), 32)
    raise ValueError(
        f"--target: unknown target {name!r}; expected one of {', '.join(KNOWN_TARGETS)}, "
        "or another gfx<NNN> (AMD) or sm_<NN> (NVIDIA)"
    )


# --------------------------------------------------------------------------------------------------
# Capturing the launches the providers make


@dataclass
class Launch:
    """One kernel launch a provider made (recorded, not run)."""

    op: str
    sizes: dict[str, Any]
    jit: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class Capture:
    """Launches per vendor, and the (op, sizes) whose inputs or launch could not be built."""

    launches: dict[str, list[Launch]] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)


@contextlib.contextmanager
def _dispatching_to(launchers: Sequence[Launcher]) -> Iterator[Any]:
    """Inside: every family op's dispatch calls its launcher with the launch configuration set on
    the yielded object (``.config``)."""
    from . import ops

    class Current:
        config: Any = None

    patched = []
    try:
        for launcher in launchers:
            op = getattr(ops, launcher.op)
            # An instance attribute: the contract's own ``<op>.dispatch(device, ...)`` call finds it.
            op.dispatch = lambda device, *args, _launch=launcher.launch: _launch(Current.config, *args)
            patched.append(op)
        yield Current
    finally:
        for op in patched:
            del op.dispatch


def _launches_of(op: str, sizes: dict[str, Any], call: Callable[[], Any]) -> list[Launch]:
    """The launches ``call`` makes, recorded and not made (each of a launch sequence's)."""
    from .kernels.triton.launch import LaunchSequence, recording

    with recording(launch=False) as recorded:
        call()
    return [
        Launch(op, sizes, launch.kernel.jit, args, dict(launch.options))
        for made, args in recorded
        for launch in (made.launches if isinstance(made, LaunchSequence) else (made,))
    ]


#: How :func:`capture` makes a builder's inputs, cheapest first: (device, whether factories without a
#: device build on it). Meta tensors hold no data (nothing is allocated). The builders draw their
#: data on the CPU and move it, which for meta makes data nobody reads, so factories first default to
#: meta; a builder that reads the values it draws fails there and draws them on the CPU; a builder or
#: contract that reads device values fails on meta, and CPU tensors are used.
_BUILDS = ((torch.device("meta"), True), (torch.device("meta"), False), (torch.device("cpu"), False))


def family_kernels() -> dict[str, Any]:
    """Every kernel the family's launcher modules define, by name (its ``@triton.jit`` function)."""
    from .kernels.triton.family import LAUNCHERS
    from .kernels.triton.launch import Kernel

    modules = {sys.modules[launcher.launch.__module__] for launcher in LAUNCHERS}
    return {
        value.jit.fn.__name__: value.jit
        for module in sorted(modules, key=lambda m: m.__name__)
        for value in vars(module).values()
        if isinstance(value, Kernel)
    }


def capture(configs: Mapping[str, Any], which: str = "full", ops: Sequence[str] | None = None) -> Capture:
    """The launches every family op (``ops``: these only) makes at the bench's ``which`` sizes under
    each vendor's launch configuration (``configs``: vendor -> LaunchConfig)."""
    import torch

    from . import ops as public_ops
    from .bench import builders, sizes_for
    from .kernels.triton.family import LAUNCHERS

    launchers = {launcher.op: launcher for launcher in LAUNCHERS}
    for name in ops or ():
        if name not in launchers:
            raise ValueError(f"ops: {name!r} is not an op of the Triton family ({', '.join(launchers)})")
    found = builders()
    result = Capture({vendor: [] for vendor in configs})
    with _dispatching_to(LAUNCHERS) as current:
        for name in ops if ops is not None else launchers:
            builder = found.get(name)
            if builder is None:
                result.errors.append({"op": name, "sizes": None, "error": "no conformance builder"})
                continue
            for sizes in [*sizes_for(name, builder, which), *map(dict, launchers[name].coverage_sizes)]:
                error = None
                for device, no_data in _BUILDS:
                    launches: dict[str, list[Launch]] = {}
                    try:
                        with torch.device(device) if no_data else contextlib.nullcontext():
                            kwargs = builder(torch.device(device), **sizes)
                        for vendor, config in configs.items():
                            current.config = config
                            launches[vendor] = _launches_of(
                                name, sizes, functools.partial(getattr(public_ops, name), **kwargs)
                            )
                    except Exception as exc:
                        error = f"{type(exc).__name__}: {exc}"
                        continue
                    for vendor, made in launches.items():
                        result.launches[vendor] += made
                    error = None
                    break
                if error is not None:
                    result.errors.append({"op": name, "sizes": _plain(sizes), "error": error})
    return result


# --------------------------------------------------------------------------------------------------
# Specialising and compiling


@dataclass
class Specialisation:
    """A distinct compilation of one kernel for one backend: what ``triton.compile`` takes."""

    kernel: str
    module: str
    jit: Any
    signature: dict[str, Any]
    constexprs: dict[Any, Any]
    attrs: dict[Any, Any]
    options: dict[str, Any]
    uses: list[dict[str, Any]] = field(default_factory=list)


def specialise(launches: Sequence[Launch], target: Target, *, every: bool = True) -> list[Specialisation]:
    """The distinct specialisations of ``launches`` for ``target``'s backend, as Triton's JIT makes
    them (its own binder and argument packing), each with the (op, sizes) that launch it. Without
    ``every``: one per kernel, that of its last launch (launches come in size order: the largest
    size, whose tiles put the most pressure on registers and shared memory)."""
    from triton import knobs
    from triton.compiler import make_backend

    from .kernels.triton.launch import pack_args, tritons_binder

    if not every:
        launches = list({id(launch.jit): launch for launch in launches}.values())

    backend = make_backend(target.gpu_target())
    binders: dict[int, Any] = {}
    found: dict[tuple[int, str], Specialisation] = {}
    for launch in launches:
        jit = launch.jit
        binder = binders.get(id(jit))
        if binder is None:
            binder = binders[id(jit)] = tritons_binder(jit, backend)
        # The options the JIT adds to every launch (JITFunction.run).
        kwargs = {
            **launch.kwargs,
            "debug": launch.kwargs.get("debug", jit.debug) or knobs.runtime.debug,
            "instrumentation_mode": knobs.compilation.instrumentation_mode,
        }
        bound, specialization, options = binder(*launch.args, **kwargs)
        key = (id(jit), str(specialization) + str(options))
        entry = found.get(key)
        if entry is None:
            parsed, signature, constexprs, attrs = pack_args(
                jit, backend, kwargs, bound, specialization, options
            )
            entry = found[key] = Specialisation(
                kernel=jit.fn.__name__,
                module=jit.module.rpartition(".")[2],
                jit=jit,
                signature=signature,
                constexprs=constexprs,
                attrs=attrs,
                options=dict(parsed.__dict__),
            )
        use = {"op": launch.op, "sizes": _plain(launch.sizes)}
        if use not in entry.uses:
            entry.uses.append(use)
    return list(found.values())


@contextlib.contextmanager
def fresh_compiles() -> Iterator[None]:
    """Every compile in the block really runs the compilers (an empty, temporary cache), with the
    ptxas report kept (Triton prints it; :func:`compile_one` captures it)."""
    from triton import knobs

    with (
        tempfile.TemporaryDirectory(prefix="spec-hal-compile-") as cache_dir,
        knobs.cache.scope(),
        knobs.nvidia.scope(),
    ):
        knobs.cache.dir = cache_dir
        knobs.nvidia.dump_ptxas_log = True
        yield


def compile_one(spec: Specialisation, target: Target) -> dict[str, Any]:
    """Compile ``spec`` for ``target`` (inside :func:`fresh_compiles`): ok, error and resources."""
    import triton
    from triton.compiler import ASTSource

    printed = io.StringIO()
    row: dict[str, Any] = {"ok": True, "error": None}
    try:
        with contextlib.redirect_stdout(printed):
            compiled = triton.compile(
                ASTSource(spec.jit, spec.signature, spec.constexprs, spec.attrs),
                target=target.gpu_target(),
                options=spec.options,
            )
    except Exception as exc:
        return {"ok": False, "error": _error_excerpt(f"{type(exc).__name__}: {exc}")}
    meta = compiled.metadata
    row["shared_bytes"] = int(meta.shared)
    row["num_warps"] = int(meta.num_warps)
    row["threads"] = int(meta.num_warps) * target.warp_size
    if target.backend == "hip":
        row.update(amd_resources(compiled.asm.get("amdgcn", "")))
    elif target.backend == "cuda":
        row.update(ptxas_resources(printed.getvalue()))
    problems = []
    if row["threads"] > MAX_THREADS:
        problems.append(f"{row['num_warps']} warps x {target.warp_size} lanes > {MAX_THREADS} threads")
    if target.max_shared_bytes is not None and row["shared_bytes"] > target.max_shared_bytes:
        problems.append(f"{row['shared_bytes']} bytes of shared memory > {target.max_shared_bytes}")
    if problems:
        row.update(ok=False, error=f"does not fit {target.name}: " + "; ".join(problems))
    return row


def amd_resources(amdgcn: str) -> dict[str, Any]:
    """Registers, spills, scratch and occupancy from the kernel's AMDGPU assembly (its metadata)."""

    def number(pattern: str) -> int | None:
        match = re.search(pattern, amdgcn, re.MULTILINE)
        return int(match.group(1)) if match else None

    vgprs = number(r"^\s*\.vgpr_count:\s+(\d+)")
    vgpr_spills = number(r"^\s*\.vgpr_spill_count:\s+(\d+)")
    return {
        "registers": vgprs,
        # VGPR spills go to scratch memory; SGPR spills go to VGPR lanes first (no memory traffic
        # while scratch_bytes is 0), so they are reported apart.
        "spills": vgpr_spills,
        "vgprs": vgprs,
        "sgprs": number(r"^\s*\.sgpr_count:\s+(\d+)"),
        "agprs": number(r"^\s*\.agpr_count:\s+(\d+)"),
        "vgpr_spills": vgpr_spills,
        "sgpr_spills": number(r"^\s*\.sgpr_spill_count:\s+(\d+)"),
        "scratch_bytes": number(r"^; ScratchSize: (\d+)"),
        "occupancy": number(r"^; Occupancy: (\d+)"),
    }


def ptxas_resources(log: str) -> dict[str, Any]:
    """Registers, spills and stack from ptxas's ``-v`` report (the first kernel in it)."""
    registers = re.search(r"Used (\d+) registers", log)
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    stack, stores, loads = (int(v) for v in frame.groups()) if frame else (None, None, None)
    return {
        "registers": int(registers.group(1)) if registers else None,
        "spills": stores,
        "spill_store_bytes": stores,
        "spill_load_bytes": loads,
        "stack_bytes": stack,
    }


def _error_excerpt(text: str, lines: int = 12, chars: int = 2000) -> str:
    """The head of an error and its last lines: Triton puts the source excerpt first, the cause last."""
    kept = text.strip().splitlines()
    if len(kept) > lines:
        kept = [*kept[: lines - 3], "...", *kept[-2:]]
    return "\n".join(kept)[-chars:]


def _plain(value: Any) -> Any:
    """A JSON-friendly copy of bench sizes (dtypes and other objects as strings, tuples as lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


# --------------------------------------------------------------------------------------------------
# The command


def _triton_backends(descriptors: Iterable[DeviceDescriptor]) -> list[str]:
    """The vendors' Triton backends (``triton_backend``) the installed Triton compiles for, in
    detection order."""
    from triton.backends import backends

    found: list[str] = []
    for descriptor in sorted(descriptors, key=lambda d: -d.priority):
        name = descriptor.triton_backend
        if name is None or name in found:
            continue
        probe = Target("probe", name, "", 32).gpu_target()
        if any(b.compiler.supports_target(probe) for b in backends.values()):
            found.append(name)
    return found


def _probe_target(target: Target) -> str | None:
    """Why the installed Triton cannot build for ``target`` at all (None when it can): an empty
    kernel is compiled first, so that a later failure is the family's, not the toolchain's."""
    from .kernels.triton.empty import _empty_kernel
    from .kernels.triton.launch import COMPILE_OPTIONS

    spec = Specialisation(
        "_empty_kernel", "empty", _empty_kernel, {"marker_ptr": "*i32"}, {}, {}, dict(COMPILE_OPTIONS)
    )
    row = compile_one(spec, target)
    return None if row["ok"] else row["error"]


def plan(
    vendors: Sequence[str] | None, targets: Sequence[str] | None
) -> tuple[dict[str, Any], dict[str, list[Target]], list[dict[str, Any]]]:
    """(vendor -> launch configuration, vendor -> targets, not compiled) for the vendors that bind
    the Triton family (``vendors``: only these) and ``targets`` (default: each vendor's own)."""
    import triton

    from . import registry

    known = registry.devices()
    for name in vendors or ():
        if name not in known:
            raise ValueError(f"--vendor: unknown vendor {name!r}; expected one of {', '.join(sorted(known))}")
    chosen = [parse_target(t) for t in targets] if targets else None
    installed = _triton_backends(known.values())
    configs: dict[str, Any] = {}
    vendor_targets: dict[str, list[Target]] = {}
    not_compiled: list[dict[str, Any]] = []
    for name, descriptor in sorted(known.items()):
        if vendors and name not in vendors:
            continue
        config = descriptor.families.get("triton")
        if config is None:
            if vendors:
                not_compiled.append(_skip(name, None, "binds no Triton kernel family"))
            continue
        backend = descriptor.triton_backend
        if backend is None:
            not_compiled.append(_skip(name, None, "spec_hal knows no Triton target of this vendor"))
            continue
        if backend not in installed:
            reason = (
                f"the installed Triton {triton.__version__} has no '{backend}' backend "
                f"(it compiles for: {', '.join(installed) or 'nothing'})"
            )
            not_compiled.append(_skip(name, None, reason))
            continue
        wanted = chosen if chosen is not None else [parse_target(t) for t in descriptor.compile_targets]
        mine = [t for t in wanted if t.backend == backend]
        if vendors:  # a vendor asked for by name: say why a target asked for is not its
            for t in wanted:
                if t.backend != backend:
                    not_compiled.append(
                        _skip(name, t.name, f"a {t.backend} target; {name} compiles for {backend}")
                    )
        if mine:
            configs[name] = config
            vendor_targets[name] = mine
        elif chosen is None:
            not_compiled.append(_skip(name, None, f"spec_hal names no {backend} target to compile for"))
    return configs, vendor_targets, not_compiled


def _skip(vendor: str, target: str | None, reason: str) -> dict[str, Any]:
    return {"vendor": vendor, "target": target, "reason": reason}


def run(
    vendors: Sequence[str] | None = None,
    targets: Sequence[str] | None = None,
    *,
    every: bool = False,
    which: str = "full",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Compile the family for the vendors and targets asked (default: every vendor binding it, for
    its default targets): every specialisation the providers launch at the bench's ``which`` sizes
    with ``every``, else one per kernel (:func:`specialise`). The report ``spec-hal compile --json``
    writes."""
    import triton

    from ._version import __version__
    from .kernels.triton.family import interpreted

    if interpreted():
        raise SpecHalError("spec-hal compile builds real binaries: unset TRITON_INTERPRET")
    configs, vendor_targets, not_compiled = plan(vendors, targets)
    captured = capture(configs, which) if configs else Capture()
    rows: list[dict[str, Any]] = []
    with fresh_compiles():
        for vendor, config in configs.items():
            for target in vendor_targets[vendor]:
                why_not = _probe_target(target)
                if why_not is not None:
                    not_compiled.append(_skip(vendor, target.name, why_not))
                    continue
                for spec in specialise(captured.launches[vendor], target, every=every):
                    if progress is not None:
                        progress(f"{vendor} {target.name} {spec.kernel}")
                    row = {
                        "kernel": spec.kernel,
                        "module": spec.module,
                        "vendor": vendor,
                        "config": config.name,
                        "target": target.name,
                        **compile_one(spec, target),
                        "constexprs": _constexprs_by_name(spec),
                        "uses": spec.uses,
                    }
                    rows.append(row)
    rows.sort(key=lambda r: (r["vendor"], r["target"], r["module"], r["kernel"]))
    launched = {launch.jit.fn.__name__ for made in captured.launches.values() for launch in made}
    return {
        "schema_version": SCHEMA_VERSION,
        "spec_hal": __version__,
        "triton": triton.__version__,
        "sizes": which,
        "specialisations": "all" if every else "one per kernel: its launch at the largest size",
        "targets": {
            t.name: {"backend": t.backend, "chips": t.chips, "warp_size": t.warp_size}
            for ts in vendor_targets.values()
            for t in ts
        },
        "rows": rows,
        "not_compiled": not_compiled,
        "capture_errors": captured.errors,
        # Kernels no captured launch reached (none may be left out: see the launchers' coverage_sizes).
        "unreached": sorted(set(family_kernels()) - launched) if configs else [],
    }


def _constexprs_by_name(spec: Specialisation) -> dict[str, Any]:
    """The kernel's declared constexpr parameters and their values (integers Triton specialised to 1
    are constexprs of the compile too, but not of the kernel's source)."""
    names = {(p.num,): p.name for p in spec.jit.params if p.is_constexpr}
    return {names[path]: _plain(value) for path, value in spec.constexprs.items() if path in names}


def failed(report: Mapping[str, Any]) -> bool:
    return any(not r["ok"] for r in report["rows"]) or bool(report["capture_errors"] or report["unreached"])


def summary_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One line per (vendor, target, kernel): specialisations, failures and the worst resources."""
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in report["rows"]:
        grouped.setdefault((row["vendor"], row["target"], row["kernel"]), []).append(row)

    def worst(rows: list[dict[str, Any]], key: str, pick: Callable[..., Any] = max) -> Any:
        values = [r[key] for r in rows if r.get(key) is not None]
        return pick(values) if values else None

    return [
        {
            "vendor": vendor,
            "target": target,
            "kernel": kernel,
            "compiled": len(rows),
            "failed": sum(not r["ok"] for r in rows),
            "registers": worst(rows, "registers"),
            "spills": worst(rows, "spills"),
            "shared_bytes": worst(rows, "shared_bytes"),
            "occupancy": worst(rows, "occupancy", min),
        }
        for (vendor, target, kernel), rows in grouped.items()
    ]


def print_report(report: Mapping[str, Any], stream: Any = None) -> None:
    out = stream or sys.stdout
    lines = summary_rows(report)
    columns = (
        "vendor",
        "target",
        "kernel",
        "compiled",
        "failed",
        "registers",
        "spills",
        "shared_bytes",
        "occupancy",
    )
    widths = {c: max([len(c)] + [len(_cell(r[c])) for r in lines]) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns), file=out)
    for line in lines:
        print("  ".join(_cell(line[c]).ljust(widths[c]) for c in columns), file=out)
    print(
        "\nregisters: VGPRs (AMD) or registers per thread (NVIDIA), the most of any specialisation; "
        "spills: VGPRs spilled to scratch (AMD) or spill-store bytes (NVIDIA); occupancy: waves per SIMD (AMD)",
        file=out,
    )
    for row in report["rows"]:
        if not row["ok"]:
            print(
                f"\nFAILED {row['kernel']} ({row['vendor']}, {row['target']}), used by {row['uses']}:",
                file=out,
            )
            print("  " + row["error"].replace("\n", "\n  "), file=out)
    for error in report["capture_errors"]:
        print(f"\nNOT CAPTURED {error['op']} at {error['sizes']}: {error['error']}", file=out)
    for kernel in report["unreached"]:
        print(
            f"\nUNREACHED {kernel}: no launcher launched it at these sizes (see the launchers' coverage_sizes)",
            file=out,
        )
    for skipped in report["not_compiled"]:
        target = f" {skipped['target']}" if skipped["target"] else ""
        print(f"not compiled: {skipped['vendor']}{target}: {skipped['reason']}", file=out)
    attempted = len(report["rows"])
    bad = sum(not r["ok"] for r in report["rows"])
    print(f"\n{attempted} compilations, {bad} failed (Triton {report['triton']})", file=out)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _builtins_compiled_by_default() -> list[DeviceDescriptor]:
    """The built-in vendors with default targets, in detection order (the registry is not started
    to build the command line: that would load the plugins)."""
    from .composition import builtin_descriptors

    return sorted((d for d in builtin_descriptors() if d.compile_targets), key=lambda d: -d.priority)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--vendor",
        action="append",
        metavar="NAME",
        help="only this vendor (repeatable; default: every vendor that binds the Triton family)",
    )
    parser.add_argument(
        "--target",
        action="append",
        metavar="NAME",
        help=f"only this target (repeatable): {', '.join(KNOWN_TARGETS)} or another gfx<NNN> / sm_<NN> "
        "(default: each vendor's: "
        + "; ".join(f"{d.name} {', '.join(d.compile_targets)}" for d in _builtins_compiled_by_default())
        + ")",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every specialisation the providers launch at the bench's sizes (default: one per kernel, "
        "that at the largest size)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the report as JSON")


def main(args: argparse.Namespace) -> int:
    from .reporting import end_status_line, status_line, unwritable_reason

    unwritable = unwritable_reason(args.json)
    if unwritable is not None:  # said before compiling, not after
        raise SpecHalError(f"--json {args.json}: {unwritable}")
    try:
        report = run(
            args.vendor,
            args.target,
            every=args.all,
            progress=lambda text: status_line(f"compiling {text}", stream=sys.stderr),
        )
    except ImportError as exc:
        if not (exc.name or "").startswith("triton"):
            raise
        raise SpecHalError(f'spec-hal compile needs Triton: pip install "spec-hal[triton]" ({exc})') from exc
    except ValueError as exc:
        raise SpecHalError(str(exc)) from exc
    finally:
        end_status_line(sys.stderr)
    print_report(report)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            write_json(report, handle)
    return 1 if failed(report) else 0


def write_json(report: Mapping[str, Any], handle: Any) -> None:
    """The report as JSON, one row per line (a committed report then diffs row by row)."""
    fields = [f" {json.dumps(key)}: {json.dumps(value)}" for key, value in report.items() if key != "rows"]
    rows = ",\n".join(f"  {json.dumps(row)}" for row in report["rows"])
    handle.write("{\n" + ",\n".join(fields) + ',\n "rows": [\n' + rows + "\n ]\n}\n")
