"""The op object: one per device op, the public callable and everything that belongs to the op.

An op family module writes, for each device op, its portable **reference** (the provider
signature: every output passed in as a tensor, scalars validated, returns None) and its public
**contract** (docstring, argument checks, optional outputs allocated, then ``<op>.dispatch``)::

    def _assign_extend_cache_locs_reference(req_pool_indices, req_to_token, start, end, out) -> None:
        ...  # portable torch, writes out

    @define_op(_assign_extend_cache_locs_reference, mutates=("out",), op_class="latency")
    def assign_extend_cache_locs(op, req_pool_indices, req_to_token, start, end, out):
        \"\"\"The contract.\"\"\"
        ...  # checks that name the argument
        op.dispatch(device, req_pool_indices, req_to_token, start, end, out)
        return out

``spec_hal.ops.assign_extend_cache_locs`` is then the :class:`OpDef`: calling it runs the contract,
which is the op class's ``__call__`` (its first parameter, ``op``, is the op object; callers and
``inspect.signature`` see the parameters after it). It carries ``.reference``, ``.register_impl``,
``.mutates``, ``.op_class``, ``.variant`` (the argument names a provider may specialise on) and
``.bytes_moved(...)``.

``dispatch`` is the hot path: one dict lookup keyed by (tensor device, variant) and a direct call
of the bound provider. Only while ``torch.compile`` traces does it go through
``torch.ops.spec_hal.<name>`` instead, so compiled graphs see an op with correct mutation
annotations (``Tensor(a!)``) and a fake implementation.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal, TypeVar

import torch

from . import registry
from .registry import ANY_VENDOR, PORTABLE, Decline, Implementation, Variant

OpClass = Literal["latency", "bandwidth"]
Provider = TypeVar("Provider", bound=Callable[..., None])

_LIBRARY_NAME = "spec_hal"
_library: torch.library.Library | None = None
_library_lock = threading.Lock()

# Dynamo answers this call with True while tracing; in eager it is a constant False (cheapest check).
is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)


def _get_library() -> torch.library.Library:
    global _library
    with _library_lock:
        if _library is None:
            _library = torch.library.Library(_LIBRARY_NAME, "FRAGMENT")
        return _library


#: Argument types that are their own variant part, checked first: a failed ``getattr`` costs more.
_PLAIN_TYPES = frozenset({int, float, bool, str, type(None)})


def _variant_part(value: object) -> Hashable:
    """What a provider may specialise on in one argument: a tensor's dtype (a tuple of them for a
    list of tensors), None for an absent optional argument, a scalar as it is."""
    if value.__class__ in _PLAIN_TYPES:
        return value  # type: ignore[return-value]
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return dtype  # type: ignore[no-any-return]
    if isinstance(value, (list, tuple)):
        return tuple(_variant_part(item) for item in value)
    return value  # type: ignore[return-value]


def _takes_the_op(contract: Callable[..., Any]) -> bool:
    """Whether ``contract``'s first parameter is the op object (named ``op``, by position)."""
    first = next(iter(inspect.signature(contract).parameters.values()), None)
    return (
        first is not None
        and first.name == "op"
        and first.kind in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD)
    )


def _positional_names(fn: Callable[..., Any]) -> tuple[list[str], bool]:
    """The positional parameter names of ``fn`` and whether it takes ``*args``."""
    names, var_args = [], False
    for param in inspect.signature(fn).parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            var_args = True
        elif param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            names.append(param.name)
        elif param.kind is param.KEYWORD_ONLY and param.default is param.empty:
            names.append(f"*{param.name}")  # a required keyword-only parameter never matches
    return names, var_args


class OpDef:
    """One device op. Calling it runs the public contract."""

    def __init__(
        self,
        contract: Callable[..., Any],
        reference: Callable[..., None],
        *,
        mutates: Sequence[str],
        op_class: OpClass,
        variant: Sequence[str] = (),
        bytes_moved: Callable[..., int] | None = None,
        portable_reason: str | None = None,
    ) -> None:
        self.name: str = contract.__name__
        self.contract = contract
        self.reference = reference
        self.mutates = tuple(mutates)
        self.op_class = op_class
        #: Why the portable reference serves the op where a kernel family has no kernel for it
        #: (shown by ``spec-hal info`` as the vendor's intent); None: the family's own words.
        self.portable_reason = portable_reason
        signature = inspect.signature(contract)
        takes_the_op = _takes_the_op(contract)
        if takes_the_op:  # the public signature: the parameters after ``op``
            signature = signature.replace(parameters=tuple(signature.parameters.values())[1:])
        self.__signature__ = signature
        self.__wrapped__ = contract
        params, _ = _positional_names(reference)
        if takes_the_op and "op" in params:
            raise TypeError(
                f"op {self.name!r}: the contract's first parameter 'op' is taken as the op object, but "
                "the reference has a parameter 'op' too: rename it"
            )
        for name in (*self.mutates, *variant):
            if name not in params:
                raise ValueError(
                    f"op {self.name!r}: {name!r} is not a parameter of its reference ({', '.join(params)})"
                )
        self.variant = tuple(variant)
        self._variant_positions = tuple(params.index(name) for name in variant)
        self._one_variant = len(self._variant_positions) == 1
        #: Whether bindings are keyed by variant: only while some provider can decline one (reading
        #: the variant costs a dtype read per named argument on every call).
        self._keyed_by_variant = False
        self._bytes_formula = bytes_moved
        self._bound: dict[tuple[torch.device, Hashable], Callable[..., None]] = {}
        self._torch_op: Any = None
        self._define_torch_op()
        registry.register_op(self)
        registry.register_impl(self.name, ANY_VENDOR, PORTABLE, reference)

    # -- the hot path -------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Only for a contract that does not take the op first: :func:`define_op` makes a contract
        # that does the op class's own __call__, which spares this frame (torch.compile traces a
        # call of an object through a __call__ function taking the object: a staticmethod will not do).
        return self.contract(*args, **kwargs)

    def dispatch(self, device: torch.device, *args: Any) -> None:
        """Run the provider bound to ``device`` (and the args' variant) on the provider arguments."""
        if is_compiling():
            self._torch_op(*args)
            return
        if not self._keyed_by_variant:
            key: tuple[torch.device, Variant] = (device, None)
        elif self._one_variant and (value := args[self._variant_positions[0]]).__class__ in _PLAIN_TYPES:
            key = (device, (value,))  # one scalar argument (fast_topk's k): read without a call
        else:
            key = (device, self.variant_of(args))
        fn = self._bound.get(key)
        if fn is None:
            fn = self.provider_for(device, args)
        fn(*args)

    def bind(self, device: torch.device, variant: Variant = None) -> Callable[..., None]:
        """Resolve the provider for ``device`` and ``variant``; cached unless the registry changed
        while resolving (then the next call resolves again and sees the newer provider)."""
        generation = registry.STATE.generation
        fn = registry.resolve(self.name, device, variant)
        with registry.STATE.lock:
            if registry.STATE.generation == generation:
                self._bound[(device, variant)] = fn
        return fn

    def provider_for(self, device: torch.device, args: Sequence[Any]) -> Callable[..., None]:
        """The provider a dispatch of these provider arguments on ``device`` runs."""
        while True:
            keyed = self._keyed_by_variant
            variant = self.variant_of(args) if keyed else None
            fn = self._bound.get((device, variant)) or self.bind(device, variant)
            # Resolving may bind the vendor, whose providers can decline variants: then the
            # variant read above was not read, and this call must resolve with it.
            if self._keyed_by_variant == keyed:
                return fn

    def variant_of(self, args: Sequence[Any]) -> Variant:
        """The variant of these provider arguments: one entry per name in ``variant``."""
        positions = self._variant_positions
        if len(positions) == 1:  # the common case, read on every call of a keyed op: no loop
            return (_variant_part(args[positions[0]]),)
        return tuple([_variant_part(args[position]) for position in positions])

    def clear_bindings(self) -> None:
        """Drop the cached bindings (the registry changed): they are resolved again on next call."""
        self._bound.clear()
        self._keyed_by_variant = bool(self._variant_positions) and any(
            impl.supports is not None for impl in registry.STATE.impls.get(self.name, ())
        )

    # -- providers ----------------------------------------------------------------------------------

    def register_impl(
        self,
        vendor: str,
        provider: str,
        fn: Provider | None = None,
        *,
        priority: int | None = None,
        supports: Callable[[Variant], Decline] | None = None,
        intended: str | None = None,
    ) -> Any:
        """Register ``fn`` as ``provider`` of this op on ``vendor`` (see :func:`spec_hal.register_impl`).

        Without ``fn`` it is a decorator: ``@op.register_impl("myvendor", "mykernel")``. ``fn`` must
        take the reference's parameters, in order and by the same names (or ``*args``).
        """
        if fn is None:

            def decorate(provider_fn: Provider) -> Provider:
                registry.register_impl(
                    self.name,
                    vendor,
                    provider,
                    provider_fn,
                    priority=priority,
                    supports=supports,
                    intended=intended,
                )
                return provider_fn

            return decorate
        registry.register_impl(
            self.name, vendor, provider, fn, priority=priority, supports=supports, intended=intended
        )
        return fn

    def check_provider(self, provider: str, fn: Callable[..., None]) -> None:
        """Refuse a provider whose parameters are not the reference's (a ``*args`` provider passes)."""
        if fn is self.reference:
            return
        expected, _ = _positional_names(self.reference)
        try:
            names, var_args = _positional_names(fn)
        except (TypeError, ValueError):  # a builtin without a signature: nothing to check
            return
        if var_args and all(name in expected for name in names):
            return
        if names != expected:
            raise TypeError(
                f"provider {provider!r} of op {self.name!r}: parameters ({', '.join(names)}) do not match "
                f"the reference's ({', '.join(expected)})"
            )

    def implementations(self, vendor: str | None = None) -> list[Implementation]:
        """Providers registered for this op (on ``vendor``, portable included), highest priority first."""
        impls = registry.STATE.impls.get(self.name, [])
        return [i for i in impls if vendor is None or i.vendor in (vendor, ANY_VENDOR)]

    # -- what the op costs ----------------------------------------------------------------------------

    def bytes_moved(self, *args: Any, **kwargs: Any) -> int:
        """Bytes a call with these public arguments must read and write: the op's own formula where
        its tensors' sizes overstate it (moves touch only the moved rows), else every tensor
        argument once."""
        bound = self.__signature__.bind(*args, **kwargs)
        bound.apply_defaults()
        if self._bytes_formula is not None:
            return self._bytes_formula(**bound.arguments)
        return sum(t.nbytes for t in _tensors(bound.arguments.values()))

    # -- torch.library -----------------------------------------------------------------------------

    def _define_torch_op(self) -> None:
        schema = torch.library.infer_schema(self.reference, mutates_args=self.mutates)
        lib = _get_library()
        lib.define(self.name + schema)
        lib.impl(self.name, self._run_from_torch_op, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{_LIBRARY_NAME}::{self.name}", _fake_mutating_only, lib=lib)
        self._torch_op = getattr(getattr(torch.ops, _LIBRARY_NAME), self.name).default

    def _run_from_torch_op(self, *args: Any) -> None:
        # Reached when a compiled graph (or a direct torch.ops call) runs the op: same binding as eager.
        self.provider_for(next(t.device for t in _tensors(args)), args)(*args)

    def __repr__(self) -> str:
        return f"<spec_hal op {self.name} ({self.op_class})>"


def _tensors(values: Any) -> Any:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (item for item in value if isinstance(item, torch.Tensor))
        elif hasattr(value, "tensors"):  # containers of tensors (KV buffers) say what they hold
            yield from value.tensors()


def _fake_mutating_only(*args: Any) -> None:
    # Every device op writes caller-allocated outputs and returns nothing: nothing to fake.
    return None


def define_op(
    reference: Callable[..., None],
    *,
    mutates: Sequence[str],
    op_class: OpClass,
    variant: Sequence[str] = (),
    bytes_moved: Callable[..., int] | None = None,
    portable_reason: str | None = None,
) -> Callable[[Callable[..., Any]], OpDef]:
    """Decorate an op's public contract: the result is the op object, named after the contract.

    The contract takes the op object first, as ``op`` (``def my_op(op, x, out=None)``), and ends in
    ``op.dispatch(device, *provider_args)``; callers pass the parameters after ``op``. A contract
    without that parameter still works, called through one more frame.

    ``reference`` is the portable torch implementation in the provider convention. ``mutates``
    names every argument it writes (``Tensor(a!)`` in the ``torch.library`` schema). ``variant``
    names the reference's arguments a provider may specialise on (a tensor counts by its dtype, a
    list of tensors by theirs, a scalar by its value); bindings are cached per variant.
    ``bytes_moved(**public_arguments)`` counts the bytes a call must move, where every tensor
    argument once would overstate it. ``portable_reason`` says why torch serves the op where no
    kernel family covers it (torch is already a few launches, or no kernel is written yet).
    """

    def wrap(contract: Callable[..., Any]) -> OpDef:
        # Each op gets its own class, named after it and documented by its contract, so that
        # help() and type() say what the op is; a contract taking the op first is its __call__.
        namespace: dict[str, Any] = {
            "__doc__": contract.__doc__,
            "__module__": contract.__module__,
            "__qualname__": contract.__qualname__,
        }
        if _takes_the_op(contract):
            namespace["__call__"] = contract
        op_type = type(contract.__name__, (OpDef,), namespace)
        return op_type(
            contract,
            reference,
            mutates=mutates,
            op_class=op_class,
            variant=variant,
            bytes_moved=bytes_moved,
            portable_reason=portable_reason,
        )

    return wrap
