"""Detection with every vendor mocked: probes see a described host, never the real one."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from builtin_vendors import DETECTION_ORDER

from spec_hal import registry
from spec_hal.detect import HostFacts
from spec_hal.devices.cuda import detection as cuda_probe
from spec_hal.errors import DeviceSelectionError


def host(*, env=None, files=(), modules=(), versions=None, texts=None) -> HostFacts:
    """A described host: device nodes/sysfs files, importable modules, torch build versions."""
    import fnmatch

    versions = versions or {}
    texts = texts or {}
    return HostFacts(
        env=env or {},
        glob=lambda pattern: [f for f in files if fnmatch.fnmatch(f, pattern)],
        find_module=lambda name: name in modules,
        torch_version=lambda attr: versions.get(attr),
        read_text=lambda path: texts.get(path),
    )


KFD = "/sys/class/kfd/kfd/topology/nodes/1/gpu_id"
HOSTS = {
    "hip": host(versions={"hip": "6.2"}, files=[KFD], texts={KFD: "4242\n"}),
    "musa": host(modules={"torch_musa"}, files=["/dev/mtgpu.0"]),
    "cuda": host(versions={"cuda": "13.0"}, files=["/dev/nvidia0"]),
    "npu": host(modules={"torch_npu"}, files=["/dev/davinci0"]),
}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("SPEC_HAL_DEVICE", raising=False)
    monkeypatch.setattr(cuda_probe, "nvml_device_count", lambda: -1)  # fall back to device nodes
    registry.reset_detection()
    yield
    registry.reset_detection()


def probes_by_vendor(detection):
    return {p.vendor: p for p in detection.probes}


@pytest.mark.parametrize("vendor", sorted(HOSTS))
def test_each_vendor_detected_alone(vendor):
    detection = registry.detect(HOSTS[vendor])
    assert detection.device.name == vendor
    probe = probes_by_vendor(detection)[vendor]
    assert probe.installed.ok and probe.present.ok and probe.visible.ok
    others = [p for p in detection.probes if p.vendor not in (vendor, "cpu")]
    assert all(not p.usable for p in others)


def test_xpu_detected_through_torch_xpu(monkeypatch):
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    detection = registry.detect(host(versions={"xpu": "20250101"}))
    assert detection.device.name == "xpu"
    assert "is_available" in probes_by_vendor(detection)["xpu"].present.reason


def test_xpu_with_only_ipex_but_no_device(monkeypatch):
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    detection = registry.detect(host(modules={"intel_extension_for_pytorch"}))
    xpu = probes_by_vendor(detection)["xpu"]
    assert xpu.installed.ok and not xpu.present.ok
    assert detection.device.name == "cpu"


def test_nothing_found_is_cpu():
    detection = registry.detect(host())
    assert detection.device.name == "cpu"
    assert "not usable" in detection.reason  # explains why every higher priority lost


def test_hip_wins_over_cuda_lookalike_and_npu():
    both = host(
        versions={"hip": "6.2"}, files=[KFD, "/dev/davinci0"], texts={KFD: "7"}, modules={"torch_npu"}
    )
    detection = registry.detect(both)
    assert detection.device.name == "hip"
    assert probes_by_vendor(detection)["npu"].usable  # present too, lower priority


def test_musa_checked_before_cuda():
    both = host(versions={"cuda": "12.4"}, modules={"torchada"}, files=["/dev/mtgpu0", "/dev/nvidia0"])
    assert registry.detect(both).device.name == "musa"


def test_rocm_torch_is_not_cuda():
    rocm = host(versions={"hip": "6.2", "cuda": None}, files=["/dev/nvidia0"])
    cuda = probes_by_vendor(registry.detect(rocm))["cuda"]
    assert not cuda.installed.ok and "ROCm" in cuda.installed.reason


def test_installed_without_device():
    detection = registry.detect(host(modules={"torch_npu"}))
    npu = probes_by_vendor(detection)["npu"]
    assert npu.installed.ok and not npu.present.ok
    assert "davinci" in npu.present.reason
    assert detection.device.name == "cpu"


def test_device_mask_hides_gpus():
    masked = host(versions={"cuda": "13.0"}, files=["/dev/nvidia0"], env={"CUDA_VISIBLE_DEVICES": ""})
    detection = registry.detect(masked)
    cuda = probes_by_vendor(detection)["cuda"]
    assert cuda.present.ok and not cuda.visible.ok
    assert detection.device.name == "cpu"


def test_nvml_count_is_preferred_over_device_nodes(monkeypatch):
    monkeypatch.setattr(cuda_probe, "nvml_device_count", lambda: 0)
    cuda = probes_by_vendor(registry.detect(HOSTS["cuda"]))["cuda"]
    assert not cuda.present.ok and "NVML reports no GPU" in cuda.present.reason


def test_fake_vendor_modules_in_sys_modules(monkeypatch):
    """Real module objects (faked torch_npu / torch_musa) are found without importing anything."""
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setitem(sys.modules, "torch_musa", types.ModuleType("torch_musa"))
    facts = HostFacts(glob=lambda pattern: ["/dev/davinci3"] if "davinci" in pattern else [])
    detection = registry.detect(facts)
    found = probes_by_vendor(detection)
    assert found["npu"].usable and found["musa"].installed.ok and not found["musa"].present.ok
    assert detection.device.name == "npu"


def test_override_valid(monkeypatch):
    monkeypatch.setenv("SPEC_HAL_DEVICE", "cpu")
    detection = registry.detect(HOSTS["cuda"])
    assert detection.device.name == "cpu" and detection.overridden
    assert "SPEC_HAL_DEVICE" in detection.reason


def test_override_unknown_lists_known_and_present(monkeypatch):
    monkeypatch.setenv("SPEC_HAL_DEVICE", "tpu")
    with pytest.raises(DeviceSelectionError) as err:
        registry.detect(HOSTS["npu"])
    message = str(err.value)
    assert "'tpu'" in message and f"known: {', '.join(DETECTION_ORDER)}" in message
    assert "present: npu, cpu" in message


def test_override_absent_device(monkeypatch):
    monkeypatch.setenv("SPEC_HAL_DEVICE", "cuda")
    with pytest.raises(DeviceSelectionError, match="not usable here.*present: cpu"):
        registry.detect(host())


def test_a_raising_probe_is_reported_not_raised(monkeypatch):
    def explode(facts):
        raise RuntimeError("driver exploded")

    descriptor = registry.device("npu")
    import dataclasses

    from spec_hal.testing import isolated_registry

    with isolated_registry():
        registry.register_device(dataclasses.replace(descriptor, probe=explode))
        npu = probes_by_vendor(registry.detect(host()))["npu"]
    assert not npu.usable and "driver exploded" in npu.installed.reason


def test_cuda_tensors_map_to_hip_on_rocm_torch(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    monkeypatch.setattr(torch.version, "cuda", None, raising=False)
    registry.reset_detection()
    assert registry.vendor_for("cuda").name == "hip"
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.version, "cuda", "13.0", raising=False)
    registry.reset_detection()
    assert registry.vendor_for("cuda").name == "cuda"
