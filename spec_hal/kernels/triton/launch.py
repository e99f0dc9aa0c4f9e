"""Eager launches through the compiled kernel handle: Triton's own specialisation, less of its glue.

``jit_fn[grid](*args)`` runs the argument binder (Triton's per-argument specialisation), the compiled
kernel's C launcher, and Python around them (cache-key strings, option parsing, global-value checks,
launch-metadata hooks): the last is most of a small launch's host time (``spec-hal bench`` reports
each stage). :class:`Kernel` keeps the binder,
so a kernel runs exactly the binary Triton would pick for these arguments, and skips the rest: the
compiled kernel is cached per (device, specialisation, options) and its launcher called directly.

Launches fall back to the plain JIT path when the fast one cannot apply: under ``TRITON_INTERPRET=1``,
while a Triton launch hook is installed (profilers), on a device's first launch and on every new
specialisation (which compiles through Triton and is then cached here). The fast path runs no
``JITFunction`` pre-run hooks: the family's kernels register none.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

from triton import knobs
from triton.runtime import driver


class Kernel:
    """A ``@triton.jit`` kernel, launched like one: ``kernel[grid](*args, **constexprs_and_options)``.

    Only for kernels launched from the host (a kernel called from another kernel stays a plain
    ``@triton.jit`` function).
    """

    __slots__ = ("jit", "_compiled")

    def __init__(self, jit_fn: Any) -> None:
        self.jit = jit_fn
        self._compiled: dict[Hashable, Any] = {}

    def __getitem__(self, grid: Sequence[int]) -> Callable[..., None]:
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def launch(self, grid: Sequence[int], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if _recorded is not None:
            _recorded.append((self, tuple(grid), args, kwargs))
        if _INTERPRETED or _launch_hooks_installed():
            self.jit[grid](*args, **kwargs)
            return
        active = driver.active
        found = self._lookup(active, args, kwargs)
        if found is None:  # the device's first launch builds Triton's caches
            self.jit[grid](*args, **kwargs)
            return
        key, bound, compiled = found
        if compiled is None:
            compiled = self.jit[grid](*args, **kwargs)  # compiles (or finds) Triton's binary for it
            if compiled is not None:
                self._compiled[key] = compiled
            return
        size = len(grid)
        compiled.run(
            grid[0],
            grid[1] if size > 1 else 1,
            grid[2] if size > 2 else 1,
            active.get_current_stream(key[0]),
            compiled.function,
            compiled.packed_metadata,
            None,  # launch metadata: only built for launch hooks, which take the JIT path above
            None,
            None,
            *bound.values(),
        )

    def _lookup(
        self, active: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], Any, Any] | None:
        """(cache key, bound arguments, compiled kernel or None) for these arguments on the current
        device of the ``active`` Triton driver, through Triton's own binder; None before the
        device's first launch."""
        device = active.get_current_device()
        caches = self.jit.device_caches.get(device)  # a plain get: no binder is created here
        if caches is None:
            return None
        bound, specialization, options = caches[-1](*args, **kwargs)
        # The JIT adds these knobs to every compile: a switch must not reuse a binary built without.
        knobs_state = (knobs.runtime.debug, knobs.compilation.instrumentation_mode)
        key = (device, tuple(specialization), tuple(options.items()), knobs_state)
        return key, bound, self._compiled.get(key)


#: The launches of the block under :func:`recording` (benchmarks only); None: nothing recorded.
_recorded: list[tuple[Kernel, tuple[int, ...], tuple[Any, ...], dict[str, Any]]] | None = None


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[Kernel, tuple[int, ...], tuple[Any, ...], dict[str, Any]]]]:
    """Record every launch made inside the block as (kernel, grid, args, kwargs); benchmarks use it
    to time a provider's launches stage by stage (:func:`stage_seconds`)."""
    global _recorded
    previous, _recorded = _recorded, []
    try:
        yield _recorded
    finally:
        _recorded = previous


def stage_seconds(
    kernel: Kernel, grid: tuple[int, ...], args: tuple[Any, ...], kwargs: dict[str, Any], repeats: int = 200
) -> tuple[float, float] | None:
    """Host seconds per call of the two stages of a fast-path launch: Triton's argument binder, and
    the compiled kernel's launcher (which launches the kernel for real). None where the launch
    would not take the fast path (first launch, interpreter, launch hooks)."""
    if _INTERPRETED or _launch_hooks_installed():
        return None
    active = driver.active
    found = kernel._lookup(active, args, kwargs)
    if found is None or found[2] is None:
        return None
    key, bound, compiled = found
    device = key[0]
    binder = kernel.jit.device_caches[device][-1]
    started = time.perf_counter()
    for _ in range(repeats):
        binder(*args, **kwargs)
    binder_seconds = (time.perf_counter() - started) / repeats
    values = tuple(bound.values())
    x, y, z = (*grid, 1, 1)[:3]
    started = time.perf_counter()
    for _ in range(repeats):
        compiled.run(
            x, y, z, active.get_current_stream(device), compiled.function, compiled.packed_metadata,
            None, None, None, *values,
        )  # fmt: skip
    return binder_seconds, (time.perf_counter() - started) / repeats


def _launch_hooks_installed() -> bool:
    """A launch enter or exit hook is set: None when there is none, except Triton 3.6's ``HookChain``
    (never None) whose ``calls`` list is empty then."""
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


def cdiv(numerator: int, divisor: int) -> int:
    """Host-side ``triton.cdiv``: Triton's is a constexpr function whose host call costs microseconds."""
    return -(-numerator // divisor)


def next_power_of_2(n: int) -> int:
    """Host-side ``triton.next_power_of_2`` (0 for 0), without the constexpr-function call."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def kernel(jit_fn: Any) -> Kernel:
    """Decorator, above ``@triton.jit``: the kernel launches through :class:`Kernel`."""
    return Kernel(jit_fn)


#: Read once: TRITON_INTERPRET must be set before kernels are decorated anyway.
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
