"""``spec-hal bench --sweep``: graph-replay device time of the Triton providers of the copy-bound ops
and of the passes over the vocabulary under alternative launch configurations.

For each op, the Triton family's launcher of the op is registered for the device's vendor with each
candidate :class:`~spec_hal.kernels.triton.config.LaunchConfig` in turn (the vendor's own
configuration first, then it with every tile size x warp count asked for, as the copy tile and as
the vocabulary tile: each op reads the one it walks in) and timed at the bench's
large sizes (or bs 64 / 512). This is exploration that picks a vendor's configuration; figures for
docs come from ``spec-hal bench`` itself. The vendor's configuration is registered again when the
sweep ends.

Candidates: ``--sweep-kib`` / ``--sweep-warps`` (comma-separated), defaulting to the environment
variables ``SWEEP_KIB`` / ``SWEEP_WARPS``, else :data:`DEFAULT_KIB` / :data:`DEFAULT_WARPS`; and
``--sweep-row-programs`` (``SWEEP_ROW_PROGRAMS``, else the vendor's own ``row_programs``): below that
many rows the renormalisation splits rows into chunks of the copy tile.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .. import ops as public_ops
from .. import registry
from ..conformance.runner import device_context, torch_device_of
from ..errors import SpecHalError
from ..registry import TRITON
from ..testing import use_provider
from . import TYPICAL, _accepted, _size_label, bench_facts, builders, bytes_moved, time_graph

#: Tile sizes in KiB and warp counts tried when neither the option nor the environment names them.
DEFAULT_KIB = "8,16,32"
DEFAULT_WARPS = "4,8,16"
#: Sizes of an op without large sizes in the bench.
DEFAULT_SWEEP_SIZES: list[dict[str, Any]] = [{"bs": 64}, {"bs": 512}]


def parse_counts(text: str) -> list[int]:
    """``"8,16,32"`` -> ``[8, 16, 32]``: positive integers, comma-separated, at least one, each once.

    Raises ValueError naming the bad entry (argparse turns it into a usage error)."""
    values: list[int] = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        try:
            value = int(entry)
        except ValueError:
            raise ValueError(f"{entry!r} is not an integer") from None
        if value <= 0:
            raise ValueError(f"{value} is not positive")
        if value not in values:
            values.append(value)
    if not values:
        raise ValueError(f"no value in {text!r}")
    return values


def _chosen(
    given: list[int] | None, variable: str, default: str, environ: Mapping[str, str] | None
) -> list[int]:
    if given is not None:
        return given
    text = (os.environ if environ is None else environ).get(variable)
    if not text:
        return parse_counts(default)
    try:
        return parse_counts(text)
    except ValueError as exc:
        raise SpecHalError(f"{variable}={text!r}: {exc}") from None


def tile_kib(given: list[int] | None = None, environ: Mapping[str, str] | None = None) -> list[int]:
    """The tile sizes (KiB) to try: ``given`` (``--sweep-kib``), else ``SWEEP_KIB``, else
    :data:`DEFAULT_KIB`."""
    return _chosen(given, "SWEEP_KIB", DEFAULT_KIB, environ)


def warp_counts(given: list[int] | None = None, environ: Mapping[str, str] | None = None) -> list[int]:
    """The warp counts to try: ``given`` (``--sweep-warps``), else ``SWEEP_WARPS``, else
    :data:`DEFAULT_WARPS`."""
    return _chosen(given, "SWEEP_WARPS", DEFAULT_WARPS, environ)


def row_programs(
    given: list[int] | None = None, environ: Mapping[str, str] | None = None
) -> list[int] | None:
    """The ``row_programs`` to try: ``given`` (``--sweep-row-programs``), else ``SWEEP_ROW_PROGRAMS``,
    else None (the vendor's own only)."""
    if given is None and not (os.environ if environ is None else environ).get("SWEEP_ROW_PROGRAMS"):
        return None
    return _chosen(given, "SWEEP_ROW_PROGRAMS", "", environ)


def candidates(
    base: Any, kib: Iterable[int], warps: Iterable[int], programs: Iterable[int] | None = None
) -> list[Any]:
    """``base`` (a LaunchConfig) with each tile size (KiB) x warp count as both its copy tile and its
    vocabulary tile (each op reads the one it walks in), named ``tile<kib>k-w<warps>``, and with
    ``programs`` each ``row_programs`` of them too (``-rp<n>``); tile sizes outer, in the order
    given."""
    warps = list(warps)
    suffixed = programs is not None
    counts = list(programs) if programs is not None else [base.row_programs]
    return [
        dataclasses.replace(
            base,
            name=f"tile{k}k-w{w}" + (f"-rp{p}" if suffixed else ""),
            copy_block_bytes=k << 10,
            copy_num_warps=w,
            row_programs=p,
            vocab_block_bytes=k << 10,
            vocab_num_warps=w,
        )
        for k in kib
        for w in warps
        for p in counts
    ]


def tiles() -> dict[str, str]:
    """The ops a sweep times, in the Triton family's order, with the tile each walks in: the
    launchers whose kernels walk in a tile the vendor's configuration chooses (the copy tile of the
    copy-bound ops, the vocabulary tile of the passes over a vocabulary row). Without Triton there
    is nothing to sweep: a :class:`SpecHalError` says so."""
    try:
        from ..kernels.triton.family import LAUNCHERS
    except ImportError as exc:
        if not (exc.name or "").startswith("triton"):
            raise
        raise SpecHalError(
            f"--sweep times the Triton family's launchers; Triton is not installed ({exc})"
        ) from None
    return {launcher.op: launcher.tile for launcher in LAUNCHERS if launcher.tile is not None}


def sweep_ops(requested: Iterable[str] | None) -> list[str]:
    """The ops to sweep, in the family's order (default: all of them); an op a sweep cannot time is
    an error that lists those it can."""
    swept = list(tiles())
    if requested is None:
        return swept
    requested = set(requested)
    unknown = sorted(requested - set(swept))
    if unknown:
        raise SpecHalError(
            f"--sweep cannot time {', '.join(unknown)}: it sweeps the copy-bound and vocabulary Triton ops "
            f"({', '.join(swept)})"
        )
    return [op for op in swept if op in requested]


def sizes_of(op: str) -> list[dict[str, Any]]:
    """The sizes an op is swept at: the bench's large sizes of the op (an op walking the vocabulary
    also at bs 1, 64 and 512 of the typical vocabulary: few programs, and as many as make the walks
    that do more than stream take the copy tile), else bs 64 and 512."""
    large = list(map(dict, bench_facts(op).large_sizes)) or DEFAULT_SWEEP_SIZES
    typical = {s["bs"] for s in large if s.get("vocab", TYPICAL["vocab"]) == TYPICAL["vocab"]}
    walks_vocabulary = tiles().get(op) == "vocabulary"
    small_batches = [{"bs": b} for b in (1, 64, 512) if b not in typical] if walks_vocabulary else []
    return [*small_batches, *large]


def format_line(row: dict[str, Any]) -> str:
    return (
        f"{row['op']:40s} {row['config']:20s} {row['size']:40s} {row['graph_us']:9.2f} us "
        f"{row['gbs']:8.0f} GB/s"
    )


def _bind(op: str, vendor: str, config: Any) -> None:
    """Register the Triton family's launcher of ``op`` for ``vendor`` with ``config``, in place of
    the one bound (the same registration the family binding makes)."""
    from ..composition import register_launcher
    from ..kernels.triton.family import launcher_of

    launcher = launcher_of(op)
    assert launcher is not None, op  # sweep_ops() only names ops of the family
    register_launcher(vendor, launcher, config)


def run(
    device_name: str | None = None,
    ops: Iterable[str] | None = None,
    kib: Iterable[int] | None = None,
    warps: Iterable[int] | None = None,
    emit: Callable[[str], None] | None = None,
    programs: Iterable[int] | None = None,
) -> list[dict[str, Any]]:
    """Time each op's Triton provider under each launch configuration (tile sizes ``kib`` x warp
    counts ``warps`` x ``programs`` row programs, by default :func:`tile_kib` / :func:`warp_counts` /
    :func:`row_programs`); ``emit`` receives each result line as it is measured. Returns one row per
    (op, configuration, size)."""
    kib = tile_kib(None if kib is None else list(kib))
    warps = warp_counts(None if warps is None else list(warps))
    programs = row_programs(None if programs is None else list(programs))
    descriptor = registry.device(device_name) if device_name else registry.current_device()
    device = torch_device_of(descriptor)
    if device.type == "cpu":
        raise SpecHalError(
            f"--sweep times graph replays of Triton providers on an accelerator; {descriptor.name} is not one"
        )
    names = sweep_ops(ops)  # after the device: the ops come from the Triton family, absent without Triton
    base = descriptor.families.get(TRITON)
    if base is None:
        raise SpecHalError(f"--sweep times the Triton family's launchers; {descriptor.name} does not bind it")
    registry.REGISTRY.load_bindings(descriptor)  # bound now, so that the family binding comes first
    configs: list[Any] = [base, *candidates(base, kib, warps, programs)]
    all_builders = builders()
    rows: list[dict[str, Any]] = []
    with device_context(descriptor):
        for op in names:
            sizes = sizes_of(op)
            builder = all_builders[op]
            inputs = [builder(device, **_accepted(builder, {**TYPICAL, **s})) for s in sizes]
            try:
                for config in configs:
                    _bind(op, descriptor.name, config)
                    with use_provider(op, TRITON):
                        for s, kwargs in zip(sizes, inputs, strict=True):
                            call = functools.partial(getattr(public_ops, op), **kwargs)
                            us = time_graph(call, device, calls_per_graph=5, repeats=10).median_us
                            row = {
                                "op": op,
                                "config": config.name,
                                "copy_block_bytes": config.copy_block_bytes,
                                "copy_num_warps": config.copy_num_warps,
                                "vocab_block_bytes": config.vocab_block_bytes,
                                "vocab_num_warps": config.vocab_num_warps,
                                "copy_tile_programs": config.copy_tile_programs,
                                "row_programs": config.row_programs,
                                "size": _size_label(s),
                                "graph_us": round(us, 2),
                                "gbs": round(bytes_moved(op, kwargs) / us / 1e3, 1),
                            }
                            rows.append(row)
                            if emit is not None:
                                emit(format_line(row))
            finally:
                _bind(op, descriptor.name, base)
    return rows


__all__ = [
    "DEFAULT_KIB",
    "DEFAULT_WARPS",
    "candidates",
    "parse_counts",
    "row_programs",
    "run",
    "sweep_ops",
    "tile_kib",
    "tiles",
    "warp_counts",
]
