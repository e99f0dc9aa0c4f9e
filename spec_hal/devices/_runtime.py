"""The runtime shared by accelerator vendor packages: one over a torch device module.

Every accelerator vendor exposes the same runtime calls through its torch device module
(``torch.cuda``, ``torch.xpu``, ``torch.npu``, ``torch.musa``), so one class serves them all,
parameterised by device type; a vendor whose module appears only after importing its extension
names that extension (``torch_npu``, ``torch_musa``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch


class TorchDeviceRuntime:
    """Runtime calls through ``torch.get_device_module(device_type)``, imported on first use."""

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
        capturing = getattr(self.module, "is_current_stream_capturing", None)
        return bool(capturing()) if capturing is not None else False

    def capture_query(self, device: torch.device) -> Callable[[], bool] | None:
        """:meth:`is_capturing` as the device module's own call (None: the module never captures),
        which ``spec_hal.runtime.capture_query`` hands to callers asking on every call."""
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
