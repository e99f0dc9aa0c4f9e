"""``spec-hal bench --host-profile``: where the eager host time of an op goes.

For each op: the host time per public call (``spec_hal.ops.<name>``, unprofiled, after a warm-up),
then a cProfile of the same calls, functions sorted by their own time. Exploration for the eager
host-time target; the bench's ``host_us`` column is the figure for docs.
"""

from __future__ import annotations

import cProfile
import functools
import io
import pstats
import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import ops as public_ops
from .. import registry, runtime
from ..conformance.runner import device_context, torch_device_of
from . import TYPICAL, _accepted, _size_label, builders

#: Batch size profiled when ``--host-profile`` names none.
DEFAULT_BS = 64


def profile_call(
    call: Callable[[], Any], device: Any, *, calls: int = 1000, warmup: int = 50, top: int = 14
) -> dict[str, Any]:
    """Host time per call of ``call`` and the ``top`` functions with the most own time under cProfile.

    Returns ``per_call_us`` (unprofiled), ``top`` (function, calls and own / cumulative µs per call)
    and ``text`` (pstats' table)."""
    for _ in range(warmup):
        call()
    runtime.synchronize(device)
    started = time.perf_counter()
    for _ in range(calls):
        call()
    per_call_us = (time.perf_counter() - started) / calls * 1e6
    runtime.synchronize(device)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        call()
    profile.disable()
    runtime.synchronize(device)
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text).sort_stats("tottime")
    stats.print_stats(top)
    entries = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]  # type: ignore[attr-defined]
    return {
        "per_call_us": round(per_call_us, 2),
        "top": [
            {
                "function": f"{path}:{line}({name})",
                "calls": primitive_calls,
                "own_us_per_call": round(own / calls * 1e6, 3),
                "cumulative_us_per_call": round(cumulative / calls * 1e6, 3),
            }
            for (path, line, name), (primitive_calls, _total, own, cumulative, _callers) in entries
        ],
        "text": text.getvalue(),
    }


def run(
    device_name: str | None = None,
    ops: Iterable[str] | None = None,
    bs: int = DEFAULT_BS,
    *,
    calls: int = 1000,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Profile the public call of each op (default: every op the bench builds inputs for) at batch
    size ``bs`` with the typical tree, on a device (default: the detected one)."""
    descriptor = registry.device(device_name) if device_name else registry.current_device()
    device = torch_device_of(descriptor)
    wanted = None if ops is None else set(ops)
    found = []
    with device_context(descriptor):
        for op, builder in sorted(builders().items()):
            if wanted is not None and op not in wanted:
                continue
            if progress:
                progress(f"host profile: {op}")
            sizes = _accepted(builder, {**TYPICAL, "bs": bs})
            call = functools.partial(getattr(public_ops, op), **builder(device, **sizes))
            found.append(
                {"op": op, "size": _size_label(sizes), "bs": bs} | profile_call(call, device, calls=calls)
            )
    return found


def print_profiles(profiles: list[dict[str, Any]], stream: Any = None) -> None:
    """Per op: a heading with the host time per call, then pstats' table."""
    for entry in profiles:
        print(
            f"=== {entry['op']} bs={entry['bs']}: {entry['per_call_us']:.2f} us per call (unprofiled)",
            file=stream,
        )
        print(entry["text"].rstrip(), file=stream)


__all__ = ["DEFAULT_BS", "print_profiles", "profile_call", "run"]
