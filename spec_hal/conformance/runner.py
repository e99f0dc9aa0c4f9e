"""Run the conformance cases against a device and every provider registered there.

Each case runs on the device under test through one provider, and again on the CPU through the
portable reference; every tensor reachable from the arguments after the call (outputs, in-outs and
inputs alike: inputs must stay unchanged, poisoned tails must stay poisoned) and the return value
are compared. Golden cases are also compared with their expected values. Bad cases must raise.
Graph capture (where the device supports it) replays a captured call on new inputs written into
the same buffers. The compile check traces the op with ``torch.compile(fullgraph=True)``. The
opcheck runs ``torch.library.opcheck`` on ``torch.ops.spec_hal.<op>`` (mutation annotations, fake
implementation, AOT dispatch) with the provider arguments of one golden (else random) case.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import ops as public_ops
from .. import registry, runtime
from .._version import __version__
from ..ops.kv import KVBuffers
from ..registry import DeviceDescriptor
from ..reporting import git_commit, versions
from ..testing import emulate, use_provider
from ..validation import value_checks_enabled
from . import cases as cases_package
from .case import BadCase, Benched, Case, bench_facts_of
from .tolerance import tolerance

CPU = torch.device("cpu")
#: Version of the layout of :func:`report`'s JSON: raised when a key changes meaning or goes away.
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Result:
    device: str
    op: str
    provider: str
    case_class: str  # random, edge, golden, bad, graph, compile-<backend>, opcheck
    case: str
    status: str  # pass, fail, skip
    reason: str = ""

    def to_json(self) -> dict[str, str]:
        return dict(vars(self))


@dataclass
class Selection:
    """Which cases to run: op names (None = all), small cases only (the Triton interpreter)."""

    ops: frozenset[str] | None = None
    small_only: bool = False
    #: run the vendor's providers on CPU tensors (spec_hal.testing.emulate): results are *emulated*.
    emulated: bool = False
    compile: bool = True
    compile_backend: str = "aot_eager"
    #: ops compiled with inductor instead (the full compiler costs seconds per op: a few per family)
    inductor_ops: frozenset[str] = frozenset()
    graphs: bool = True
    #: torch.library.opcheck of each device op's torch.ops entry, once per provider
    opcheck: bool = True
    stats: dict[str, float] = field(default_factory=dict)


def family_modules() -> list[Any]:
    found = []
    for info in pkgutil.iter_modules(cases_package.__path__):
        found.append(importlib.import_module(f"{cases_package.__name__}.{info.name}"))
    return found


@functools.cache
def _builders() -> dict[str, Callable[..., dict[str, Any]]]:
    found: dict[str, Callable[..., dict[str, Any]]] = {}
    for module in family_modules():
        found.update(getattr(module, "BUILDERS", {}))
    return found


def builders() -> dict[str, Callable[..., dict[str, Any]]]:
    """Each op's builder of valid arguments (``builder(device, **sizes)``), by op name: the inputs
    of the bench and of ``spec-hal compile`` (a new dict: callers may change it)."""
    return dict(_builders())


def bench_facts(op: str) -> Benched:
    """What the bench reads of ``op``'s builder: its large sizes and targets (:class:`Benched`)."""
    return bench_facts_of(_builders().get(op))  # an op without a builder has no facts either


def all_cases() -> list[Case]:
    return [case for module in family_modules() for case in getattr(module, "cases", list)()]


def all_bad_cases() -> list[BadCase]:
    return [case for module in family_modules() for case in getattr(module, "bad_cases", list)()]


def torch_device_of(descriptor: DeviceDescriptor, emulated: bool = False) -> torch.device:
    """The torch device a vendor's cases run on: CPU tensors when emulated."""
    return CPU if emulated else torch.device(descriptor.device_type)


def device_model(descriptor: DeviceDescriptor, device: torch.device) -> str:
    """What the runs on ``device`` ran on, for reports: the accelerator's model as its runtime names
    it, or the host's processor and threads for CPU tensors (the CPU, an emulated vendor)."""
    if device.type == "cpu":
        import platform

        return f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"
    rt = registry.runtime_of(descriptor)
    return str(getattr(rt, "device_name", lambda d: descriptor.name)(device))


def device_context(descriptor: DeviceDescriptor, emulated: bool = False) -> Any:
    """Route CPU tensors to the vendor when emulated (and for vendors whose tensors are CPU tensors,
    emulations and out-of-tree test vendors, unless CPU tensors reach that vendor already)."""
    if emulated or (
        descriptor.device_type == "cpu"
        and registry.vendor_for(descriptor.device_type).name != descriptor.name
    ):
        return emulate(descriptor.name)
    import contextlib

    return contextlib.nullcontext()


def absent_reason(descriptor: DeviceDescriptor) -> str | None:
    """Why ops cannot run on ``descriptor``'s device in this process (its probe's answer), or None
    when they can (also for a device without a probe)."""
    probe = next((p for p in registry.detect().probes if p.vendor == descriptor.name), None)
    if probe is None or probe.usable:
        return None
    return (
        f"no {descriptor.name} device here: {probe.reason} "
        f"(spec-hal info --device {descriptor.name} explains the probe)"
    )


def unavailable_providers(descriptor: DeviceDescriptor, ops: frozenset[str] | None = None) -> list[str]:
    """The device's intended providers that are not registered here (a missing package), one line
    per provider with the ops it was meant for: checking then would test only the fallbacks."""
    registry.REGISTRY.load_bindings(descriptor)
    missing: dict[str, list[str]] = {}
    for op in sorted(registry.ops()):
        if ops is not None and op not in ops:
            continue
        intended = registry.intent_of(descriptor, op).provider
        if intended not in {i.provider for i in registry.implementations(op, descriptor.name)}:
            missing.setdefault(intended, []).append(op)
    lines = []
    for provider, names in sorted(missing.items()):
        fallback = registry.choose(names[0], descriptor, None).fallback
        why = fallback.reason if fallback is not None else f"{provider!r} is not registered"
        hint = ' (pip install "spec-hal[triton]")' if provider == registry.TRITON else ""
        lines.append(
            f"{why}{hint}; intended for {len(names)} op(s): {', '.join(names[:3])}"
            + (", ..." if len(names) > 3 else "")
        )
    return lines


#: Provider name of a public op that is a composition of device ops, not a device op itself.
COMPOSITE = "composite"


def providers_for(op: str, descriptor: DeviceDescriptor) -> list[str]:
    registry.REGISTRY.load_bindings(descriptor)
    if op not in registry.ops():
        return [COMPOSITE]
    return [impl.provider for impl in registry.implementations(op, descriptor.name)]


def provider_forced(op: str, provider: str) -> Any:
    """Run ``op`` through ``provider`` (compositions run as they are: their parts are checked alone)."""
    if provider == COMPOSITE:
        import contextlib

        return contextlib.nullcontext()
    return use_provider(op, provider)


# --------------------------------------------------------------------------------------------------
# Comparison


def tensors_in(value: Any, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor reachable from ``value`` (sequences, dicts, objects' public attributes), with its path.

    A KVBuffers contributes its buffers only, at the path of a plain list of them: its pointer table
    holds addresses, which differ between any two runs.
    """
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, KVBuffers):
        yield from tensors_in(value.buffers, path)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from tensors_in(item, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tensors_in(item, f"{path}.{key}" if path else str(key))
    elif not callable(value) and not isinstance(
        value, (str, bytes, int, float, bool, torch.device, torch.dtype)
    ):
        names = list(getattr(value, "__dict__", {})) + list(getattr(type(value), "__slots__", ()))
        for key in names:
            if not key.startswith("_") and hasattr(value, key):
                yield from tensors_in(getattr(value, key), f"{path}.{key}")


def bitwise_equal(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Same shape, dtype and bits (NaN payloads and signed zeros included)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    as_bytes = [t.detach().to(CPU).contiguous().view(torch.uint8) for t in (got, want)]
    return torch.equal(*as_bytes)


def mismatch(path: str, got: torch.Tensor, want: torch.Tensor, exact: bool = False) -> str | None:
    got = got.detach().to(CPU)
    want = want.detach().to(CPU)
    if got.shape != want.shape:
        return f"{path}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"{path}: dtype {got.dtype} != {want.dtype}"
    tol = tolerance(got.dtype)
    if exact and got.dtype.is_floating_point:
        if bitwise_equal(got, want):
            return None
        as_bytes = [t.contiguous().view(torch.uint8).view(-1, t.element_size()) for t in (got, want)]
        differs = (as_bytes[0] != as_bytes[1]).any(1)
        first = int(differs.nonzero()[0, 0])
        return (
            f"{path}: {int(differs.sum())} element(s) differ in their bits; first at flat {first}: "
            f"{got.flatten()[first].item()!r} != {want.flatten()[first].item()!r}"
        )
    if tol is None:
        if torch.equal(got, want):
            return None
        bad = (got != want).flatten().nonzero()
        first = int(bad[0, 0])
        return f"{path}: {len(bad)} element(s) differ; first at flat {first}: {got.flatten()[first].item()} != {want.flatten()[first].item()}"
    if torch.allclose(got, want, rtol=tol[0], atol=tol[1], equal_nan=True):
        return None
    diff = (got.double() - want.double()).abs().nan_to_num(float("inf"))
    return f"{path}: max abs difference {diff.max().item():.3g} over tolerance rtol={tol[0]} atol={tol[1]}"


def compare(got: Any, want: Any, exact: bool = False) -> list[str]:
    got_tensors = dict(tensors_in(got))
    want_tensors = dict(tensors_in(want))
    problems = []
    if set(got_tensors) != set(want_tensors):
        problems.append(f"different tensors: {sorted(set(got_tensors) ^ set(want_tensors))}")
    for path in sorted(set(got_tensors) & set(want_tensors)):
        problem = mismatch(path, got_tensors[path], want_tensors[path], exact)
        if problem:
            problems.append(problem)
    return problems


def call(case: Case, kwargs: dict[str, Any]) -> Any:
    return getattr(public_ops, case.op)(**kwargs)


def _checked(case: Case, kwargs: dict[str, Any], result: Any) -> dict[str, Any]:
    state = {name: value for name, value in kwargs.items() if name not in case.unchecked}
    if "result" not in case.unchecked:
        state["result"] = result
    return state


def fresh_build(case: Case, device: torch.device) -> dict[str, Any]:
    """``case.build(device)``, refusing a builder that hands out the same tensors twice: runs mutate
    their arguments, so shared tensors would make a comparison read its own output."""
    kwargs = case.build(device)
    again = case.build(device)
    storages = {t.untyped_storage().data_ptr() for _, t in tensors_in(again) if t.numel()}
    if any(t.numel() and t.untyped_storage().data_ptr() in storages for _, t in tensors_in(kwargs)):
        raise ValueError(
            f"case {case.name!r} of {case.op}: its builder returns shared tensors; build fresh ones"
        )
    return kwargs


def reference(case: Case) -> dict[str, Any]:
    kwargs = fresh_build(case, CPU)
    portable = registry.PORTABLE if case.op in registry.ops() else COMPOSITE
    with provider_forced(case.op, portable):
        result = call(case, kwargs)
    return _checked(case, kwargs, result)


# --------------------------------------------------------------------------------------------------
# Case classes


def run_case(case: Case, device: torch.device, provider: str) -> list[str]:
    want = reference(case)
    problems = []
    if case.expected is not None:
        expected = dict(case.expected())
        golden = compare({k: want[k] for k in expected}, expected, case.exact)
        problems += [f"reference vs golden: {p}" for p in golden]
    kwargs = fresh_build(case, device)
    with provider_forced(case.op, provider):
        result = call(case, kwargs)
    problems += compare(_checked(case, kwargs, result), want, case.exact)
    return problems


#: A check returns its problems (empty: pass) or a string: why it does not apply (skip).
Outcome = list[str] | str


def run_bad_case(case: BadCase, device: torch.device, provider: str) -> Outcome:
    if case.value_check and not value_checks_enabled(device):
        return "value checks run only on CPU tensors or with SPEC_HAL_DEBUG=1"
    kwargs = case.build(device)
    try:
        with provider_forced(case.op, provider):
            getattr(public_ops, case.op)(**kwargs)
    except case.error as exc:
        if re.search(case.match, str(exc)):
            return []
        return [f"{type(exc).__name__} raised, but {str(exc)!r} does not match {case.match!r}"]
    except Exception as exc:
        return [f"expected {case.error.__name__}, got {type(exc).__name__}: {exc}"]
    return [f"expected {case.error.__name__} matching {case.match!r}; nothing raised"]


def signature(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for one case's inputs to be written into another's captured buffers."""
    tensors = tuple((path, tuple(t.shape), t.dtype) for path, t in tensors_in(kwargs))
    scalars = tuple((k, repr(v)) for k, v in kwargs.items() if not list(tensors_in(v)))
    return tensors, scalars


def _capture_call(
    case: Case, buffers: dict[str, Any], holder: dict[str, Any], device: torch.device
) -> Callable[[], None]:
    """Capture a call of ``case`` on ``buffers`` (its result kept in ``holder``) and return the replay.
    A call on empty tensors launches nothing: torch then warns that the graph is empty and guesses a
    wrong device or stream, which is no fault of the op. Its callers write the buffers anew before
    the replay, so a graph that should have recorded work and did not fails their comparison."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"The \w+ Graph is empty", category=UserWarning)
        return runtime.capture_graph(lambda: holder.__setitem__("result", call(case, buffers)), device)


def _write_into(buffers: dict[str, Any], source: dict[str, Any]) -> None:
    """Copy every tensor of ``source`` into the same tensor of ``buffers`` (a captured graph's)."""
    for (_, dst), (_, src) in zip(tensors_in(buffers), tensors_in(source), strict=True):
        dst.copy_(src)


def run_graph_case(case: Case, partner: Case, device: torch.device, provider: str) -> Outcome:
    """Capture a call on ``case``'s buffers, write ``partner``'s inputs (same shapes, other values)
    into them, replay, and compare with the reference on ``partner``: no sync, no allocation, no
    value baked into the graph."""
    buffers = case.build(device)
    if any(isinstance(value, torch.Generator) for value in buffers.values()):
        return (
            "draws from a torch.Generator: a replay advances it, so no reference can be compared; "
            "spec-hal bench captures it with the generator registered"
        )
    with provider_forced(case.op, provider):
        call(case, case.build(device))  # bind and warm up outside the capture
        runtime.synchronize(device)
        holder: dict[str, Any] = {}
        replay = _capture_call(case, buffers, holder, device)
    _write_into(buffers, partner.build(device))
    replay()
    runtime.synchronize(device)
    return compare(_checked(partner, buffers, holder["result"]), reference(partner))


def graph_partner(case: Case, candidates: list[Case]) -> Case:
    """Another case of the op with the same buffer layout (new values), else the case itself."""
    wanted = signature(case.build(CPU))
    for other in candidates:
        if other is not case and other.op == case.op and signature(other.build(CPU)) == wanted:
            return other
    return case


def run_compile_case(case: Case, device: torch.device, provider: str, backend: str) -> Outcome:
    eager_kwargs = case.build(device)
    compiled_kwargs = case.build(device)
    if any(isinstance(value, torch.Generator) for value in eager_kwargs.values()):
        return "takes a torch.Generator, which dynamo cannot trace"
    with provider_forced(case.op, provider):
        eager = call(case, eager_kwargs)
        torch._dynamo.reset()
        compiled_fn = torch.compile(lambda kw: call(case, kw), fullgraph=True, backend=backend)
        compiled = compiled_fn(compiled_kwargs)
    return compare(_checked(case, compiled_kwargs, compiled), _checked(case, eager_kwargs, eager))


def opcheck_case(cases: list[Case], op: str) -> Case | None:
    """The case whose provider arguments the opcheck of ``op`` uses: its first golden case, else its
    first random one, that has no empty tensor (an empty batch returns before dispatching)."""
    for kind in ("golden", "random"):
        for case in cases:
            if case.op == op and case.kind == kind and all(t.numel() for _, t in tensors_in(case.build(CPU))):
                return case
    return None


def _cloned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_cloned(item) for item in value)
    return value


def provider_args(case: Case, kwargs: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The arguments each dispatch of one public call hands the provider (copies, taken before the
    provider runs). The op's ``dispatch`` is wrapped for the duration of the call: its contract
    computes these arguments, so only a real call yields them."""
    op = getattr(public_ops, case.op)
    original = op.dispatch
    calls: list[tuple[Any, ...]] = []

    def recording_dispatch(device: torch.device, *args: Any) -> None:
        calls.append(_cloned(args))
        original(device, *args)

    op.dispatch = recording_dispatch  # an instance attribute: the class's method is back after `del`
    try:
        call(case, kwargs)
    finally:
        del op.dispatch
    return calls


def run_opcheck_case(case: Case, device: torch.device, provider: str) -> Outcome:
    """``torch.library.opcheck`` of ``torch.ops.spec_hal.<op>`` served by ``provider``: the schema's
    mutation annotations against what the provider writes, the fake implementation, AOT dispatch."""
    kwargs = fresh_build(case, device)  # kept alive: a KV pointer table in the arguments points into it
    with provider_forced(case.op, provider):
        calls = provider_args(case, kwargs)
        if not calls:
            return "the call dispatched nothing"
        torch.library.opcheck(getattr(torch.ops.spec_hal, case.op).default, calls[0])
    return []


# --------------------------------------------------------------------------------------------------
# Invariance (D8): a row's outputs depend on the row alone


#: The batch an invariance case repeats its rows into on an accelerator: the bench's largest (past
#: every vendor's thresholds for splitting rows or changing tiles). Elsewhere (the CPU, emulations)
#: a small one: those providers' thresholds are small, and the interpreter slow.
INVARIANCE_DEVICE_BATCH = 512
INVARIANCE_SMALL_BATCH = 16


def invariance_batch(case: Case, device: torch.device) -> int:
    return INVARIANCE_SMALL_BATCH if case.small or device.type == "cpu" else INVARIANCE_DEVICE_BATCH


def _nodes_per_request(case: Case, kwargs: dict[str, Any], batch: int) -> int:
    """D of a tree case: the entries per request of its flat arguments (1 where it has none)."""
    flat = [t for name in case.flat_rows for _, t in tensors_in(kwargs[name])]
    return flat[0].numel() // batch if flat and batch else 1


def _local_ids(ids: torch.Tensor, nodes: int) -> torch.Tensor:
    """Flat node ids ``b * D + i`` of a ``[bs, ...]`` tensor as ``i`` (negative sentinels kept)."""
    base = torch.arange(ids.shape[0], device=ids.device).view(-1, *([1] * (ids.dim() - 1))) * nodes
    return torch.where(ids >= 0, ids - base.to(ids.dtype), ids)


def _take_rows(case: Case, kwargs: dict[str, Any], index: torch.Tensor, batch: int) -> dict[str, Any]:
    """The arguments of the rows (requests) ``index``, a row may repeat: row-wise tensors (or tuples
    of them) indexed along their first dimension, flat ones by blocks of D, flat node ids rebased to
    their request's new place; every other argument as it is."""
    nodes = _nodes_per_request(case, kwargs, batch)

    def take(name: str, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(take(name, item) for item in value)
        if not isinstance(value, torch.Tensor):
            return value
        rows = index.to(value.device)
        if name in case.flat_rows:
            return value.view(batch, -1).index_select(0, rows).flatten()
        taken = value.index_select(0, rows)
        if name in case.flat_ids:  # i stays; the request's base moves
            moved = torch.arange(len(rows), device=value.device) - rows
            offset = (moved * nodes).to(taken.dtype).view(-1, *([1] * (taken.dim() - 1)))
            taken = torch.where(taken >= 0, taken + offset, taken)
        return taken

    chosen = {*case.rows, *case.flat_rows}
    return {name: take(name, value) if name in chosen else value for name, value in kwargs.items()}


def _batch_of(case: Case, kwargs: dict[str, Any]) -> int:
    return next(t.shape[0] for name in case.rows for _, t in tensors_in(kwargs[name]))


def _requests_view(case: Case, state: dict[str, Any], batch: int, nodes: int) -> dict[str, torch.Tensor]:
    """Each tensor of a call's state with a request per row: flat tensors as ``[bs, D]``, flat node
    ids as local ids; tensors of no request (their first dimension is not the batch) left out."""
    view = {}
    for path, tensor in tensors_in(state):
        name = path.split("[")[0].split(".")[0]
        if name in case.flat_rows:
            tensor = tensor.reshape(batch, -1)
        if tensor.dim() == 0 or tensor.shape[0] != batch:
            continue
        view[path] = _local_ids(tensor, nodes) if name in case.flat_ids else tensor
    return view


def _row_problems(
    case: Case, got: dict[str, Any], full: dict[str, Any], index: torch.Tensor, batch: int, nodes: int
) -> list[str]:
    """Where the rows ``index`` of a call differ, in any bit, from the same rows of the full call."""
    whole = _requests_view(case, full, batch, nodes)
    problems = []
    for path, tensor in _requests_view(case, got, len(index), nodes).items():
        want = whole.get(path)
        if want is not None and not bitwise_equal(tensor, want.index_select(0, index.to(want.device))):
            problems.append(f"{path} differs from the same rows in the batch")
    return problems


def run_invariance_case(case: Case, device: torch.device, provider: str, big_batch: int) -> Outcome:
    """Run to run, and batch: the rows of a call alone, in a slice, permuted and repeated into
    ``big_batch`` rows give bitwise the outputs they get in the case's own batch."""
    with provider_forced(case.op, provider):
        kwargs = fresh_build(case, device)
        full = _checked(case, kwargs, call(case, kwargs))
        again_kwargs = fresh_build(case, device)
        again = _checked(case, again_kwargs, call(case, again_kwargs))
        problems = [f"run to run: {p}" for p in compare(again, full, exact=True)]
        batch = _batch_of(case, kwargs)
        if batch == 0:
            return "an empty batch has no rows"
        nodes = _nodes_per_request(case, kwargs, batch)
        everything = torch.arange(batch)
        subsets = {
            "alone (first row)": everything[:1],
            "alone (last row)": everything[-1:],
            "slice": everything[1:] if batch > 1 else everything,
            "permuted": everything.flip(0),
            f"repeated into {big_batch} rows": everything.repeat(-(-big_batch // batch))[:big_batch],
        }
        for label, index in subsets.items():
            part = _take_rows(case, fresh_build(case, device), index, batch)
            state = _checked(case, part, call(case, part))
            problems += [f"{label}: {p}" for p in _row_problems(case, state, full, index, batch, nodes)]
    return problems


def run_replay_invariance_case(case: Case, device: torch.device, provider: str) -> Outcome:
    """A captured graph's replay gives bitwise what an eager call gives on the same inputs. The
    buffers are built afresh after the capture, whose warm-up call wrote them: the replay must write
    every output itself (a graph that recorded nothing fails)."""
    with provider_forced(case.op, provider):
        eager_kwargs = fresh_build(case, device)
        eager = _checked(case, eager_kwargs, call(case, eager_kwargs))
        runtime.synchronize(device)
        buffers = fresh_build(case, device)
        holder: dict[str, Any] = {}
        replay = _capture_call(case, buffers, holder, device)
    _write_into(buffers, fresh_build(case, device))
    replay()
    runtime.synchronize(device)
    return [
        f"replay vs eager: {p}" for p in compare(_checked(case, buffers, holder["result"]), eager, exact=True)
    ]


# --------------------------------------------------------------------------------------------------
# The suite


def result_of(
    device: str, op: str, provider: str, case_class: str, name: str, run: Callable[[], Outcome]
) -> Result:
    """Run one check (a thunk of :func:`planned`) and turn its outcome into a :class:`Result`: an
    exception or a list of problems fails, a string is the reason for a skip."""
    try:
        problems = run()
    except Exception as exc:  # a crash is a failure of that case, not of the suite
        return Result(device, op, provider, case_class, name, "fail", f"{type(exc).__name__}: {exc}")
    if isinstance(problems, str):
        return Result(device, op, provider, case_class, name, "skip", problems)
    if problems:
        return Result(device, op, provider, case_class, name, "fail", "; ".join(problems[:3]))
    return Result(device, op, provider, case_class, name, "pass")


def planned(
    descriptor: DeviceDescriptor, selection: Selection
) -> Iterator[tuple[str, str, str, str, Callable[[], Outcome]]]:
    """(op, provider, case class, case name, thunk) for every check of the suite on a device."""
    device = torch_device_of(descriptor, selection.emulated)
    cases = [c for c in all_cases() if selection.ops is None or c.op in selection.ops]
    if selection.small_only:
        cases = [c for c in cases if c.small]
    bad = [c for c in all_bad_cases() if selection.ops is None or c.op in selection.ops]
    compiled_ops: set[tuple[str, str]] = set()
    captured_ops: set[tuple[str, str]] = set()
    graphs = selection.graphs and runtime.supports_graph_capture(device)
    device_ops = registry.ops()
    opchecked = (
        {op: opcheck_case(cases, op) for op in sorted({c.op for c in cases} & set(device_ops))}
        if selection.opcheck
        else {}
    )
    for case in cases:
        for provider in providers_for(case.op, descriptor):
            yield case.op, provider, case.kind, case.name, functools.partial(run_case, case, device, provider)
            if opchecked.get(case.op) is case:
                opcheck = functools.partial(run_opcheck_case, case, device, provider)
                yield case.op, provider, "opcheck", case.name, opcheck
            key = (case.op, provider)
            if selection.compile and key not in compiled_ops and case.kind == "random":
                compiled_ops.add(key)
                backend = "inductor" if case.op in selection.inductor_ops else selection.compile_backend
                yield (
                    case.op,
                    provider,
                    f"compile-{backend}",
                    case.name,
                    functools.partial(run_compile_case, case, device, provider, backend),
                )
            if case.rows:
                invariance = functools.partial(
                    run_invariance_case, case, device, provider, invariance_batch(case, device)
                )
                yield case.op, provider, "invariance", f"{case.name}:batch", invariance
                if graphs and provider != registry.PORTABLE:
                    replayed = functools.partial(run_replay_invariance_case, case, device, provider)
                    yield case.op, provider, "invariance", f"{case.name}:replay", replayed
            if graphs and key not in captured_ops and case.kind == "random" and provider != registry.PORTABLE:
                captured_ops.add(key)
                partner = graph_partner(case, cases)
                yield (
                    case.op,
                    provider,
                    "graph",
                    case.name,
                    functools.partial(run_graph_case, case, partner, device, provider),
                )
    for bad_case in bad:
        for provider in providers_for(bad_case.op, descriptor)[:1]:  # contracts validate before dispatch
            yield (
                bad_case.op,
                provider,
                "bad",
                bad_case.name,
                functools.partial(run_bad_case, bad_case, device, provider),
            )


def run_suite(
    descriptor: DeviceDescriptor,
    selection: Selection | None = None,
    progress: Callable[[Result, int], None] | None = None,
) -> list[Result]:
    """Run every planned check; ``progress(result, total)`` after each."""
    selection = selection or Selection()
    results = []
    with device_context(descriptor, selection.emulated):
        checks = list(planned(descriptor, selection))  # thunks: planning runs nothing
        for op, provider, case_class, name, thunk in checks:
            result = result_of(descriptor.name, op, provider, case_class, name, thunk)
            results.append(result)
            if progress is not None:
                progress(result, len(checks))
    return results


def report(
    results: list[Result], descriptor: DeviceDescriptor, seconds: float, emulated: bool = False
) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    return {
        "schema_version": SCHEMA_VERSION,
        "device": descriptor.name,
        "torch_device_type": descriptor.device_type,
        "device_name": device_model(descriptor, torch_device_of(descriptor, emulated)),
        "emulated": emulated,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "seconds": round(seconds, 1),
        "versions": versions(__version__),
        "summary": counts,
        "results": [r.to_json() for r in results],
    }
