"""Graph capture through ``TorchDeviceRuntime`` with a fake device module (no accelerator here)."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from spec_hal.runtime import TorchDeviceRuntime


class FakeStream:
    def __init__(self, device=None) -> None:
        self.waited: list[FakeStream] = []

    def wait_stream(self, other: FakeStream) -> None:
        self.waited.append(other)


def fake_module(log: list[str], *, can_register: bool) -> types.SimpleNamespace:
    class FakeGraph:
        def replay(self) -> None:
            log.append("replay")

        if can_register:

            def register_generator_state(self, generator: torch.Generator) -> None:
                log.append(f"register {generator.initial_seed()}")

    @contextlib.contextmanager
    def graph(g):
        log.append("capture begins")
        yield
        log.append("capture ends")

    main = FakeStream()
    return types.SimpleNamespace(
        Stream=FakeStream,
        current_stream=lambda device=None: main,
        stream=lambda s: contextlib.nullcontext(),
        CUDAGraph=FakeGraph,
        graph=graph,
    )


def runtime_with(module: types.SimpleNamespace, device_type: str = "cuda") -> TorchDeviceRuntime:
    rt = TorchDeviceRuntime(device_type)
    rt._module = module
    return rt


def test_generators_are_registered_before_the_capture():
    log: list[str] = []
    # The fake runtime is of type "cpu" so that CPU generators (the only ones here) are its own.
    rt = runtime_with(fake_module(log, can_register=True), "cpu")
    generators = [torch.Generator().manual_seed(11), torch.Generator().manual_seed(12)]
    replay = rt.capture_graph(lambda: log.append("fn"), torch.device("cpu"), generators)
    replay()
    assert log == ["fn", "register 11", "register 12", "capture begins", "fn", "capture ends", "replay"]


def test_a_graph_that_cannot_register_generators_is_an_error_naming_them():
    rt = runtime_with(fake_module([], can_register=False), "cpu")
    with pytest.raises(ValueError, match="generators: .*cannot register"):
        rt.capture_graph(lambda: None, torch.device("cpu"), [torch.Generator()])
    rt.capture_graph(lambda: None, torch.device("cuda"))  # no generator: nothing to register


def test_a_host_generator_is_refused_before_the_capture():
    """Host draws are baked into a graph at capture; registering a CPU generator crashed torch."""
    log: list[str] = []
    rt = runtime_with(fake_module(log, can_register=True))
    with pytest.raises(ValueError, match="generators: expected cuda generators"):
        rt.capture_graph(lambda: log.append("fn"), torch.device("cuda"), [torch.Generator()])
    assert "capture begins" not in log


def _reset_detection():
    from spec_hal import registry

    registry.reset_detection()


def _enter_and_leave_an_emulation():
    from spec_hal.testing import emulate

    with emulate("cuda"):
        pass


def _invalidate():
    from spec_hal import registry

    registry.invalidate()


@pytest.mark.parametrize("change", [_invalidate, _reset_detection, _enter_and_leave_an_emulation])
def test_a_devices_runtime_is_found_again_after_the_registry_changes(monkeypatch, change):
    """The runtime of a device is remembered per device object, and found again once the registry
    changed (bindings dropped, detection reset, an emulation entered and left)."""
    from spec_hal import registry, runtime

    class Capturing:
        def __init__(self, answer: bool) -> None:
            self.answer = answer

        def is_capturing(self, device: torch.device) -> bool:
            return self.answer

    answer = [Capturing(True)]
    monkeypatch.setattr(runtime, "_RUNTIME_OF_DEVICE", {})  # this test's runtimes go with it
    monkeypatch.setattr(registry, "vendor_for", lambda device_type: device_type)
    monkeypatch.setattr(registry, "runtime_of", lambda descriptor: answer[0])
    device = torch.device("cuda", 0)
    assert runtime.is_capturing(device) and runtime.is_capturing("cuda:0")
    answer[0] = Capturing(False)
    assert runtime.is_capturing(device)  # remembered while the registry stays the same
    change()
    assert not runtime.is_capturing(device)
    assert not runtime.is_capturing(torch.device("cpu"))  # host tensors never ask a vendor
    answer[0] = Capturing(True)
    change()
    assert not runtime.is_capturing("cpu") and runtime.is_capturing(torch.device("cuda", 0))


def test_compiled_callers_compile_once_across_registry_changes():
    """The runtime and device-kind caches stay out of traced code: a guard on them would recompile
    a compiled caller on every registry change (and fail ``fullgraph`` after a few)."""
    from torch._dynamo.testing import CompileCounter

    from spec_hal import ops, registry
    from spec_hal.conformance.cases import sampling as sampling_cases

    kwargs = sampling_cases.build_draft_topk1_postprocess(torch.device("cpu"), bs=3, vocab=16, seed=1)
    del kwargs["out"]  # outputs allocated: the capture check runs

    def step(logits, positions, draft_tokens):
        values, indices = ops.draft_topk1_postprocess(logits, positions, draft_tokens, draft_token_column=1)
        return values + 1, indices

    counter = CompileCounter()
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    args = (kwargs["logits"], kwargs["positions"], kwargs["draft_tokens"])
    compiled(*args)
    for _ in range(3):
        registry.invalidate()
        compiled(*args)
    assert counter.frame_count == 1


def test_a_torch_device_runtime_hands_out_its_modules_capture_query():
    query = lambda: True  # noqa: E731
    assert runtime_with(types.SimpleNamespace(is_current_stream_capturing=query)).capture_query(None) is query
    assert runtime_with(types.SimpleNamespace()).capture_query(None) is None  # never captures


@pytest.mark.parametrize("change", [_invalidate, _reset_detection, _enter_and_leave_an_emulation])
def test_the_capture_check_keeps_each_devices_query_until_the_registry_changes(monkeypatch, change):
    """``validation.is_capturing`` (asked before every allocation) keeps each device's capture query:
    the device's answer is asked on every call, the vendor's runtime only once per registry state."""
    from spec_hal import registry, runtime, validation

    capturing, found = [False], []

    class Runtime:
        def capture_query(self, device: torch.device):
            found.append(device)
            return lambda: capturing[0]

    monkeypatch.setattr(validation, "_CAPTURE_QUERY_OF_DEVICE", {})
    monkeypatch.setattr(runtime, "_RUNTIME_OF_DEVICE", {})
    monkeypatch.setattr(registry, "vendor_for", lambda device_type: device_type)
    monkeypatch.setattr(registry, "runtime_of", lambda descriptor: Runtime())
    device = torch.device("cuda", 0)
    assert not validation.is_capturing(device)
    capturing[0] = True
    assert validation.is_capturing(device) and validation.is_capturing(torch.device("cuda", 0))
    assert found == [device]
    with pytest.raises(ValueError, match="left None during graph capture"):
        validation.new_output((2,), torch.int64, device)
    change()
    assert validation.is_capturing(device) and found == [device, device]
    assert not validation.is_capturing(torch.device("cpu"))  # host tensors never ask a vendor
    assert found == [device, device]


def test_a_runtime_without_a_capture_query_is_asked_itself(monkeypatch):
    from spec_hal import registry, runtime, validation

    asked = []

    class Runtime:
        def is_capturing(self, device: torch.device) -> bool:
            asked.append(device)
            return len(asked) > 1

    monkeypatch.setattr(validation, "_CAPTURE_QUERY_OF_DEVICE", {})
    monkeypatch.setattr(runtime, "_RUNTIME_OF_DEVICE", {})
    monkeypatch.setattr(registry, "vendor_for", lambda device_type: device_type)
    monkeypatch.setattr(registry, "runtime_of", lambda descriptor: Runtime())
    device = torch.device("cuda", 1)
    assert not validation.is_capturing(device) and validation.is_capturing(device)
    assert asked == [device, device]
