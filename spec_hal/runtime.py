"""Device-neutral runtime helpers: the only way code outside ``spec_hal/devices/`` touches streams,
synchronisation, device guards and graph-capture state.

Each helper maps the tensor's device type to the active vendor (:func:`spec_hal.registry.vendor_for`)
and calls that vendor's runtime: a :class:`TorchDeviceRuntime` where its descriptor says
``runtime=TorchDeviceModule(...)`` (every built-in accelerator), else the object its descriptor
names. CPU and meta tensors have no streams: they always use the host runtime, also while a test
emulates a vendor on the CPU.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch

from . import registry
from .opdef import is_compiling

_HOST_TYPES = frozenset({"cpu", "meta"})


class HostRuntime:
    """CPU (and meta) tensors: no streams, nothing to wait for, no guard."""

    def synchronize(self, device: torch.device) -> None:
        return None

    def current_stream(self, device: torch.device) -> Any:
        return None

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        return None

    def device_guard(self, device: torch.device) -> Any:
        return contextlib.nullcontext()

    def current_index(self) -> int:
        return 0

    def is_capturing(self, device: torch.device) -> bool:
        return False

    def capture_graph(
        self, fn: Callable[[], None], device: torch.device, generators: Sequence[torch.Generator] = ()
    ) -> Callable[[], None]:
        raise ValueError("host tensors have no device graphs")


HOST_RUNTIME = HostRuntime()


class TorchDeviceRuntime:
    """The runtime of an accelerator: its calls through torch's device module of ``device_type``
    (``torch.get_device_module``), which every accelerator vendor's torch exposes alike, imported on
    first use after ``extension`` where that module appears only then (``torch_npu``). The registry
    builds one for a descriptor whose ``runtime`` is a ``TorchDeviceModule``."""

    def __init__(self, device_type: str, extension: str | None = None) -> None:
        self.device_type = device_type
        self.extension = extension
        self._module: Any = None

    @property
    def module(self) -> Any:
        if self._module is None:
            if self.extension is not None:
                importlib.import_module(self.extension)
            self._module = torch.get_device_module(self.device_type)
        return self._module

    def synchronize(self, device: torch.device) -> None:
        self.module.synchronize(device)

    def current_stream(self, device: torch.device) -> Any:
        return self.module.current_stream(device)

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        tensor.record_stream(stream)

    def device_guard(self, device: torch.device) -> Any:
        return self.module.device(device)

    def current_index(self) -> int:
        return int(self.module.current_device())

    def device_count(self) -> int:
        return int(self.module.device_count())

    def is_capturing(self, device: torch.device) -> bool:
        query = self.capture_query(device)
        return bool(query()) if query is not None else False

    def capture_query(self, device: torch.device) -> Callable[[], bool] | None:
        """:meth:`is_capturing` as the device module's own call (None: the module never captures),
        which :func:`capture_query` hands to callers asking on every call."""
        query: Callable[[], bool] | None = getattr(self.module, "is_current_stream_capturing", None)
        return query

    def capture_graph(
        self, fn: Callable[[], None], device: torch.device, generators: Sequence[torch.Generator] = ()
    ) -> Callable[[], None]:
        module = self.module
        side = module.Stream(device)
        side.wait_stream(module.current_stream(device))
        with module.stream(side):
            fn()  # warm-up on a side stream, as capture requires
        module.current_stream(device).wait_stream(side)
        graph_class = next(
            getattr(module, name)
            for name in ("CUDAGraph", "XPUGraph", "NPUGraph", "MUSAGraph")
            if hasattr(module, name)
        )
        graph = graph_class()
        for generator in generators:
            # A generator the captured ops draw from must be registered so each replay advances it.
            if generator.device.type != self.device_type:
                raise ValueError(
                    f"generators: expected {self.device_type} generators (a graph replays device draws only), "
                    f"got one on {generator.device}"
                )
            register = getattr(graph, "register_generator_state", None)
            if register is None:
                raise ValueError(f"generators: {graph_class.__name__} cannot register a torch.Generator")
            register(generator)
        with module.graph(graph):
            fn()
        return graph.replay

    def time_each(self, calls: list[Callable[[], Any]], device: torch.device) -> list[float]:
        """Device seconds of each call, measured with events on the current stream (benchmarks)."""
        module = self.module
        events = [(module.Event(enable_timing=True), module.Event(enable_timing=True)) for _ in calls]
        for fn, (start, end) in zip(calls, events, strict=True):
            start.record()
            fn()
            end.record()
        module.synchronize(device)
        return [start.elapsed_time(end) / 1e3 for start, end in events]

    def device_name(self, device: torch.device) -> str:
        return str(self.module.get_device_name(device))


T = TypeVar("T")

#: Each device's runtime and the registry generation it was found under. A device's ``type`` is a
#: string built on every read, slower than the dict lookup by device that replaces it here.
_RUNTIME_OF_DEVICE: dict[torch.device, tuple[int, registry.Runtime]] = {}
#: Devices remembered at most (indices are few; a stray flood of them only empties the map).
_MAX_REMEMBERED_DEVICES = 64


def _runtime_of_type(kind: str) -> registry.Runtime:
    return HOST_RUNTIME if kind in _HOST_TYPES else registry.runtime_of(registry.vendor_for(kind))


def remembered(
    cache: dict[torch.device, tuple[int, T]], device: torch.device, find: Callable[[torch.device], T]
) -> T:
    """``find(device)``, filed in ``cache`` under the registry generation read before finding (a
    registry change meanwhile makes the next call find it again): the slow path of a per-device
    cache whose callers read ``cache[device]`` while its generation is the registry's."""
    generation = registry.STATE.generation
    value = find(device)
    if len(cache) >= _MAX_REMEMBERED_DEVICES:
        cache.clear()
    cache[device] = (generation, value)
    return value


def _runtime(device: torch.device) -> registry.Runtime:
    if is_compiling():  # a traced read of the map would guard on it: every registry change recompiles
        return _runtime_of_type(device.type)
    found = _RUNTIME_OF_DEVICE.get(device)
    if found is not None and found[0] == registry.STATE.generation:
        return found[1]
    return remembered(_RUNTIME_OF_DEVICE, device, lambda dev: _runtime_of_type(dev.type))


def _as_device(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device(registry.current_device().device_type)
    return torch.device(device)


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for all work queued on ``device`` (default: the current spec_hal device)."""
    dev = _as_device(device)
    _runtime(dev).synchronize(dev)


def current_stream(device: torch.device | str | None = None) -> Any:
    """The current stream of ``device`` (None on the CPU)."""
    dev = _as_device(device)
    return _runtime(dev).current_stream(dev)


def device_guard(device: torch.device | str) -> Any:
    """A context manager making ``device`` current for launches (a no-op on the CPU)."""
    dev = torch.device(device)
    return _runtime(dev).device_guard(dev)


def is_capturing(device: torch.device | str) -> bool:
    """Whether the current stream of ``device`` is capturing a graph."""
    dev = device if device.__class__ is torch.device else torch.device(device)
    return _runtime(dev).is_capturing(dev)


def capture_query(device: torch.device | str) -> Callable[[], bool] | None:
    """:func:`is_capturing` of ``device`` as a call of no argument, for a caller that keeps it and
    asks on every call (:func:`spec_hal.validation.is_capturing`); None where the device never
    captures (host tensors). A vendor runtime may offer ``capture_query(device)`` (the device
    module's own query, nothing of spec_hal between); else its ``is_capturing`` is bound to the
    device. Found again whenever the registry changes, as the runtime is."""
    dev = device if device.__class__ is torch.device else torch.device(device)
    runtime = _runtime(dev)
    if runtime is HOST_RUNTIME:
        return None
    own: Callable[[torch.device], Callable[[], bool] | None] | None = getattr(runtime, "capture_query", None)
    if own is not None:
        return own(dev)
    return functools.partial(runtime.is_capturing, dev)


def supports_graph_capture(device: torch.device | str | None = None) -> bool:
    dev = _as_device(device)
    if dev.type in _HOST_TYPES:
        return False
    return registry.vendor_for(dev.type).capabilities.graph_capture


def record_stream_each(tensors: Iterable[torch.Tensor | None], stream: Any) -> None:
    """Call ``record_stream(stream)`` on each device tensor whose vendor's allocator supports it.

    None entries and host (CPU, meta) tensors are skipped, as sglang's CUDA-only helper skips
    non-CUDA tensors; NPU and XPU allocators support it too, so this is generalised by vendor.
    """
    for tensor in tensors:
        if tensor is None or tensor.device.type in _HOST_TYPES:
            continue
        vendor = registry.vendor_for(tensor.device.type)
        if vendor.capabilities.record_stream:
            registry.runtime_of(vendor).record_stream(tensor, stream)


def capture_graph(
    fn: Callable[[], None], device: torch.device | str, generators: Sequence[torch.Generator] = ()
) -> Callable[[], None]:
    """Capture ``fn`` into a device graph and return its replay (devices whose descriptor declares
    graph capture). ``fn`` runs once on a side stream first, as graph capture requires.
    ``generators`` are the ``torch.Generator`` objects ``fn`` draws from: registered with the graph,
    each replay draws new numbers from them."""
    dev = torch.device(device)
    if not supports_graph_capture(dev):
        raise ValueError(f"device: {dev} does not support graph capture")
    if generators:
        return _runtime(dev).capture_graph(fn, dev, tuple(generators))
    return _runtime(dev).capture_graph(fn, dev)
