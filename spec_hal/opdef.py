"""Op definitions: a portable reference that is also the provider schema, and the dispatch to providers.

An op family module writes, for each device op, two things side by side:

* the **portable reference**, decorated with :func:`define_op`. Its signature is the *provider
  signature* shared by every implementation of the op: all outputs allocated, scalars validated.
  Providers write their outputs and return None. Its annotations give the ``torch.library`` schema.
* the **public contract** ``spec_hal.ops.<name>``: docstring, argument validation, allocation of
  optional outputs, then ``<op>.dispatch(device, *provider_args)``.

``dispatch`` is the hot path: one dict lookup keyed by (tensor device, variant) and a direct call
of the bound provider. Only while ``torch.compile`` traces does it go through
``torch.ops.spec_hal.<name>`` instead, so compiled graphs see an op with correct mutation
annotations (``Tensor(a!)``) and a fake implementation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal

import torch

from . import registry

OpClass = Literal["latency", "bandwidth"]

_LIBRARY_NAME = "spec_hal"
_library: torch.library.Library | None = None
_library_lock = threading.Lock()

# Dynamo answers this call with True while tracing; in eager it is a constant False (cheapest check).
_is_compiling: Callable[[], bool] = getattr(
    torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling
)


def _get_library() -> torch.library.Library:
    global _library
    with _library_lock:
        if _library is None:
            _library = torch.library.Library(_LIBRARY_NAME, "FRAGMENT")
        return _library


class OpDef:
    """One device op: its name, provider schema, portable reference and binding cache."""

    def __init__(
        self,
        name: str,
        portable: Callable[..., None],
        *,
        mutates: Sequence[str],
        op_class: OpClass,
        bytes_moved: str = "",
        variant: Callable[..., Hashable] | None = None,
    ) -> None:
        self.name = name
        self.variant_of = variant
        self.portable = portable
        self.mutates = tuple(mutates)
        self.op_class = op_class
        self.bytes_moved = bytes_moved
        self._bound: dict[tuple[torch.device, Hashable], Callable[..., None]] = {}
        self._torch_op: Any = None
        self._define_torch_op()

    # -- the hot path -------------------------------------------------------------------------------

    def dispatch(self, device: torch.device, *args: Any) -> None:
        """Run the provider bound to ``device`` (and the args' variant) on the provider arguments."""
        if _is_compiling():
            self._torch_op(*args)
            return
        variant_of = self.variant_of
        key = (device, None if variant_of is None else variant_of(*args))
        fn = self._bound.get(key)
        if fn is None:
            fn = self.bind(*key)
        fn(*args)

    def bind(self, device: torch.device, variant: Hashable = None) -> Callable[..., None]:
        """Resolve (and cache) the provider callable for ``device`` and ``variant``."""
        fn = registry.resolve(self.name, device, variant)
        self._bound[(device, variant)] = fn
        return fn

    def clear_bindings(self) -> None:
        self._bound.clear()

    # -- torch.library -----------------------------------------------------------------------------

    def _define_torch_op(self) -> None:
        schema = torch.library.infer_schema(self.portable, mutates_args=self.mutates)
        lib = _get_library()
        lib.define(self.name + schema)
        lib.impl(self.name, self._run_from_torch_op, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{_LIBRARY_NAME}::{self.name}", _fake_mutating_only, lib=lib)
        self._torch_op = getattr(getattr(torch.ops, _LIBRARY_NAME), self.name).default

    def _run_from_torch_op(self, *args: Any) -> None:
        # Reached when a compiled graph (or a direct torch.ops call) runs the op: same binding as eager.
        device = _first_tensor_device(args)
        variant = self.variant_of(*args) if self.variant_of is not None else None
        fn = self._bound.get((device, variant)) or self.bind(device, variant)
        fn(*args)

    def __repr__(self) -> str:
        return f"OpDef({self.name!r}, class={self.op_class})"


def _fake_mutating_only(*args: Any) -> None:
    # Every device op writes caller-allocated outputs and returns nothing: nothing to fake.
    return None


def _first_tensor_device(args: Sequence[Any]) -> torch.device:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device
        if isinstance(arg, (list, tuple)):
            for item in arg:
                if isinstance(item, torch.Tensor):
                    return item.device
    raise ValueError("op called without tensor arguments")


def define_op(
    name: str,
    *,
    mutates: Sequence[str],
    op_class: OpClass,
    bytes_moved: str = "",
    variant: Callable[..., Hashable] | None = None,
) -> Callable[[Callable[..., None]], OpDef]:
    """Decorate an op's portable reference: defines the op, its schema and its portable provider.

    ``mutates`` names every argument the op writes (outputs and in-out tensors): it becomes
    ``Tensor(a!)`` in the ``torch.library`` schema. ``bytes_moved`` documents, for bandwidth-bound
    ops, the bytes the benchmarks divide by the time. ``variant(*provider_args)`` returns what a
    provider may decline (index dtypes, a mask mode); bindings are cached per variant.
    """

    def wrap(portable: Callable[..., None]) -> OpDef:
        op = OpDef(
            name, portable, mutates=mutates, op_class=op_class, bytes_moved=bytes_moved, variant=variant
        )
        registry.register_op(op)
        registry.register_impl(name, registry.ANY_VENDOR, registry.PORTABLE, portable)
        return op

    return wrap
