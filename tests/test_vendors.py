"""The accelerator vendor packages without their hardware: import safety with their software faked,
and descriptors that explain every op. Emulated conformance runs in the tox env `emulate`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builtin_vendors import ACCELERATORS, PACKAGES

from spec_hal import registry


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


@pytest.mark.parametrize("vendor", ACCELERATORS)
def test_descriptor_states_every_op_binding_as_data(vendor):
    import spec_hal.ops  # noqa: F401  (defines every op)

    descriptor = registry.device(vendor)
    assert descriptor.dist_backend in {"nccl", "mccl", "hccl", "xccl"}  # ROCm torch calls RCCL "nccl"
    for name in registry.ops():
        intent = descriptor.intent(name)
        assert intent.provider and intent.reason, f"{vendor}: {name} has no stated intent"
        choice = registry.choose(name, descriptor, None)
        if choice.fallback is not None:  # a fallback must say why
            assert choice.fallback.reason


def test_triton_vendors_bind_the_family_with_their_own_launch_configuration():
    import importlib

    for package in PACKAGES:
        descriptor = package.DESCRIPTOR
        assert ("triton" in descriptor.families) == descriptor.capabilities.triton, descriptor.name
        if descriptor.capabilities.triton:
            assert descriptor.families == {"triton": package.TRITON_CONFIG}
    configs = {v: importlib.import_module(f"spec_hal.devices.{v}").TRITON_CONFIG for v in ("cuda", "hip")}
    assert configs["hip"].warp_size == 64  # AMD wavefronts
    assert configs["cuda"].warp_size == 32


def test_docs_vendor_matrix_matches_the_descriptors():
    pytest.importorskip("triton", reason="the Triton family's coverage is read from its launcher table")
    source = os.environ.get("SPEC_HAL_SOURCE_TREE") or str(Path(__file__).resolve().parents[1])
    docs = Path(source) / "docs" / "vendors.md"
    if not docs.exists():
        pytest.skip("no source tree with docs/ here")
    from spec_hal.cli import vendor_matrix

    assert vendor_matrix() in docs.read_text(), "docs/vendors.md: regenerate with `spec-hal info --matrix`"
