"""Argument checks shared by every op contract.

Shape, dtype, device and rank checks always run (they read metadata only). Value checks (ranges,
negative lengths, narrowing) need the data: they always run on CPU tensors and on accelerators only
with ``SPEC_HAL_DEBUG=1``, since reading device data is a host sync. Never while ``torch.compile``
traces (a data-dependent check would break the graph).

Errors follow the op contracts: a wrong dtype is a ``TypeError``, anything else a ``ValueError``;
both name the argument and what was expected.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from . import config, registry, runtime
from ._constants import POSITION_LIMIT, STEP_LIMIT
from .opdef import is_compiling

INDEX_DTYPES = (torch.int32, torch.int64)
# Module globals: one dict lookup on every call, where ``torch.Tensor`` / ``torch.int64`` take two.
_Tensor = torch.Tensor
_INT32 = torch.int32
_INT64 = torch.int64
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
#: Elements per chunk of :func:`exact_sum`'s slow path: 2**31 halves below 2**32 sum below 2**63.
_EXACT_SUM_CHUNK = 2**31


class AnySize:
    """The type of :data:`ANY_SIZE`: equal to every int, so that a shape holding it compares with a
    tensor's ``torch.Size`` in one tuple comparison (a ``None`` there would need a walk)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, int)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, int)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "*"


#: A size in the ``shape`` of a check that any size matches.
ANY_SIZE = AnySize()


def _dtype_names(dtypes: Sequence[torch.dtype]) -> str:
    return " or ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(
    name: str,
    value: object,
    *,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    ndim: int | None = None,
    shape: Sequence[int | AnySize] | None = None,
) -> torch.Tensor:
    """Check that ``value`` is a tensor of the given dtype(s), rank and shape (:data:`ANY_SIZE`: any
    size).

    Runs on every eager call: the passing path reads each attribute once and builds nothing.
    """
    if not isinstance(value, _Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if dtype is not None:
        got = value.dtype
        if got is not dtype and (isinstance(dtype, torch.dtype) or got not in dtype):
            allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
            raise TypeError(
                f"{name}: expected dtype {_dtype_names(allowed)}, got {str(got).replace('torch.', '')}"
            )
    if shape is not None:
        sizes = value.shape
        if sizes != shape:  # one comparison on the passing path (ANY_SIZE compares equal)
            _check_shape(name, sizes, shape)
    elif ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(value.shape)}")
    return value


def _check_shape(name: str, sizes: torch.Size, shape: Sequence[int | AnySize]) -> None:
    if len(sizes) != len(shape):
        raise ValueError(f"{name}: expected a {len(shape)}-D tensor, got shape {tuple(sizes)}")
    for axis, (want, got_size) in enumerate(zip(shape, sizes, strict=True)):
        if want != got_size:
            raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(sizes)} (dim {axis})")


def check_index(
    name: str, value: object, *, ndim: int | None = 1, shape: Sequence[int | AnySize] | None = None
) -> torch.Tensor:
    """An index tensor: int32 or int64 (:func:`check_tensor`, with the common case inline: one
    Python frame less on every call)."""
    if isinstance(value, _Tensor) and ((dtype := value.dtype) is _INT64 or dtype is _INT32):
        if shape is not None:
            if value.shape == shape:
                return value
        elif ndim is None or value.dim() == ndim:
            return value
    return check_tensor(name, value, dtype=INDEX_DTYPES, ndim=ndim, shape=shape)


def check_min_numel(name: str, value: torch.Tensor, needed: int) -> None:
    if value.numel() < needed:
        raise ValueError(f"{name}: needs at least {needed} elements, has {value.numel()}")


def check_contiguous(name: str, value: torch.Tensor) -> None:
    if not value.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor (strides {value.stride()})")


def common_device(**tensors: torch.Tensor | None) -> torch.device:
    """The one device of all given tensors (None entries skipped); ValueError naming the odd one."""
    remaining = iter(tensors.values())
    for tensor in remaining:
        if tensor is not None:
            device = tensor.device
            break
    else:
        raise ValueError("no tensor argument to take the device from")
    for tensor in remaining:  # the rest, compared with the first
        if tensor is not None and tensor.device != device:
            _raise_device_mismatch(tensors)
    return device


def _raise_device_mismatch(tensors: dict[str, torch.Tensor | None]) -> None:
    named = [(name, tensor.device) for name, tensor in tensors.items() if tensor is not None]
    first, device = named[0]
    name, here = next((name, here) for name, here in named if here != device)
    raise ValueError(f"{name}: expected device {device} (the device of {first}), got {here}")


def check_positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return value


#: The kind of each device seen: "cpu", "meta" or "accelerator" (a device's ``type`` is a string built
#: on every read, slower than this lookup). Kinds never change; the map is emptied when large.
_KIND_OF_DEVICE: dict[torch.device, str] = {}
_MAX_REMEMBERED_DEVICES = 64


def _kind_of_type(device_type: str) -> str:
    return device_type if device_type in ("cpu", "meta") else "accelerator"


def device_kind(device: torch.device) -> str:
    """The kind of ``device``: "cpu", "meta" or "accelerator"."""
    if is_compiling():  # a traced read of the map would guard on its contents (recompiles)
        return _kind_of_type(device.type)
    kind = _KIND_OF_DEVICE.get(device)
    if kind is None:
        kind = _kind_of_type(device.type)
        if len(_KIND_OF_DEVICE) >= _MAX_REMEMBERED_DEVICES:
            _KIND_OF_DEVICE.clear()
        _KIND_OF_DEVICE[device] = kind
    return kind


def value_checks_enabled(device: torch.device) -> bool:
    """Whether data-dependent checks run for tensors on ``device`` (see module docstring)."""
    kind = device_kind(device)
    if kind == "cpu":
        return not is_compiling()
    if kind == "meta":  # no data to check: SPEC_HAL_DEBUG is not read for it
        return False
    debug = config.debug_read
    if debug is None:
        debug = config.debug()
    return debug and not is_compiling()


def check_range(name: str, value: torch.Tensor, low: int, high: int, *, allow: int | None = None) -> None:
    """Every element in [low, high) (``allow`` is an extra accepted value, e.g. the -1 sentinel).

    Callers gate this with :func:`value_checks_enabled`.
    """
    if value.numel() == 0:
        return
    smallest, largest = (int(v) for v in torch.aminmax(value))  # one pass: the common, valid case
    if smallest >= low and largest < high:
        return
    bad = (value < low) | (value >= high)
    if allow is not None:
        bad &= value != allow
    if bool(bad.any()):
        first = value.flatten()[bad.flatten().nonzero()[0, 0]].item()
        extra = f" or {allow}" if allow is not None else ""
        raise ValueError(f"{name}: values must lie in [{low}, {high}){extra}; found {first}")


def exact_sum(value: torch.Tensor) -> int:
    """``sum(value)`` of an integer tensor as an exact Python int, where an int64 sum would wrap.

    One min/max pass shows when a plain int64 sum cannot wrap (the common case); otherwise the high
    and low 32-bit halves of every element are summed apart, neither of which can wrap.
    """
    if value.numel() == 0:
        return 0
    values = value.long().flatten()
    smallest, largest = (int(v) for v in torch.aminmax(values))
    if values.numel() * max(largest, -smallest) <= _INT64_MAX:
        return int(values.sum())
    total = 0
    for chunk in values.split(_EXACT_SUM_CHUNK):  # each half sums below 2**63 over a chunk
        total += (int((chunk >> 32).sum()) << 32) + int((chunk & 0xFFFFFFFF).sum())
    return total


def check_sum_below(
    name: str,
    value: torch.Tensor,
    limit: int,
    *,
    plus: torch.Tensor | None = None,
    constant: int = 0,
    expression: str,
) -> None:
    """Every ``value + plus + constant < limit``, compared without forming the sum (which could wrap
    int64). ``plus`` (elementwise, same shape as ``value``) and ``constant`` must be non-negative,
    ``limit`` at most ``2**63``.

    The passing path is one max of each tensor, compared as Python ints. Callers gate this with
    :func:`value_checks_enabled`.
    """
    if value.numel() == 0:
        return
    high = limit - 1 - constant  # the largest value + plus allowed
    largest = int(value.max())
    if plus is not None:
        largest += int(plus.max())
    if largest <= high:
        return
    # The failing path: find the first offender exactly. With plus >= 0, a sum that wrapped is
    # smaller than value (and too large); the bound is clamped into int64.
    total = value.long() if plus is None else value.long() + plus.long()
    bad = total > min(max(high, _INT64_MIN), _INT64_MAX)
    if plus is not None:
        bad |= total < value.long()
    if not bool(bad.any()):
        return
    first = int(bad.flatten().nonzero()[0, 0])
    found = f"{name}[{first}] = {int(value.flatten()[first])}"
    if plus is not None:
        found += f" with {int(plus.flatten()[first])}"
    raise ValueError(f"{name}: {expression} must stay below {limit}; found {found}")


def check_sum_fits(
    name: str,
    value: torch.Tensor,
    dtype: torch.dtype,
    *,
    plus: torch.Tensor | None = None,
    constant: int = 0,
    expression: str,
) -> None:
    """Every ``value + plus + constant`` fits ``dtype`` (a counter or a position that must not
    wrap); see :func:`check_sum_below`."""
    check_sum_below(
        name,
        value,
        torch.iinfo(dtype).max + 1,
        plus=plus,
        constant=constant,
        expression=f"{expression} ({str(dtype).replace('torch.', '')})",
    )


def check_non_negative(name: str, value: torch.Tensor) -> None:
    if value.numel() and (smallest := int(value.min())) < 0:
        raise ValueError(f"{name}: expected non-negative values, found {smallest}")


def check_fits_int32(name: str, value: torch.Tensor) -> None:
    """Values written into an int32 destination must not narrow (int64 -> int32 overflow)."""
    if value.dtype != torch.int64 or value.numel() == 0:
        return
    smallest, largest = (int(v) for v in torch.aminmax(value))
    if largest > _INT32_MAX or smallest < -_INT32_MAX - 1:
        raise ValueError(f"{name}: values do not fit the int32 destination (max {int(value.max())})")


def check_output(
    name: str,
    value: object,
    *,
    dtype: torch.dtype,
    device: torch.device,
    shape: Sequence[int | AnySize] | None = None,
    min_numel: int | None = None,
    ndim: int | None = None,
) -> torch.Tensor:
    """A caller-provided output: exact dtype (TypeError otherwise), device, shape or capacity."""
    # The passing path inline (one frame, each attribute read once); any miss re-checks in order.
    if (
        isinstance(value, _Tensor)
        and value.dtype is dtype
        and value.device == device
        and ((value.shape == shape) if shape is not None else (ndim is None or value.dim() == ndim))
        and (min_numel is None or value.numel() >= min_numel)
    ):
        return value
    tensor = check_tensor(name, value, dtype=dtype, shape=shape, ndim=ndim)
    if tensor.device != device:
        raise ValueError(f"{name}: expected device {device}, got {tensor.device}")
    if min_numel is not None and tensor.numel() < min_numel:
        check_min_numel(name, tensor, min_numel)
    return tensor


def check_distinct_elements(name: str, value: torch.Tensor) -> None:
    """A tensor written in place: no two elements in one place (an expanded tensor's are), where
    a provider's programs would race and the reference's torch call refuse. Not while compiling:
    the eager call checked it, and dynamo does not trace the query."""
    if not is_compiling() and torch._debug_has_internal_overlap(value) == 1:  # 1: certain, 2: not decided
        raise ValueError(
            f"{name}: expected a tensor whose elements do not share memory (strides {value.stride()})"
        )


def new_output(
    shape: Sequence[int], dtype: torch.dtype, device: torch.device, *, fill: int | float | None = None
) -> torch.Tensor:
    """Allocate an output the caller left None (never under graph capture: pass every output there)."""
    _refuse_capture(device)
    return _allocate(shape, dtype, device, fill)


def new_outputs(
    specs: Sequence[tuple[Sequence[int], torch.dtype]],
    device: torch.device,
    *,
    fill: int | float | None = None,
) -> list[torch.Tensor]:
    """Allocate the outputs ``(shape, dtype)`` the caller left None, as :func:`new_output` does,
    asking the device once whether it captures a graph (a driver query) for all of them."""
    _refuse_capture(device)
    return [_allocate(shape, dtype, device, fill) for shape, dtype in specs]


#: Each device's capture query (:func:`spec_hal.runtime.capture_query`) and the registry generation
#: it was found under: asked on every call that allocates an output, where the way through
#: ``spec_hal.runtime`` to the vendor's runtime would cost more than the query itself.
_CAPTURE_QUERY_OF_DEVICE: dict[torch.device, tuple[int, Callable[[], bool] | None]] = {}


def is_capturing(device: torch.device) -> bool:
    """:func:`spec_hal.runtime.is_capturing`, asked through the device's capture query kept here."""
    if is_compiling():  # a traced read of the map would guard on it: every registry change recompiles
        return runtime.is_capturing(device)
    found = _CAPTURE_QUERY_OF_DEVICE.get(device)
    if found is not None and found[0] == registry.STATE.generation:
        query = found[1]
    else:
        query = runtime.remembered(_CAPTURE_QUERY_OF_DEVICE, device, runtime.capture_query)
    return query is not None and query()


def _refuse_capture(device: torch.device) -> None:
    if is_capturing(device):
        raise ValueError("an optional output was left None during graph capture; pass every output tensor")


def _allocate(
    shape: Sequence[int], dtype: torch.dtype, device: torch.device, fill: int | float | None
) -> torch.Tensor:
    if fill is None:
        return empty(shape, dtype, device)
    return torch.full(tuple(shape), fill, dtype=dtype, device=device)


def empty(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty(shape, ...)``, with the sizes passed one by one: torch parses separate int
    arguments faster than one tuple of them (a host cost on every allocating call)."""
    if len(shape):
        return torch.empty(*shape, dtype=dtype, device=device)
    return torch.empty((), dtype=dtype, device=device)


# --------------------------------------------------------------------------------------------------
# Checks that contracts of several modules share (a warm call then passes no family module)


OutputSpec = tuple[str, Sequence[int], torch.dtype]


def checked_outputs(
    out: object, specs: Sequence[OutputSpec | None], device: torch.device
) -> list[Tensor | None]:
    """The outputs of a bare ``out=`` tuple (flattened), checked against ``specs``; allocated when None.

    A None spec is an output the call does not produce (e.g. ``hidden`` without hidden states): its
    ``out`` entry must be None too.
    """
    if out is None:
        wanted = [spec[1:] for spec in specs if spec is not None]
        allocated = iter(new_outputs(wanted, device) if wanted else ())
        return [None if spec is None else next(allocated) for spec in specs]
    if not isinstance(out, (tuple, list)) or len(out) != len(specs):
        raise ValueError(f"out: expected a tuple of {len(specs)} entries shaped like the returns")
    checked: list[Tensor | None] = []
    for position, (given, spec) in enumerate(zip(out, specs, strict=True)):
        if spec is None:
            if given is not None:
                raise ValueError(f"out[{position}]: expected None, this call has no such output")
            checked.append(None)
        else:
            name, shape, dtype = spec
            checked.append(check_output(name, given, dtype=dtype, device=device, shape=shape))
    return checked


def check_float_matrix(name: str, value: object) -> Tensor:
    return check_tensor(name, value, dtype=FLOAT_DTYPES, ndim=2)


def check_logits(logits: object) -> Tensor:
    """``[B, V]`` floating logits over a non-empty vocabulary."""
    logits = check_float_matrix("logits", logits)
    if logits.shape[1] == 0:
        raise ValueError("logits: expected a non-empty vocabulary (V >= 1)")
    return logits


def check_step(step: object) -> int:
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"step: expected an int, got {type(step).__name__}")
    if not 0 <= step < STEP_LIMIT:
        raise ValueError(f"step: expected an int in [0, 2**16), got {step}")
    return step


def check_keys(seeds: object, positions: object, batch: int | None = None) -> int:
    """``seeds`` and ``positions`` as ``[B]`` int64 (B = ``batch`` where given): B."""
    shape = None if batch is None else (batch,)
    seeds = check_tensor("seeds", seeds, dtype=torch.int64, ndim=1, shape=shape)
    check_tensor("positions", positions, dtype=torch.int64, shape=tuple(seeds.shape))
    return seeds.shape[0]


def check_positions(positions: Tensor, device: torch.device) -> None:
    # A position past 2**48 would share its counter with another step's draws.
    if value_checks_enabled(device):
        check_range("positions", positions, 0, POSITION_LIMIT)


def check_req_to_token(name: str, value: object) -> Tensor:
    return check_tensor(name, value, dtype=torch.int32, ndim=2)


def check_capacity(name: str, tensor: Tensor, needed: int, what: str) -> None:
    if tensor.numel() < needed:
        raise ValueError(f"{name}: needs at least {needed} elements ({what}), has {tensor.numel()}")


def tree_index_outputs(
    device: torch.device,
    bs: int,
    num_nodes: int,
    positions: Tensor | None,
    links: tuple[Tensor | None, Tensor | None, Tensor | None],
    *,
    fill: int | None = None,
) -> tuple[Tensor, list[Tensor]]:
    """``positions`` ``[bs*D]`` and the three retrieve links ``[bs, D]`` (index, next token, next
    sibling), int64: each checked where given, allocated (filled with ``fill``) where None."""
    if positions is None:
        positions = new_output((bs * num_nodes,), torch.int64, device)
    check_output("positions", positions, dtype=torch.int64, device=device, shape=(bs * num_nodes,))
    checked = []
    for name, given in zip(
        ("retrieve_index", "retrieve_next_token", "retrieve_next_sibling"), links, strict=True
    ):
        if given is None:
            given = new_output((bs, num_nodes), torch.int64, device, fill=fill)
        checked.append(check_output(name, given, dtype=torch.int64, device=device, shape=(bs, num_nodes)))
    return positions, checked


def trailing_dims_contiguous(tensor: Tensor, first_dim: int) -> bool:
    """Whether dims ``first_dim..`` of ``tensor`` are laid out contiguously (size-1 dims ignored)."""
    if tensor.is_contiguous():  # the usual case: one call instead of a walk over the dims
        return True
    shape, strides = tensor.shape, tensor.stride()
    expected = 1
    for dim in range(len(shape) - 1, first_dim - 1, -1):  # indexed: no sliced or reversed copies
        size = shape[dim]
        if size != 1 and strides[dim] != expected:
            return False
        expected *= size
    return True
