"""Every read of Triton's private API, and the gate that decides whether launches may rely on them.

Planned launches (:mod:`.launch`) read what Triton does not promise to keep: a ``JITFunction``'s
``device_caches`` (its argument binder), a compiled kernel's ``run``, ``function`` and
``packed_metadata``, the launcher wrapper's call of its C entry point (``run.launch``, learnt by
:func:`direct_launch`), and the launch hooks' ``HookChain.calls``. ``spec-hal compile`` reads the
binder maker and ``JITFunction._pack_args`` (:func:`tritons_binder`, :func:`pack_args`). Triton's
public API (``triton.knobs``, ``triton.runtime.driver``, ``triton.compile``) is used where it is
needed.

The plan keys of :mod:`.launch` follow Triton's specialisation rules (16-byte alignment, ints equal
to 1, ...), checked against the installed Triton's binder by the CPU tests: one more reason a
release is verified before its launches are planned.

The gate: planned launches are made on the Triton releases in :data:`VERIFIED_TRITON` only. On
another release, or once learning a launcher fails (:func:`learning_failed`), every launch takes
Triton's own path (``jit_fn[grid](*args)``): the same binaries, with Triton's per-call glue. The
decision and its reason are recorded once per process; :func:`launch_path` tells them
(``spec-hal info`` shows it). It is no error under ``SPEC_HAL_STRICT=1``: the op keeps its provider
and its binaries; only the host's cost per launch differs.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import triton
from triton import knobs

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


def launch_path() -> tuple[bool, str]:
    """(planned launches, why) in this process: the version gate's decision, or the first failure
    to learn a launcher since."""
    return _planned, _reason


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
