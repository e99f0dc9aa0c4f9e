"""The four non-CUDA vendor packages without their hardware: import safety with their software
faked, and descriptors that explain every op. Emulated conformance runs in the tox env `emulate`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spec_hal import registry

VENDORS = ("hip", "musa", "npu", "xpu")


def _python(code: str, site: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("SPEC_HAL_", "TORCH_DEVICE_BACKEND"))
    }
    environment["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120
    )


@pytest.fixture(scope="module")
def broken_torch_npu(tmp_path_factory) -> Path:
    """A torch_npu installed without Ascend's CANN: its import fails, and it is a torch backend
    that torch autoloads at ``import torch`` (the failure mode ENV.md describes)."""
    site = tmp_path_factory.mktemp("npu_site")
    (site / "torch_npu").mkdir()
    (site / "torch_npu" / "__init__.py").write_text(
        'raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")\n'
    )
    dist = site / "torch_npu-2.13.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.13.0\n")
    (dist / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    return site


def test_broken_torch_npu_breaks_plain_import_torch(broken_torch_npu):
    done = _python("import torch", broken_torch_npu)
    assert done.returncode != 0 and "libhccl" in done.stderr


def test_with_autoload_off_spec_hal_probes_npu_without_importing_it(broken_torch_npu):
    code = "import json, sys, spec_hal.cli as c; d = c.info_data(); print(json.dumps([d['probes'], 'torch_npu' in sys.modules]))"
    done = _python(code, broken_torch_npu, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert done.returncode == 0, done.stderr
    probes, imported = json.loads(done.stdout)
    npu = next(p for p in probes if p["vendor"] == "npu")
    assert npu["installed"]["ok"] and not npu["present"]["ok"]
    assert imported is False


@pytest.mark.parametrize("vendor", VENDORS)
def test_descriptor_states_every_op_binding_as_data(vendor):
    import spec_hal.ops  # noqa: F401  (defines every op)

    descriptor = registry.device(vendor)
    assert descriptor.dist_backend in {"rccl", "mccl", "hccl", "xccl"}
    for name in registry.ops():
        intent = descriptor.intent(name)
        assert intent.provider and intent.reason, f"{vendor}: {name} has no stated intent"
        choice = registry.choose(name, descriptor, None)
        if choice.fallback is not None:  # a fallback must say why
            assert choice.fallback.reason


def test_triton_vendors_use_their_own_launch_configuration():
    pytest.importorskip("triton")
    import importlib

    names = {}
    for vendor, attr in (("cuda", "HOPPER"), ("hip", "CDNA"), ("musa", "MUSA"), ("xpu", "XE")):
        source = (
            Path(importlib.import_module(f"spec_hal.devices.{vendor}").__file__)
            .with_name("bindings.py")
            .read_text()
        )
        assert f"bind_triton_family({vendor!r}, {attr!r})" in source.replace('"', "'")
        names[vendor] = attr
    from spec_hal.kernels.triton import config

    assert getattr(config, names["hip"]).warp_size == 64
    assert getattr(config, names["cuda"]).warp_size == 32


def test_docs_vendor_matrix_matches_the_descriptors():
    source = os.environ.get("SPEC_HAL_SOURCE_TREE") or str(Path(__file__).resolve().parents[1])
    docs = Path(source) / "docs" / "vendors.md"
    if not docs.exists():
        pytest.skip("no source tree with docs/ here")
    from spec_hal.cli import vendor_matrix

    assert vendor_matrix() in docs.read_text(), "docs/vendors.md: regenerate with `spec-hal info --matrix`"
