"""Eager launches through launch plans: Triton's own binaries, without Triton's per-call glue.

``jit_fn[grid](*args)`` runs, on every call, Triton's argument binder (a specialisation per
argument), the compiled kernel's launcher (which asks the driver to look up every tensor's device
pointer) and Python around both (cache keys, option parsing, global-value checks). Here a
:class:`Launch` (one kernel, one grid, fixed constexprs and launch options: what a launcher computes
from the sizes, built once per launch shape) launches the same binaries with less of that: its first
launch of a specialisation goes through Triton, and leaves a **plan**: the compiled kernel and the
constexpr arguments, filed under a key that a generated **reader** computes straight from the
positional arguments. Later launches with that key call the compiled kernel's launcher directly
(its C entry point, past the Python wrapper: see :func:`direct_launch`), with the tensors' device
pointers as plain ints. No keyword argument travels on that path: the options are the launch's own.

The key is never coarser than Triton's specialisation, so a plan always runs the binary Triton
would pick: a tensor counts by its dtype and its pointer's alignment (``ptr & 15``, where Triton
looks at ``ptr % 16 == 0``; the key holds one 0 when every pointer is aligned, the common case),
None as None, an int by its value (Triton looks at ``== 1``, ``% 16`` and the range), a bool by its
value, a float by its type alone (Triton gives every float ``fp32``), and the current device; the
constexprs and options are fixed by the launch that holds the plans. Nothing is keyed by a tensor's
identity or address. The key is one flat tuple: hashing it is part of every launch.

A kernel keeps one reader per **signature**: the kind of each positional argument (tensor or None,
int, bool, float: exact Python types, as Triton specialises each differently), for up to
:data:`MAX_SIGNATURES` of them, so that one kernel may serve call sites passing, say, an int k or a
float top_p at the same position. A reader accepts only its own signature's kinds (it answers None
to others, before touching a tensor), and keys start with the signature's number, so a plan is only
ever found for arguments of the kinds that filed it.

**Triton's private API.** This module is the only one that reads what Triton does not promise to
keep: a ``JITFunction``'s ``device_caches`` (its argument binder), a compiled kernel's ``run``,
``function`` and ``packed_metadata``, the launcher wrapper's call of its C entry point
(``run.launch``, learnt by :func:`direct_launch`), and the launch hooks' ``HookChain.calls``;
``spec-hal compile`` reads the binder maker and ``JITFunction._pack_args`` through
:func:`tritons_binder` and :func:`pack_args`. Triton's public API (``triton.knobs``,
``triton.runtime.driver``, ``triton.compile``) is used where it is needed, and ``spec-hal compile``
also reads what a JIT function and a compiled kernel show of themselves (``fn``, ``params``,
``metadata``, ``asm``), as Triton's own tools do. The plan keys follow Triton's specialisation rules
(16-byte alignment, ints equal to 1, ...), checked against the installed Triton's binder by the CPU
tests: one more reason a release is verified before its launches are planned.

**The gate.** Planned launches are made on the Triton releases in :data:`VERIFIED_TRITON` only. On
another release, or once learning a launcher fails (:func:`learning_failed`), every launch takes
Triton's own path (``jit_fn[grid](*args)``): the same binaries, with Triton's per-call glue. The
decision and its reason are recorded once per process; :func:`launch_path` tells them (``spec-hal
info`` shows it). It is no error under ``SPEC_HAL_STRICT=1``: the op keeps its provider and its
binaries; only the host's cost per launch differs.

Launches take Triton's own path when no plan can apply: under ``TRITON_INTERPRET=1``, while a
Triton launch hook is installed (profilers) or Triton's debug or instrumentation switch is on (its
binaries differ then), on each new key (which then files its plan), for arguments of other kinds
(numpy scalars, int subclasses) or past :data:`MAX_SIGNATURES` signatures, and once a launch holds
:data:`MAX_PLANS` plans (arguments whose values change on every call). Plans run no
``JITFunction`` pre-run hooks and skip Triton's check that the kernel's globals are unchanged: the
family's kernels register none and read only constants.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import torch
import triton
from triton import knobs
from triton.runtime import driver

# -- Triton's private API, and the gate ------------------------------------------------------------

logger = logging.getLogger(__name__)

#: Triton releases (major.minor) planned launches were verified on: 3.6 launches them on the H200
#: (tools/h200_run.sh); 3.7's CUDA and HIP launcher wrappers and binder are checked by the CPU tests.
#: Patch releases of a series keep its launcher.
VERIFIED_TRITON: frozenset[str] = frozenset({"3.6", "3.7"})


class LearningFailed(Exception):
    """A Triton internal did not have the shape planned launches rely on."""


def gate(version: str) -> tuple[bool, str]:
    """(planned launches, why) for the Triton release ``version``."""
    series = ".".join(version.split(".")[:2])
    if series in VERIFIED_TRITON:
        return True, f"planned launches (Triton {version}; verified on {_verified()})"
    return False, (
        f"Triton's own launch path: Triton {version} is not a release planned launches were verified "
        f"on ({_verified()})"
    )


def _verified() -> str:
    return ", ".join(f"{series}.x" for series in sorted(VERIFIED_TRITON))


#: Whether launches may be planned; read on every launch (:func:`takes_tritons_path`).
_planned, _reason = gate(triton.__version__)


def learning_failed(reason: str) -> None:
    """Every later launch takes Triton's own path; the first reason is kept and logged once."""
    global _planned, _reason
    if not _planned:
        return
    _planned, _reason = False, f"Triton's own launch path: learning Triton's launcher failed ({reason})"
    logger.warning("spec_hal: %s", _reason)


def takes_tritons_path() -> bool:
    """Launches must go through Triton: the gate says so, a launch enter or exit hook is set (None
    when there is none, except Triton's ``HookChain``, never None, whose ``calls`` list is empty
    then), or Triton's debug or instrumentation switch is on (Triton compiles other binaries then)."""
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return bool(
        not _planned
        or (enter is not None and getattr(enter, "calls", True))
        or (leave is not None and getattr(leave, "calls", True))
        or runtime.debug
        or knobs.compilation.instrumentation_mode
    )


def binder(jit_fn: Any, device: int) -> Callable[..., tuple[Any, Any, Any]]:
    """The argument binder Triton made for ``jit_fn`` on ``device``: ``binder(*args, **options)``
    gives (bound arguments, specialisation, options)."""
    try:
        found: Callable[..., tuple[Any, Any, Any]] = jit_fn.device_caches[device][-1]
    except Exception as exc:
        raise LearningFailed(f"no binder in the JIT function's device_caches: {exc!r}") from exc
    if not callable(found):
        raise LearningFailed("the last entry of the JIT function's device_caches is no binder")
    return found


def compiled_parts(compiled: Any) -> tuple[Any, Any, Any]:
    """(launcher wrapper, kernel function, packed metadata) of a compiled kernel."""
    try:
        return compiled.run, compiled.function, compiled.packed_metadata
    except AttributeError as exc:
        raise LearningFailed(f"the compiled kernel has no {exc.name}") from exc


class _Mark:
    """A stand-in argument whose place in a launcher call is looked for (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def direct_launch(run: Any, function: Any, metadata: Any, tail: tuple[Any, ...]) -> Callable[..., None]:
    """``go(x, y, z, stream, values)``: the call Triton's launcher ``run`` makes to its C entry point
    (``run.launch``), written out once, so that each launch skips the launcher's Python wrapper.

    The call is learnt, not assumed (its argument order differs between Triton versions and
    vendors): the wrapper is called once on a copy of ``run`` whose ``launch`` records its
    arguments, with stand-ins for the grid, the stream and the kernel's arguments. Each stand-in
    must come back exactly once, the kernel's arguments last (flat or as one tuple), and everything
    else the wrapper passes is then constant for this kernel; :class:`LearningFailed` where that
    does not hold. Where the wrapper allocates scratch memory per launch, ``go`` calls the wrapper.
    """
    if getattr(run, "global_scratch_size", 0) or getattr(run, "profile_scratch_size", 0):
        return _through_wrapper(run, function, metadata, tail)
    if not callable(getattr(run, "launch", None)):
        raise LearningFailed("the launcher has no C entry point (launch)")
    grid_and_stream = tuple(_Mark(name) for name in ("x", "y", "z", "stream"))
    arg_marks = tuple(_Mark(f"arg{i}") for i in range(3))  # the wrapper forwards any number
    calls: list[tuple[Any, ...]] = []
    probe = copy.copy(run)
    probe.launch = lambda *args: calls.append(args)
    try:
        probe(*grid_and_stream, function, metadata, None, None, None, *arg_marks)
    except Exception as exc:  # a wrapper that does more with its arguments than pass them on
        raise LearningFailed(f"the launcher wrapper raised on stand-ins: {exc!r}") from exc
    if len(calls) != 1:
        raise LearningFailed(f"the launcher wrapper called its entry point {len(calls)} times")
    (passed,) = calls
    if len(passed) > len(arg_marks) and all(
        a is b for a, b in zip(passed[-len(arg_marks) :], arg_marks, strict=True)
    ):
        prefix, flat = passed[: -len(arg_marks)], True
    elif (
        passed
        and isinstance(passed[-1], tuple)
        and len(passed[-1]) == len(arg_marks)
        and all(a is b for a, b in zip(passed[-1], arg_marks, strict=True))
    ):
        prefix, flat = passed[:-1], False
    else:
        raise LearningFailed("the kernel's arguments are not the last the entry point takes")
    names, constants = [], {}
    for i, value in enumerate(prefix):
        if isinstance(value, _Mark):
            if value not in grid_and_stream or value.name in names:
                raise LearningFailed("a kernel argument or a grid size passed out of place")
            names.append(value.name)
        else:
            names.append(f"c{i}")
            constants[f"c{i}"] = value
    if sorted(n for n in names if not n.startswith("c")) != ["stream", "x", "y", "z"]:
        raise LearningFailed("the grid or the stream does not reach the entry point")
    arguments = "*values, *tail" if flat else "values + tail"
    source = f"def go(x, y, z, stream, values):\n    launch({', '.join(names)}, {arguments})\n"
    namespace: dict[str, Any] = {"launch": run.launch, "tail": tail, **constants}
    exec(compile(source, "<spec_hal direct launch>", "exec"), namespace)
    go: Callable[..., None] = namespace["go"]
    return go


def _through_wrapper(run: Any, function: Any, metadata: Any, tail: tuple[Any, ...]) -> Callable[..., None]:
    """``go`` through the launcher wrapper (no launch metadata, no hooks: plans run without them)."""

    def go(x: int, y: int, z: int, stream: int, values: tuple[Any, ...]) -> None:
        run(x, y, z, stream, function, metadata, None, None, None, *values, *tail)

    return go


def tritons_binder(jit_fn: Any, backend: Any) -> Callable[..., tuple[Any, Any, Any]]:
    """The binder Triton's JIT makes for ``jit_fn`` and a compiler ``backend`` (no device needed)."""
    from triton.runtime.jit import create_function_from_signature

    made: Callable[..., tuple[Any, Any, Any]] = create_function_from_signature(
        jit_fn.signature, jit_fn.params, backend
    )
    return made


def pack_args(
    jit_fn: Any, backend: Any, kwargs: dict[str, Any], bound: Any, specialization: Any, options: Any
) -> tuple[Any, dict[str, Any], dict[Any, Any], dict[Any, Any]]:
    """(parsed options, signature, constexprs, attrs) of one bound launch: what ``triton.compile``
    takes, as the JIT packs them."""
    packed: tuple[Any, dict[str, Any], dict[Any, Any], dict[Any, Any]] = jit_fn._pack_args(
        backend, kwargs, bound, specialization, options
    )
    return packed


# -- launch plans ----------------------------------------------------------------------------------

#: Plans one launch keeps; launches with further keys take Triton's path.
MAX_PLANS = 1024
#: Compile options every launch states. Mul+add fused into FMA is Triton's default up to 3.9, which
#: warns that 3.10 turns it off: stated here, the kernels' results do not change with Triton's default.
COMPILE_OPTIONS: dict[str, Any] = {"enable_fp_fusion": True}
#: Launches one kernel keeps by (grid, options) for :meth:`Kernel.at` (emptied when full).
MAX_LAUNCHES = 1024
#: Argument signatures one kernel plans for; launches of further signatures take Triton's path.
MAX_SIGNATURES = 4

Reader = Callable[..., tuple[tuple[Any, ...], tuple[Any, ...]] | None]
#: Held while any kernel files a new signature (rare: a kernel's first launches); launches only read
#: the signature tables.
_FILING = threading.Lock()


class Plan:
    """What one launch key needs: ``plan.go(grid_x, grid_y, grid_z, stream, values)`` launches the
    compiled kernel on the positional launcher ``values`` (see :func:`direct_launch`).
    Raises :class:`LearningFailed` where the compiled kernel or its launcher is not as
    planned launches need."""

    __slots__ = ("go",)

    def __init__(self, compiled: Any, tail: tuple[Any, ...]) -> None:
        # tail: the values Triton gives the parameters after the positional ones (constexprs:
        # Triton's launchers take every parameter and skip those).
        self.go = direct_launch(*compiled_parts(compiled), tail)


class Kernel:
    """A ``@triton.jit`` kernel, launched like one: ``kernel[grid](*args, **constexprs_and_options)``,
    or through a :class:`Launch` bound once: ``kernel.at(grid, **constexprs_and_options)(*args)``.

    Only for kernels launched from the host (a kernel called from another kernel stays a plain
    ``@triton.jit`` function). Tensors and scalars go by position, constexprs and launch options by
    keyword.
    """

    __slots__ = ("jit", "_launches", "_readers", "_signatures")

    def __init__(self, jit_fn: Any) -> None:
        self.jit = jit_fn
        #: Launches by (grid, keyword items), as :meth:`at` made them.
        self._launches: dict[Hashable, Launch] = {}
        #: The reader of each signature planned for, in the order first seen; replaced whole.
        self._readers: tuple[Reader, ...] = ()
        self._signatures: dict[str, Reader] = {}

    def at(self, grid: Sequence[int], /, **options: Any) -> Launch:
        """The launch of this kernel on ``grid`` with these constexprs and launch options: one object
        per (grid, options), which keeps the plans of its launches. Launchers that call it with the
        same values on every call keep what it returns (see :class:`Launch`)."""
        key = (tuple(grid), *options.items())
        found = self._launches.get(key)
        if found is None:
            if len(self._launches) >= MAX_LAUNCHES:  # options that change on every call
                self._launches.clear()
            found = self._launches[key] = Launch(self, tuple(grid), {**COMPILE_OPTIONS, **options})
        return found

    def __getitem__(self, grid: Sequence[int]) -> Callable[..., None]:
        return functools.partial(self._launch_at, grid)

    def _launch_at(self, grid: Sequence[int], /, *args: Any, **options: Any) -> None:
        self.at(grid, **options)(*args)

    def read(self, device: int, args: tuple[Any, ...]) -> tuple[Hashable, tuple[Any, ...]] | None:
        """(plan key, launcher values) of these arguments on ``device``, from the reader of their
        signature (a reader accepts its own signature's arguments only); None where none reads them."""
        for reader in self._readers:
            try:
                read = reader(device, *args)
            except Exception:  # another count, an object where a tensor was
                continue
            if read is not None:
                return read
        return None

    def can_read(self, kinds: str) -> bool:
        """Whether a reader serves the signature ``kinds`` or one can still be filed for it."""
        return kinds in self._signatures or len(self._signatures) < MAX_SIGNATURES

    def reader_for(self, kinds: str) -> Reader | None:
        """The reader of the signature ``kinds`` (see :func:`_kinds_of`), made and filed when there
        is room; None once :data:`MAX_SIGNATURES` others are filed."""
        reader = self._signatures.get(kinds)
        if reader is not None:
            return reader
        with _FILING:
            reader = self._signatures.get(kinds)
            if reader is None and len(self._signatures) < MAX_SIGNATURES:
                reader = make_reader(kinds, number=len(self._signatures))
                self._signatures[kinds] = reader
                self._readers = (*self._readers, reader)
        return reader

    def constexpr_tail(
        self, device: int, args: tuple[Any, ...], options: dict[str, Any]
    ) -> tuple[Any, ...] | None:
        """The values Triton's binder gives the parameters after the positional ones, when all of
        them are constexprs (fixed by the launch's options); None otherwise."""
        bound, specialization, _ = binder(self.jit, device)(*args, **options)
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


class Launch:
    """One kernel on one grid with fixed constexprs and launch options: ``launch(*args)`` launches.

    It keeps the plans of its launches. Launchers build theirs once per launch shape (a cached
    function of the configuration and the sizes the shape depends on) and call it with the
    positional arguments alone: no keywords travel on the hot path, and its plan keys hold none.
    """

    __slots__ = ("kernel", "grid", "options", "_x", "_y", "_z", "_plans")

    def __init__(self, kernel: Kernel, grid: tuple[int, ...], options: dict[str, Any]) -> None:
        self.kernel = kernel
        self.grid = grid
        self.options = options
        self._x, self._y, self._z = (*grid, 1, 1)[:3]
        #: Plans by key; a key starts with the number of the signature whose reader made it.
        self._plans: dict[Hashable, Plan] = {}

    def __call__(self, *args: Any) -> None:
        if _recorded is not None:
            _recorded.append((self, args))
            if not _recorded_launch:
                return
        if _INTERPRETED or takes_tritons_path():
            self.kernel.jit[self.grid](*args, **self.options)
            return
        active = driver.active
        device = active.get_current_device()
        found = self.plan_for(device, args)
        if found is None:
            self._launch_and_plan(device, args)
            return
        plan, values = found
        plan.go(self._x, self._y, self._z, active.get_current_stream(device), values)

    def plan_for(self, device: int, args: tuple[Any, ...]) -> tuple[Plan, tuple[Any, ...]] | None:
        """The plan of these arguments on ``device`` and the positional values its launcher takes
        (device pointers for tensors); None where Triton's own path must launch."""
        read = self.kernel.read(device, args)
        if read is None:
            return None
        plan = self._plans.get(read[0])
        return None if plan is None else (plan, read[1])

    def _launch_and_plan(self, device: int, args: tuple[Any, ...]) -> None:
        """Launch through Triton (which compiles or finds the binary), then file the plan of this
        launch's key when a reader can be made for these arguments. Where Triton's internals are
        not as planned launches need, no plan is filed, and every launch takes Triton's path."""
        compiled = self.kernel.jit[self.grid](*args, **self.options)
        if compiled is None or len(self._plans) >= MAX_PLANS:
            return
        kinds = _kinds_of(args)
        if kinds is None or not self.kernel.can_read(kinds):
            return
        try:
            tail = self.kernel.constexpr_tail(device, args, self.options)
            if tail is None:  # no plan for these arguments (and a new signature takes no slot)
                return
            plan = Plan(compiled, tail)
        except LearningFailed as exc:  # this Triton is not as verified: its path from now
            learning_failed(str(exc))
            return
        reader = self.kernel.reader_for(kinds)
        if reader is None:  # the signatures filled up meanwhile
            return
        read = reader(device, *args)
        if read is None:  # cannot happen: the reader of these arguments' own signature
            return
        self._plans[read[0]] = plan

    def __repr__(self) -> str:
        options = ", ".join(f"{name}={value!r}" for name, value in self.options.items())
        return f"<launch of {getattr(self.kernel.jit, '__name__', self.kernel.jit)}[{self.grid}]({options})>"


class LaunchSequence:
    """Launches of one kernel made one after another on the same positional arguments (a launcher's
    passes over the same tensors, each with its own constexprs or grid): ``sequence(*args)`` makes
    each in order. The arguments are read once for all of them (one plan key, one device and
    stream), where each launch alone would read them again; the plans of each key are found once,
    then kept together.

    Where a launch holds no plan for the arguments yet (or Triton's path must launch), each launch
    is made on its own, as it would be outside a sequence (and files its plan). :func:`recording`
    records the sequence as one entry.
    """

    __slots__ = ("launches", "_kernel", "_plans")

    def __init__(self, launches: Sequence[Launch]) -> None:
        self.launches = tuple(launches)
        kernels = {launch.kernel for launch in self.launches}
        if len(kernels) != 1:
            raise ValueError(f"launches: one kernel's launches expected, got {len(kernels)} kernels")
        (self._kernel,) = kernels
        #: Per plan key, each launch's plan and grid, in order.
        self._plans: dict[Hashable, tuple[tuple[Plan, int, int, int], ...]] = {}

    def __call__(self, *args: Any) -> None:
        if _recorded is not None:
            _recorded.append((self, args))
            if not _recorded_launch:
                return
        if _INTERPRETED or takes_tritons_path():
            found = None
        else:
            active = driver.active
            device = active.get_current_device()
            found = self.plans_for(device, args)
        if found is None:
            self._each_on_its_own(args)
            return
        plans, values = found
        stream = active.get_current_stream(device)
        for plan, x, y, z in plans:
            plan.go(x, y, z, stream, values)

    def _each_on_its_own(self, args: tuple[Any, ...]) -> None:
        """Each launch called as outside a sequence, unrecorded (the sequence is recorded)."""
        global _recorded
        recorded, _recorded = _recorded, None
        try:
            for launch in self.launches:
                launch(*args)
        finally:
            _recorded = recorded

    def plans_for(
        self, device: int, args: tuple[Any, ...]
    ) -> tuple[tuple[tuple[Plan, int, int, int], ...], tuple[Any, ...]] | None:
        """Each launch's plan for these arguments and the launcher values they share; None where
        some launch has none."""
        read = self._kernel.read(device, args)
        if read is None:
            return None
        key, values = read
        plans = self._plans.get(key)
        if plans is None:
            found = [launch._plans.get(key) for launch in self.launches]
            if any(plan is None for plan in found):
                return None
            plans = tuple(
                (plan, launch._x, launch._y, launch._z)
                for plan, launch in zip(found, self.launches, strict=True)
                if plan is not None  # all are: narrows the type
            )
            if len(self._plans) < MAX_PLANS:
                self._plans[key] = plans
        return plans, values


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


#: A reader's globals: the type of each scalar kind, as ``_<kind>_type``.
_TYPE_GLOBALS = {"_i_type": int, "_b_type": bool, "_f_type": float}
_KIND_OF_TYPE = {scalar_type: name[1] for name, scalar_type in _TYPE_GLOBALS.items()}


def make_reader(kinds: str, *, number: int = 0) -> Reader:
    """A function ``read(device, *args)`` of the current device and the positional arguments (of
    these kinds) returning (key, launcher values), written out: a straight line of attribute reads,
    no loop, no per-argument call. The key is flat and starts with ``number`` (the signature's: keys
    of two signatures never meet, even where an int and a bool compare equal).

    A scalar of another type than its position's kind makes it return None before any tensor is
    read; an object without ``data_ptr`` where a tensor was, or another count, make it raise.
    """
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
    if tensors:
        # Each pointer's residue mod 16 only where one is misaligned (aligned pointers give 0).
        lines.append(f"    m = ({' | '.join(f'q{i}' for i in tensors)}) & 15")
        keys.append(f"m and ({''.join(f'q{i} & 15, ' for i in tensors)})")
    source = (
        f"def read({', '.join(params)}):\n"
        + "".join(line + "\n" for line in lines)
        + f"    return ({''.join(k + ', ' for k in keys)}), ({''.join(v + ', ' for v in values)})\n"
    )
    namespace: dict[str, Any] = dict(_TYPE_GLOBALS)
    exec(compile(source, f"<spec_hal launch reader {kinds}>", "exec"), namespace)
    reader: Reader = namespace["read"]
    return reader


#: The launches of the block under :func:`recording` (benchmarks, ``spec-hal compile``); None:
#: nothing recorded.
_recorded: list[tuple[Launch | LaunchSequence, tuple[Any, ...]]] | None = None
#: Whether launches recorded are also made (see :func:`recording`).
_recorded_launch = True


@contextlib.contextmanager
def recording(*, launch: bool = True) -> Iterator[list[tuple[Launch | LaunchSequence, tuple[Any, ...]]]]:
    """Record every launch made inside the block as (launch, args), a :class:`LaunchSequence` as one
    entry; benchmarks use it to time a provider's launches stage by stage (:func:`stage_seconds`).
    Without ``launch``, launches are recorded and not made (``spec-hal compile``: no device)."""
    global _recorded, _recorded_launch
    previous = _recorded, _recorded_launch
    _recorded, _recorded_launch = [], launch
    try:
        yield _recorded
    finally:
        _recorded, _recorded_launch = previous


def stage_seconds(
    launch: Launch | LaunchSequence, args: tuple[Any, ...], repeats: int = 200
) -> tuple[float, float] | None:
    """Host seconds per call of the two stages of a planned launch (or of a :class:`LaunchSequence`'s
    launches): finding the plan (the reader and the lookup: what replaces Triton's binder), and the
    compiled kernel's launcher (which launches the kernel for real). None where the launch would not
    take a plan (first launch, interpreter, launch hooks)."""
    if _INTERPRETED or takes_tritons_path():
        return None
    active = driver.active
    device = active.get_current_device()
    lookup: Callable[[int, tuple[Any, ...]], Any]
    if isinstance(launch, LaunchSequence):
        lookup = launch.plans_for
        in_sequence = lookup(device, args)
        if in_sequence is None:
            return None
        plans, values = in_sequence
    else:
        lookup = launch.plan_for
        alone = lookup(device, args)
        if alone is None:
            return None
        plans, values = ((alone[0], launch._x, launch._y, launch._z),), alone[1]
    started = time.perf_counter()
    for _ in range(repeats):
        lookup(device, args)
    plan_seconds = (time.perf_counter() - started) / repeats
    started = time.perf_counter()
    for _ in range(repeats):
        stream = active.get_current_stream(device)
        for plan, x, y, z in plans:
            plan.go(x, y, z, stream, values)
    return plan_seconds, (time.perf_counter() - started) / repeats


def launch_path() -> tuple[bool, str]:
    """(planned launches, why) in this process: the interpreter, the version gate's decision, or the
    first failure to learn a launcher since (``spec-hal info`` shows it)."""
    if _INTERPRETED:
        return False, "Triton's interpreter (TRITON_INTERPRET=1)"
    return _planned, _reason


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
