"""What a conformance case is. Family modules under ``spec_hal.conformance.cases`` produce them.

A :class:`Case` builds the keyword arguments of one call of ``spec_hal.ops.<op>`` on a given device,
deterministically (it seeds its own generator), with every output tensor *poisoned* (filled with a
sentinel, never ``torch.empty``) so that a provider writing outside its contract shows up. The suite
runs it on the device under test through each provider, runs it again on the CPU through the
portable reference, and compares every tensor argument after the call plus the return value:
integers exactly, floats with the tolerance table (:mod:`spec_hal.conformance.tolerance`).

A case naming its row-wise arguments (``rows``) is also an *invariance* case: each provider must give
a row bitwise the same outputs run twice, alone, in a slice, permuted or repeated into a large batch,
and (where the device captures graphs) in a replay.

A :class:`BadCase` builds arguments that must raise ``error`` with a message matching ``match``
(the argument's name). ``value_check`` marks errors that need the data (ranges, negative lengths,
narrowing): those are raised on CPU tensors always and on accelerators only with SPEC_HAL_DEBUG=1.
Family modules write them with :func:`bad_case`: a valid call (a builder at fixed sizes) with one
argument broken by :func:`with_changes`, :func:`with_entry` for a bad value inside a tensor; a family
with many keeps them as a table of :data:`BadRow` read by :func:`bad_cases_from`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import torch

CaseKind = Literal["random", "edge", "golden"]
Builder = Callable[[torch.device], dict[str, Any]]


@dataclass(frozen=True)
class Case:
    op: str
    name: str
    kind: CaseKind
    build: Builder
    #: golden cases: expected values after the call, by argument name or "result" (CPU tensors).
    expected: Callable[[], Mapping[str, Any]] | None = None
    #: small enough for the Triton interpreter (a few programs, tiny tensors).
    small: bool = False
    #: arguments (or "result") whose content after the call is not compared: scratch the op may leave
    #: in any state, or samples drawn from a device's own random stream.
    unchecked: frozenset[str] = field(default_factory=frozenset)
    #: invariance cases: the arguments holding one entry per row (request) along their first
    #: dimension, which the suite takes a row alone, a slice, permuted or repeated from (D8 (b)).
    rows: tuple[str, ...] = ()
    #: invariance cases of the tree ops: flat arguments holding D entries per request in a row
    #: (``[bs * D]``), and arguments whose values are flat node ids ``b * D + i`` (rebased when a
    #: request moves to another place in the batch, compared as ``i``).
    flat_rows: tuple[str, ...] = ()
    flat_ids: tuple[str, ...] = ()
    #: compare floats bit for bit, not within the tolerance table (keyed draws: the same bits everywhere).
    exact: bool = False


@dataclass(frozen=True)
class BadCase:
    op: str
    name: str
    build: Builder
    error: type[Exception]
    match: str
    value_check: bool = False


def bad_case(
    op: str,
    name: str,
    build: Builder,
    error: type[Exception],
    match: str,
    /,
    *,
    value_check: bool = False,
    **changes: Any,
) -> BadCase:
    """A :class:`BadCase` of ``op``: the valid arguments of ``build`` with ``changes`` applied (see
    :func:`with_changes`). The leading parameters are positional-only so that any argument name of
    an op can be a change."""
    return BadCase(op, name, with_changes(build, **changes), error, match, value_check)


@dataclass(frozen=True)
class Benched:
    """What ``spec-hal bench`` reads of an op's builder besides the inputs it builds.

    Attributes:
        large_sizes: builder sizes a full bench adds to its batches (bandwidth-bound sizes).
        vocabulary_pass: the op passes over whole vocabulary rows (the sampling path): from
            ``SPEEDUP_TARGET_MIN_BS`` rows on, its accelerated providers aim at ``SPEEDUP_TARGET_X``
            times the portable one and at the vocabulary's share of the copy bandwidth.
        bandwidth_target: the share of the copy bandwidth (%) it aims at where that is not the
            default's (None: the default, or the vocabulary's for a vocabulary pass).
        noise_like: the argument whose shape the exponential race's noise has, where the public
            call draws it from the caller's generator before it dispatches (D2, D4; every provider
            then reads it): the bench times that draw apart. None: the call draws nothing.
    """

    large_sizes: tuple[Mapping[str, Any], ...] = ()
    vocabulary_pass: bool = False
    bandwidth_target: float | None = None
    noise_like: str | None = None


B = TypeVar("B", bound=Callable[..., dict[str, Any]])


def benched(
    *,
    large_sizes: Iterable[Mapping[str, Any]] = (),
    vocabulary_pass: bool = False,
    bandwidth_target: float | None = None,
    noise_like: str | None = None,
) -> Callable[[B], B]:
    """Decorate an op's builder with what the bench reads of it (:class:`Benched`)."""
    facts = Benched(tuple(large_sizes), vocabulary_pass, bandwidth_target, noise_like)

    def mark(builder: B) -> B:
        builder.benched = facts  # type: ignore[attr-defined]
        return builder

    return mark


def bench_facts_of(builder: Callable[..., Any] | None) -> Benched:
    """What the bench reads of ``builder`` (nothing beyond its inputs where it was not decorated, or
    where there is no builder)."""
    facts: Benched = getattr(builder, "benched", _TYPICAL_SIZES_ONLY)
    return facts


_TYPICAL_SIZES_ONLY = Benched()


#: A row of a family's bad-case table: (op, case name, error, match, the keyword arguments of
#: :func:`bad_case`: ``value_check`` and the changes).
BadRow = tuple[str, str, type[Exception], str, dict[str, Any]]


def bad_cases_from(rows: Iterable[BadRow], valid: Mapping[str, Builder]) -> list[BadCase]:
    """The bad case of each row, breaking the valid call of its op (``valid[op]``)."""
    return [
        bad_case(op, name, valid[op], error, match, **changes) for op, name, error, match, changes in rows
    ]


def with_changes(builder: Builder, **changes: Any) -> Builder:
    """``builder``'s arguments with ``changes`` applied (bad cases: one argument broken, the rest
    valid). A callable change maps the argument's current value to its new one; any other value
    replaces the argument, a tensor (or a list of them) copied onto the case's device, so that cases
    are written with host tensors and no two builds share one."""

    def build(device: torch.device) -> dict[str, Any]:
        kwargs = builder(device)
        for name, change in changes.items():
            kwargs[name] = change(kwargs[name]) if callable(change) else _onto(device, change)
        return kwargs

    return build


def with_entry(at: int | tuple[int, ...], value: int | float) -> Callable[[torch.Tensor], torch.Tensor]:
    """A change for :func:`with_changes`: a copy of the tensor with ``tensor[at] = value`` (one
    out-of-range entry in otherwise valid data, for a value check)."""

    def change(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        tensor[at] = value
        return tensor

    return change


def _onto(device: torch.device, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device, copy=True)
    if isinstance(value, list):
        return [_onto(device, item) for item in value]
    return value
