"""Probing never initialises a device: every init-like entry point is booby-trapped."""

from __future__ import annotations

import sys

import pytest
import torch
from builtin_vendors import DETECTION_ORDER

import spec_hal
from spec_hal import registry
from spec_hal.cli import info_data

TRAPS = [
    (torch.cuda, "init"),
    (torch.cuda, "_lazy_init"),
    (torch.cuda, "device_count"),
    (torch.cuda, "is_available"),
    (torch.cuda, "current_device"),
    (torch.cuda, "get_device_properties"),
    (torch.xpu, "init"),
    (torch.xpu, "_lazy_init"),
    (torch.xpu, "device_count"),
    (torch._C, "_cuda_init"),
]


def test_detection_and_info_initialise_no_device(monkeypatch):
    calls = []

    def trap(name):
        def called(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} called during probing")

        return called

    for module, name in TRAPS:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, trap(f"{module.__name__}.{name}"))
    registry.reset_detection()
    try:
        device = spec_hal.current_device()
        data = info_data()
    finally:
        registry.reset_detection()
    assert device.name == "cpu"
    assert {p["vendor"] for p in data["probes"]} >= set(DETECTION_ORDER)
    assert calls == []


def test_vendor_extensions_are_not_imported_by_probing():
    registry.reset_detection()
    spec_hal.current_device()
    info_data()
    for name in ("torch_npu", "torch_musa", "torchada", "intel_extension_for_pytorch"):
        assert name not in sys.modules


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
def test_fork_after_detection_child_can_use_torch():
    import os

    registry.reset_detection()
    spec_hal.current_device()
    pid = os.fork()
    if pid == 0:  # child: must be able to run ops (on a GPU machine: use the GPU)
        try:
            values = torch.arange(10.0)
            top = spec_hal.ops.fast_topk(values, 2)
            os._exit(0 if top[1].tolist() == [9, 8] else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
