"""Where an eager call's host time goes, layer by layer.

For one op and a few input sets of the same shapes (rotated, so that nothing is measured on one
set of tensors alone), :func:`breakdown` times

* the public call ``spec_hal.ops.<op>(...)``;
* ``op.dispatch(device, *provider_args)``: the binding lookup and the provider, for every dispatch
  the public call makes (an op built on others dispatches theirs too: the accepted-token move
  dispatches the KV move);
* the bound providers called directly;
* for Triton providers, each launch's two stages through its launch plan
  (``spec_hal/kernels/triton/launch.py``): binding the arguments (the plan's reader and lookup,
  which stand in for Triton's binder) and the compiled kernel's launcher;

and derives ``validation_us`` (public - dispatch: the contract's checks, allocations and argument
handling), ``dispatch_us`` (dispatch - provider), ``glue_us`` (provider - the launches' stages: the
provider's Python, sizing and the launch wrapper) and ``binder_us`` / ``launcher_us`` (summed over
launches). Medians of many calls.

The calls launch real work. Where the device is slower than the host, a timing loop would fill the
device's launch queue and then time the device (every launch waiting for a free entry). So each
loop starts with the device drained (untimed, ``drain``) and queues at most about
:data:`QUEUED_LAUNCHES` launches: an op making many launches per call is timed over fewer calls.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from .. import ops as public_ops
from ..opdef import OpDef

#: Launches one timing loop may queue: well below the depth of a device's launch queue.
QUEUED_LAUNCHES = 512
#: Calls a timing loop makes at least, however many launches each makes.
MIN_REPEATS = 20


def capped_repeats(repeats: int, launches_per_call: int) -> int:
    """``repeats``, lowered so that a loop queues about :data:`QUEUED_LAUNCHES` launches at most
    (never below :data:`MIN_REPEATS` calls)."""
    if launches_per_call <= 0:
        return repeats
    return max(MIN_REPEATS, min(repeats, QUEUED_LAUNCHES // launches_per_call))


def samples(fn: Callable[[], Any], *, repeats: int, warmup: int = 3, min_seconds: float = 0.0) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn`` (more, up to 2000, until ``min_seconds`` have
    passed), after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    taken: list[float] = []
    deadline = time.perf_counter() + min_seconds
    while len(taken) < repeats or (time.perf_counter() < deadline and len(taken) < 2000):
        started = time.perf_counter()
        fn()
        taken.append(time.perf_counter() - started)
    return taken


def _median_seconds(fn: Callable[[], Any], repeats: int, drain: Callable[[], None] | None) -> float:
    if drain is not None:
        drain()
    taken = sorted(samples(fn, repeats=repeats))
    return taken[len(taken) // 2]


def rotating(calls: list[Callable[[], Any]]) -> Callable[[], Any]:
    """One call per invocation, cycling through ``calls`` (input sets of the same shapes)."""
    cycle = itertools.cycle(calls)
    return lambda: next(cycle)()


#: Held while a call's dispatches are captured (the capture swaps ``OpDef.dispatch`` for everyone).
_CAPTURING = threading.Lock()
#: One dispatch of a public call: the op dispatched, the device and the provider arguments.
Dispatch = tuple[OpDef, torch.device, tuple[Any, ...]]


def _each(calls: list[Dispatch]) -> None:
    for op, device, args in calls:
        op.dispatch(device, *args)


def _call_each(calls: list[tuple[Callable[..., None], tuple[Any, ...]]]) -> None:
    for fn, args in calls:
        fn(*args)


def _provider_args(op: OpDef, kwargs: dict[str, Any]) -> list[Dispatch]:
    """Each dispatch one public call of ``op`` makes (the call runs once), of ``op`` or of the ops
    it is built on, in order. Only this thread's dispatches count, one capture at a time."""
    seen: list[Dispatch] = []
    thread = threading.get_ident()
    depth = 0  # a dispatch made by a provider is part of that provider's time

    def record(dispatched: OpDef, device: torch.device, *args: Any) -> None:
        nonlocal depth
        if threading.get_ident() != thread:  # another thread's dispatch: not this call's
            method(dispatched, device, *args)
            return
        if depth == 0:
            seen.append((dispatched, device, args))
        depth += 1
        try:
            method(dispatched, device, *args)  # later checks of the call may read what it writes
        finally:
            depth -= 1

    with _CAPTURING:
        method = OpDef.dispatch
        OpDef.dispatch = record  # type: ignore[method-assign, assignment]  # every op's, for this call only
        try:
            op(**kwargs)
        finally:
            OpDef.dispatch = method  # type: ignore[method-assign]
    return seen


def breakdown(
    op_name: str,
    inputs: list[dict[str, Any]],
    *,
    repeats: int = 400,
    drain: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Host microseconds per layer of ``op_name`` called eagerly on ``inputs`` (see module doc;
    ``drain`` waits for the device, before each timing loop)."""
    op = getattr(public_ops, op_name)
    dispatches = [_provider_args(op, kwargs) for kwargs in inputs]
    recorded = recorded_launches(functools.partial(op, **inputs[0]))
    repeats = capped_repeats(repeats, launch_count(recorded))
    public = _median_seconds(rotating([functools.partial(op, **kwargs) for kwargs in inputs]), repeats, drain)
    row = {"public_us": public * 1e6}
    if not all(dispatches):  # returned before dispatching (an empty batch): nothing more to split
        return row
    dispatch = _median_seconds(rotating([functools.partial(_each, d) for d in dispatches]), repeats, drain)
    bound = [[(each.provider_for(dev, args), args) for each, dev, args in d] for d in dispatches]
    provider = _median_seconds(rotating([functools.partial(_call_each, b) for b in bound]), repeats, drain)
    row |= {
        "validation_us": (public - dispatch) * 1e6,
        "dispatch_us": (dispatch - provider) * 1e6,
        "provider_us": provider * 1e6,
    }
    stages = _launch_stages(recorded, repeats, drain)
    if stages is not None:
        binder, launcher, launches = stages
        row |= {
            "glue_us": (provider - binder - launcher) * 1e6,
            "binder_us": binder * 1e6,
            "launcher_us": launcher * 1e6,
            "launches": launches,
        }
    return row


def recorded_launches(call: Callable[[], Any]) -> list[Any]:
    """The Triton launches ``call`` makes (it runs once), as :func:`launch.recording` records them;
    none without Triton."""
    try:
        from ..kernels.triton import launch
    except ImportError:
        return []
    with launch.recording() as launches:
        call()
    return launches


def each_launch(recorded: list[Any]) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """Per recorded entry (a launch or a launch sequence), its launches and their arguments."""
    return [(getattr(made, "launches", (made,)), args) for made, args in recorded]


def launch_count(recorded: list[Any]) -> int:
    """The launches of recorded entries, each of a sequence's counted."""
    return sum(len(launches) for launches, _ in each_launch(recorded))


def _launch_stages(
    launches: list[Any], repeats: int, drain: Callable[[], None] | None
) -> tuple[float, float, int] | None:
    """Binder and launcher seconds summed over the recorded Triton launches of one call; None when
    there are none, or one does not launch through a launch plan (portable torch, say)."""
    if not launches:
        return None
    from ..kernels.triton import launch

    binder = launcher = 0.0
    for recorded, args in launches:
        if drain is not None:
            drain()
        stages = launch.stage_seconds(recorded, args, repeats=repeats)
        if stages is None:
            return None
        binder += stages[0]
        launcher += stages[1]
    return binder, launcher, launch_count(launches)
