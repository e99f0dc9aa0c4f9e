"""Eager launches through launch plans: Triton's own binaries, without Triton's per-call glue.

``jit_fn[grid](*args)`` runs, on every call, Triton's argument binder (a specialisation per
argument), the compiled kernel's launcher (which asks the driver to look up every tensor's device
pointer) and Python around both (cache keys, option parsing, global-value checks). A :class:`Kernel`
launches the same binaries with less of that: its first launch of a specialisation goes through
Triton, and leaves a **plan**: the compiled kernel and the constexpr arguments, filed under a key
that a generated **reader** computes straight from the arguments. Later launches with that key
call the compiled kernel's launcher directly (its C entry point, past the Python wrapper: see
:func:`direct_launch`), with the tensors' device pointers as plain ints.

The key is never coarser than Triton's specialisation, so a plan always runs the binary Triton
would pick: a tensor counts by its dtype and its pointer's alignment (``ptr & 15``, where Triton
looks at ``ptr % 16 == 0``; the key holds one 0 when every pointer is aligned, the common case),
None as None, an int by its value (Triton looks at ``== 1``, ``% 16`` and the range), a bool by its
value, a float by its type alone (Triton gives every float ``fp32``), every keyword argument (the
constexprs and launch options) by name and value, and the current device. Nothing is keyed by a
tensor's identity or address. The key is one flat tuple: hashing it is part of every launch.

A kernel keeps one reader per **signature**: the kind of each positional argument (tensor or None,
int, bool, float: exact Python types, as Triton specialises each differently) and the keyword
names, for up to :data:`MAX_SIGNATURES` of them, so that one kernel may serve call sites passing,
say, an int k or a float top_p at the same position. A reader accepts only its own signature's
kinds (it answers None to others, before touching a tensor), and plans are filed per signature, so
a plan is only ever found for arguments of the kinds that filed it.

Launches take Triton's own path when no plan can apply: under ``TRITON_INTERPRET=1``, while a
Triton launch hook is installed (profilers) or Triton's debug or instrumentation switch is on (its
binaries differ then), on each new key (which then files its plan), for
arguments of other kinds (numpy scalars, int subclasses) or past :data:`MAX_SIGNATURES` signatures,
and once a kernel holds :data:`MAX_PLANS` plans (arguments whose values change on every call). Plans
run no ``JITFunction`` pre-run hooks and skip Triton's check that the kernel's globals are
unchanged: the family's kernels register none and read only constants.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import torch
from triton import knobs
from triton.runtime import driver

#: Plans one kernel keeps; launches with further keys take Triton's path.
MAX_PLANS = 4096
#: Argument signatures one kernel plans for; launches of further signatures take Triton's path.
MAX_SIGNATURES = 4

Reader = Callable[..., tuple[tuple[Any, ...], tuple[Any, ...]] | None]
Signature = tuple[str, tuple[str, ...]]
#: Held while any kernel files a new signature (rare: a kernel's first launches); launches only read
#: the signature tables.
_FILING = threading.Lock()


class Plan:
    """What one launch key needs: ``plan.go(grid_x, grid_y, grid_z, stream, values)`` launches the
    compiled kernel on the positional launcher ``values`` (see :func:`direct_launch`)."""

    __slots__ = ("go", "run", "function", "metadata", "tail")

    def __init__(self, compiled: Any, tail: tuple[Any, ...]) -> None:
        self.run = compiled.run
        self.function = compiled.function
        self.metadata = compiled.packed_metadata
        #: The values Triton gives the parameters after the positional ones (constexprs: Triton's
        #: launchers take every parameter and skip those).
        self.tail = tail
        self.go = direct_launch(self.run, self.function, self.metadata, tail) or self._through_wrapper

    def _through_wrapper(self, x: int, y: int, z: int, stream: int, values: tuple[Any, ...]) -> None:
        self.run(x, y, z, stream, self.function, self.metadata, None, None, None, *values, *self.tail)


class _Mark:
    """A stand-in argument whose place in a launcher call is looked for (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def direct_launch(
    run: Any, function: Any, metadata: Any, tail: tuple[Any, ...]
) -> Callable[..., None] | None:
    """``go(x, y, z, stream, values)``: the call Triton's launcher ``run`` makes to its C entry point
    (``run.launch``), written out once, so that each launch skips the launcher's Python wrapper.

    The call is learnt, not assumed (its argument order differs between Triton versions and
    vendors): the wrapper is called once on a copy of ``run`` whose ``launch`` records its
    arguments, with stand-ins for the grid, the stream and the kernel's arguments. Each stand-in
    must come back exactly once, the kernel's arguments last (flat or as one tuple), and everything
    else the wrapper passes is then constant for this kernel. None where that does not hold, or
    where the wrapper allocates scratch memory per launch: the wrapper is then called.
    """
    if getattr(run, "global_scratch_size", 0) or getattr(run, "profile_scratch_size", 0):
        return None
    if not callable(getattr(run, "launch", None)):
        return None
    grid_and_stream = tuple(_Mark(name) for name in ("x", "y", "z", "stream"))
    arg_marks = tuple(_Mark(f"arg{i}") for i in range(3))  # the wrapper forwards any number
    calls: list[tuple[Any, ...]] = []
    probe = copy.copy(run)
    probe.launch = lambda *args: calls.append(args)
    try:
        probe(*grid_and_stream, function, metadata, None, None, None, *arg_marks)
    except Exception:  # a wrapper that does more with its arguments than pass them on
        return None
    if len(calls) != 1:
        return None
    (passed,) = calls
    if len(passed) > len(arg_marks) and all(
        a is b for a, b in zip(passed[-len(arg_marks) :], arg_marks, strict=True)
    ):
        prefix, flat = passed[: -len(arg_marks)], True
    elif passed and isinstance(passed[-1], tuple) and len(passed[-1]) == len(arg_marks):
        if not all(a is b for a, b in zip(passed[-1], arg_marks, strict=True)):
            return None
        prefix, flat = passed[:-1], False
    else:
        return None
    names, constants = [], {}
    for i, value in enumerate(prefix):
        if isinstance(value, _Mark):
            if value not in grid_and_stream or value.name in names:
                return None
            names.append(value.name)
        else:
            names.append(f"c{i}")
            constants[f"c{i}"] = value
    if sorted(n for n in names if not n.startswith("c")) != ["stream", "x", "y", "z"]:
        return None
    arguments = "*values, *tail" if flat else "values + tail"
    source = f"def go(x, y, z, stream, values):\n    launch({', '.join(names)}, {arguments})\n"
    namespace: dict[str, Any] = {"launch": run.launch, "tail": tail, **constants}
    exec(compile(source, "<spec_hal direct launch>", "exec"), namespace)
    go: Callable[..., None] = namespace["go"]
    return go


class Kernel:
    """A ``@triton.jit`` kernel, launched like one: ``kernel[grid](*args, **constexprs_and_options)``.

    Only for kernels launched from the host (a kernel called from another kernel stays a plain
    ``@triton.jit`` function). Tensors and None go by position, constexprs and launch options by
    keyword.
    """

    __slots__ = ("jit", "_plans", "_readers", "_signatures")

    def __init__(self, jit_fn: Any) -> None:
        self.jit = jit_fn
        #: Plans by key; a key starts with the number of the signature whose reader made it.
        self._plans: dict[Hashable, Plan] = {}
        #: The reader of each signature planned for, in the order first seen; replaced whole.
        self._readers: tuple[Reader, ...] = ()
        self._signatures: dict[Signature, Reader] = {}

    def __getitem__(self, grid: Sequence[int]) -> Callable[..., None]:
        # A partial, not a lambda: calling it enters run() directly, one Python frame less.
        return functools.partial(self.run, grid)

    def run(self, grid: Sequence[int], *args: Any, **kwargs: Any) -> None:
        """Launch on ``grid``: what ``kernel[grid](*args, **kwargs)`` calls."""
        if _recorded is not None:
            _recorded.append((self, tuple(grid), args, kwargs))
        if _INTERPRETED or _takes_tritons_path():
            self.jit[grid](*args, **kwargs)
            return
        active = driver.active
        device = active.get_current_device()
        found = self.plan_for(device, args, kwargs)
        if found is None:
            self._launch_and_plan(device, grid, args, kwargs)
            return
        plan, values = found
        size = len(grid)
        plan.go(
            grid[0],
            grid[1] if size > 1 else 1,
            grid[2] if size > 2 else 1,
            active.get_current_stream(device),
            values,
        )

    def plan_for(
        self, device: int, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Plan, tuple[Any, ...]] | None:
        """The plan of these arguments on ``device`` and the positional values its launcher takes
        (device pointers for tensors); None where Triton's own path must launch."""
        for reader in self._readers:
            try:
                read = reader(device, *args, **kwargs)
            except Exception:  # other keywords or count, an object where a tensor was
                continue
            if read is not None:
                plan = self._plans.get(read[0])
                if plan is not None:
                    return plan, read[1]
        return None

    def _launch_and_plan(
        self, device: int, grid: Sequence[int], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Launch through Triton (which compiles or finds the binary), then file the plan of this
        launch's key when a reader can be made for these arguments."""
        compiled = self.jit[grid](*args, **kwargs)
        if compiled is None or len(self._plans) >= MAX_PLANS:
            return
        kinds = _kinds_of(args)
        if kinds is None:
            return
        signature = (kinds, tuple(sorted(kwargs)))
        reader = self._signatures.get(signature)
        if reader is None and (len(self._signatures) >= MAX_SIGNATURES or not readable(signature[1])):
            return
        tail = self._constexpr_tail(device, args, kwargs)
        if tail is None:  # no plan for these arguments (and a new signature takes no slot)
            return
        if reader is None:
            with _FILING:
                reader = self._signatures.get(signature)
                if reader is None:
                    if len(self._signatures) >= MAX_SIGNATURES:
                        return
                    reader = make_reader(*signature, number=len(self._signatures))
                    if reader is None:  # cannot happen: readable() said so
                        return
                    self._signatures[signature] = reader
                    self._readers = (*self._readers, reader)
        read = reader(device, *args, **kwargs)
        if read is None:  # cannot happen: the reader of these arguments' own signature
            return
        self._plans[read[0]] = Plan(compiled, tail)

    def _constexpr_tail(
        self, device: int, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, ...] | None:
        """The values Triton's binder gives the parameters after the positional ones, when all of
        them are constexprs (fixed by the plan's key); None otherwise."""
        binder = self.jit.device_caches[device][-1]
        bound, specialization, _ = binder(*args, **kwargs)
        values = tuple(bound.values())
        if len(values) < len(args) or any(a is not v for a, v in zip(args, values, strict=False)):
            return None
        # A float passed by position to a constexpr parameter: Triton compiles per value, the key
        # has the type alone.
        if any(
            kind == "constexpr" and arg.__class__ is float
            for arg, (kind, _) in zip(args, specialization, strict=False)
        ):
            return None
        if any(kind != "constexpr" for kind, _ in specialization[len(args) :]):
            return None
        return values[len(args) :]


def _kinds_of(args: tuple[Any, ...]) -> str | None:
    """One letter per positional argument: ``t`` a tensor or None, ``i`` an int, ``b`` a bool, ``f``
    a float (exact types: Triton specialises each differently); None when some argument is none of
    these (no plan is then made from this call)."""
    kinds = []
    for arg in args:
        if arg is None or isinstance(arg, torch.Tensor):
            kinds.append("t")
        elif arg.__class__ in _KIND_OF_TYPE:
            kinds.append(_KIND_OF_TYPE[arg.__class__])
        else:
            return None
    return "".join(kinds)


#: A reader's globals: the type of each scalar kind, as ``_<kind>_type`` (not the builtins' names:
#: a keyword may be named ``int``).
_TYPE_GLOBALS = {"_i_type": int, "_b_type": bool, "_f_type": float}
_KIND_OF_TYPE = {scalar_type: name[1] for name, scalar_type in _TYPE_GLOBALS.items()}
#: A reader's own names: its parameters ``device`` and ``a<i>``, its locals ``p<i>`` (pointer or
#: None), ``q<i>`` (pointer or 0), ``d<i>`` (dtype) and ``m``. Keywords named like them, or like its
#: globals, cannot be read.
_READER_LOCALS = re.compile(r"[apqd][0-9]+|device|m")


def readable(keywords: Sequence[str]) -> bool:
    """Whether a reader can take these keyword names (see :data:`_READER_LOCALS`)."""
    return not any(_READER_LOCALS.fullmatch(name) or name in _TYPE_GLOBALS for name in keywords)


def make_reader(kinds: str, keywords: Sequence[str] = (), *, number: int = 0) -> Reader | None:
    """A function ``read(device, *args, **kwargs)`` of the current device, the positional arguments
    (of these kinds) and the keyword arguments (these names: constexprs and launch options)
    returning (key, launcher values), written out: a straight line of attribute reads, no loop, no
    per-argument call. The key is flat and starts with ``number`` (the signature's: keys of two
    signatures never meet, even where an int and a bool compare equal).

    A scalar of another type than its position's kind makes it return None before any tensor is
    read; an object without ``data_ptr`` where a tensor was, or other keywords, make it raise. None
    instead of a reader where a keyword takes one of the reader's own names.
    """
    if not readable(keywords):
        return None
    params = ["device", *(f"a{i}" for i in range(len(kinds)))]
    guards = [f"a{i}.__class__ is not _{k}_type" for i, k in enumerate(kinds) if k != "t"]
    lines = [f"    if {' or '.join(guards)}:\n        return None"] if guards else []
    tensors = [i for i, kind in enumerate(kinds) if kind == "t"]
    keys, values = [str(number), "device"], []
    for i, kind in enumerate(kinds):
        if kind == "t":
            lines.append(
                f"    if a{i} is None:\n        p{i} = d{i} = None\n        q{i} = 0\n"
                f"    else:\n        p{i} = q{i} = a{i}.data_ptr()\n        d{i} = a{i}.dtype"
            )
            keys.append(f"d{i}")
            values.append(f"p{i}")
        else:
            if kind != "f":  # Triton gives every float one specialisation
                keys.append(f"a{i}")
            values.append(f"a{i}")
    keys.extend(keywords)
    if tensors:
        # Each pointer's residue mod 16 only where one is misaligned (aligned pointers give 0).
        lines.append(f"    m = ({' | '.join(f'q{i}' for i in tensors)}) & 15")
        keys.append(f"m and ({''.join(f'q{i} & 15, ' for i in tensors)})")
    signature = ", ".join(params + (["*", *keywords] if keywords else []))
    source = (
        f"def read({signature}):\n"
        + "".join(line + "\n" for line in lines)
        + f"    return ({''.join(k + ', ' for k in keys)}), ({''.join(v + ', ' for v in values)})\n"
    )
    namespace: dict[str, Any] = dict(_TYPE_GLOBALS)
    exec(compile(source, f"<spec_hal launch reader {kinds} {' '.join(keywords)}>", "exec"), namespace)
    reader: Reader = namespace["read"]
    return reader


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
    """Host seconds per call of the two stages of a planned launch: finding the plan (the reader
    and the lookup: what replaces Triton's binder), and the compiled kernel's launcher (which
    launches the kernel for real). None where the launch would not take a plan (first launch,
    interpreter, launch hooks)."""
    if _INTERPRETED or _takes_tritons_path():
        return None
    active = driver.active
    device = active.get_current_device()
    found = kernel.plan_for(device, args, kwargs)
    if found is None:
        return None
    plan, values = found
    started = time.perf_counter()
    for _ in range(repeats):
        kernel.plan_for(device, args, kwargs)
    plan_seconds = (time.perf_counter() - started) / repeats
    x, y, z = (*grid, 1, 1)[:3]
    started = time.perf_counter()
    for _ in range(repeats):
        plan.go(x, y, z, active.get_current_stream(device), values)
    return plan_seconds, (time.perf_counter() - started) / repeats


def _takes_tritons_path() -> bool:
    """Launches must go through Triton: a launch enter or exit hook is set (None when there is none,
    except Triton's ``HookChain``, never None, whose ``calls`` list is empty then), or Triton's debug
    or instrumentation switch is on (Triton compiles other binaries then)."""
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return bool(
        (enter is not None and getattr(enter, "calls", True))
        or (leave is not None and getattr(leave, "calls", True))
        or runtime.debug
        or knobs.compilation.instrumentation_mode
    )


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
