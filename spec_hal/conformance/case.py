"""What a conformance case is. Family modules under ``spec_hal.conformance.cases`` produce them.

A :class:`Case` builds the keyword arguments of one call of ``spec_hal.ops.<op>`` on a given device,
deterministically (it seeds its own generator), with every output tensor *poisoned* (filled with a
sentinel, never ``torch.empty``) so that a provider writing outside its contract shows up. The suite
runs it on the device under test through each provider, runs it again on the CPU through the
portable reference, and compares every tensor argument after the call plus the return value:
integers exactly, floats with the tolerance table (:mod:`spec_hal.conformance.tolerance`).

A :class:`BadCase` builds arguments that must raise ``error`` with a message matching ``match``
(the argument's name). ``value_check`` marks errors that need the data (ranges, negative lengths,
narrowing): those are raised on CPU tensors always and on accelerators only with SPEC_HAL_DEBUG=1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

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


@dataclass(frozen=True)
class BadCase:
    op: str
    name: str
    build: Builder
    error: type[Exception]
    match: str
    value_check: bool = False


def with_changes(builder: Builder, **changes: Any) -> Builder:
    """``builder``'s arguments with ``changes`` applied: a value replaces an argument, a callable is
    called with the device (bad cases: one argument broken, the rest valid)."""

    def build(device: torch.device) -> dict[str, Any]:
        kwargs = builder(device)
        for name, change in changes.items():
            kwargs[name] = change(device) if callable(change) else change
        return kwargs

    return build
