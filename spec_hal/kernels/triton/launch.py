"""Eager launches through the compiled kernel handle: Triton's own specialisation, less of its glue.

``jit_fn[grid](*args)`` costs, on the H200's host (``tools/launch_overhead.py``, 15 arguments): the
argument binder (Triton's per-argument specialisation, about half a microsecond per argument), the C
launcher (about 7 us, whatever the arguments), and about 10 us of Python around them (cache-key
strings, option parsing, global-value checks, launch-metadata hooks). :class:`Kernel` keeps the binder,
so a kernel runs exactly the binary Triton would pick for these arguments, and skips the rest: the
compiled kernel is cached per (device, specialisation, options) and its launcher called directly.

Launches fall back to the plain JIT path when the fast one cannot apply: under ``TRITON_INTERPRET=1``,
while a Triton launch hook is installed (profilers), on a device's first launch and on every new
specialisation (which compiles through Triton and is then cached here). The fast path runs no
``JITFunction`` pre-run hooks: the family's kernels register none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Sequence
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
        if _INTERPRETED or _launch_hooks_installed():
            self.jit[grid](*args, **kwargs)
            return
        active = driver.active
        device = active.get_current_device()
        caches = self.jit.device_caches.get(device)  # a plain get: no binder is created here
        if caches is None:
            self.jit[grid](*args, **kwargs)  # the device's first launch builds Triton's caches
            return
        bound, specialization, options = caches[-1](*args, **kwargs)
        # The JIT adds these knobs to every compile: a switch must not reuse a binary built without.
        knobs_state = (knobs.runtime.debug, knobs.compilation.instrumentation_mode)
        key = (device, tuple(specialization), tuple(options.items()), knobs_state)
        compiled = self._compiled.get(key)
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
            active.get_current_stream(device),
            compiled.function,
            compiled.packed_metadata,
            None,  # launch metadata: only built for launch hooks, which take the JIT path above
            None,
            None,
            *bound.values(),
        )


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
