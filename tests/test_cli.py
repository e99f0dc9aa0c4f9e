"""``spec-hal info``: the console script and ``python -m spec_hal``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest


def spec_hal(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_HAL_")}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "spec_hal", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )


def test_info_json_has_the_documented_keys_and_every_op_bound():
    done = spec_hal("info", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == {"device", "probes", "ops", "plugins", "versions"}
    assert data["device"]["name"] == "cpu"
    assert [p["vendor"] for p in data["probes"]] == ["hip", "musa", "cuda", "npu", "xpu", "cpu"]
    assert all({"installed", "present", "visible"} <= set(p) for p in data["probes"])
    assert data["ops"], "no op bound"
    assert all(row["provider"] and row["fallback"] is None for row in data["ops"])
    assert data["versions"]["torch"]


def test_info_text_explains_the_choice():
    done = spec_hal("info")
    assert done.returncode == 0, done.stderr
    assert "device: cpu" in done.stdout and "why:" in done.stdout and "fast_topk" in done.stdout


@pytest.mark.parametrize("vendor", ["cuda", "hip", "musa", "npu", "xpu"])
def test_info_explains_an_absent_vendor(vendor):
    done = spec_hal("info", "--json", "--device", vendor)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["device"]["name"] == vendor and data["device"]["usable_here"] is False
    assert all(row["provider"] for row in data["ops"])


def test_unknown_device_exits_non_zero_with_a_clear_message():
    done = spec_hal("info", SPEC_HAL_DEVICE="nonsense")
    assert done.returncode != 0
    assert "SPEC_HAL_DEVICE='nonsense' is not a known device" in done.stderr
    assert "known: hip, musa, cuda, npu, xpu, cpu" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(shutil.which("spec-hal") is None, reason="console script not installed")
def test_console_script():
    done = subprocess.run(["spec-hal", "info", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["device"]["name"] == "cpu"
