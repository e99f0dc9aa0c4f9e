"""Where a speculative iteration's time goes: spec_hal ops against the whole iteration.

One iteration of an eager engine runs under ``torch.profiler`` with every op call inside a range
``spec_hal::<op>`` (:class:`RangedOps`). On a device the profiler links each kernel to the range it
was launched in, so the ops' share is the device time of their kernels over the device time of every
kernel of the iteration (eager: the same kernels a captured replay runs, without its launch gaps). On
the CPU there is no device clock: the share is of host time.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from .. import ops, registry, runtime
from ..errors import BindingError
from ..opdef import OpDef
from .loop import Request, SpecDecoder

RANGE_PREFIX = "spec_hal::"
ITERATION_RANGE = "demo::iteration"


class RangedOps:
    """``spec_hal.ops`` with each op call inside a profiler range ``spec_hal::<name>``; everything
    that is not an op (``KVBuffers``, constants) passes through."""

    def __init__(self, namespace: Any = ops) -> None:
        self._namespace = namespace
        self._wrapped: dict[str, Callable[..., Any]] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._namespace, name)
        if not isinstance(value, OpDef):
            return value
        if name not in self._wrapped:

            def ranged(*args: Any, **kwargs: Any) -> Any:
                with record_function(RANGE_PREFIX + name):
                    return value(*args, **kwargs)

            ranged.__name__ = ranged.__qualname__ = name
            ranged.__doc__ = value.__doc__
            self._wrapped[name] = ranged
        return self._wrapped[name]


@dataclass(frozen=True)
class IterationProfile:
    ops_us: float  # time of the spec_hal op ranges
    iteration_us: float  # time of the whole iteration
    op_calls: int
    clock: str  # "device" or "host"

    @property
    def share(self) -> float:
        return self.ops_us / self.iteration_us if self.iteration_us else float("nan")


def device_activity(device: torch.device) -> ProfilerActivity | None:
    """The profiler activity that records ``device``'s kernels (its vendor's ``profiler_activity``),
    or None (host only)."""
    if device.type == "cpu":  # no device clock, also while a test emulates a vendor on the CPU
        return None
    try:
        name = registry.vendor_for(device.type).profiler_activity
    except BindingError:  # a device type no vendor serves (meta, mps): the host's clock only
        return None
    return getattr(ProfilerActivity, name, None) if name else None


#: A line Kineto (the profiler's backend) writes to the process's stderr as a profile starts and
#: stops ("USDT:<date> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start").
_PROFILER_MARK = re.compile(r"(USDT|STAGE):\d{4}-\d\d-\d\d [\d:.]+ \d+:\d+ \w+\.cpp:\d+\] ")


@contextmanager
def _without_profiler_marks() -> Iterator[None]:
    """Kineto writes its marks at the file-descriptor level, past ``sys.stderr`` and any logging
    setting: hold what the block writes to descriptor 2 in a file and write back every other line."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode(errors="replace")
            kept = [line for line in text.splitlines(keepends=True) if not _PROFILER_MARK.match(line)]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


def profile_iteration(engine: SpecDecoder, requests: list[Request]) -> IterationProfile:
    """Prefill ``requests`` on ``engine`` (eager: ``use_graphs=False``), run one iteration to warm up,
    then profile the next; then the requests end (their ``max_new_tokens`` cut to what they have)
    and give their KV back."""
    if engine.graphs:
        raise ValueError("engine: profile an eager engine (SpecConfig(use_graphs=False))")
    engine.use_ops(RangedOps())
    device = engine.device
    engine.prefill(requests)
    active = engine.advance(requests)
    runtime.synchronize(device)
    activity = device_activity(device)
    activities = [ProfilerActivity.CPU] + ([activity] if activity is not None else [])
    with (
        _without_profiler_marks(),
        profile(activities=activities, acc_events=True) as profiler,
        record_function(ITERATION_RANGE),
    ):
        active = engine.advance(active)
        runtime.synchronize(device)
    for request in active:  # done here: the profile has its iteration
        request.max_new_tokens = len(request.output)
    while active:
        active = engine.advance(active)
    engine.use_ops(ops)
    # the host-side ranges (a device trace repeats each range as a device annotation: not counted)
    events = [e for e in profiler.events() if e.device_type == DeviceType.CPU and not e.is_async]
    ranges = [e for e in events if e.name.startswith(RANGE_PREFIX)]
    iteration = [e for e in events if e.name == ITERATION_RANGE]
    if activity is None:
        return IterationProfile(
            ops_us=sum(e.cpu_time_total for e in ranges),
            iteration_us=sum(e.cpu_time_total for e in iteration),
            op_calls=len(ranges),
            clock="host",
        )
    return IterationProfile(
        ops_us=sum(e.device_time_total for e in ranges),
        iteration_us=sum(e.device_time_total for e in iteration),
        op_calls=len(ranges),
        clock="device",
    )
