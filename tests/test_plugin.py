"""The out-of-tree vendor package under tests/oot_vendor: pip-installed, discovered, used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent / "oot_vendor"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """Build and install the plugin package (offline, no deps) into its own site directory."""
    target = tmp_path_factory.mktemp("oot_site")
    build = tmp_path_factory.mktemp("oot_build")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(PACKAGE),
        ],
        check=True,
        cwd=build,
    )
    return target


def run_python(site: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("SPEC_HAL_", "OOT_VENDOR_"))}
    environment["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120
    )


INFO = "import json, spec_hal.cli as c; print(json.dumps(c.info_data(), default=str))"
USE_TOPK = """
import torch, spec_hal, oot_vendor
top = spec_hal.ops.fast_topk(torch.tensor([[3.0, 9.0, 1.0, 7.0]]), 2)
print(spec_hal.current_device().name, top[1].tolist(), oot_vendor.calls)
"""


def test_plugin_is_discovered_and_its_device_and_op_are_used(plugin_site):
    done = run_python(plugin_site, USE_TOPK, OOT_VENDOR_PRESENT="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["oot", "[[1,", "3]]", "1"]


def test_plugin_device_absent_means_builtin_cpu(plugin_site):
    done = run_python(plugin_site, USE_TOPK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "cpu" and done.stdout.split()[-1] == "0"


def test_info_reports_loaded_and_broken_plugins_without_breaking_import(plugin_site):
    done = run_python(plugin_site, INFO, OOT_VENDOR_PRESENT="1")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    status = {p["name"]: (p["status"], p["detail"]) for p in data["plugins"]}
    assert status["oot"][0] == "loaded"
    assert status["oot_missing"][0] == "failed" and "ModuleNotFoundError" in status["oot_missing"][1]
    assert status["oot_old_api"][0] == "failed" and "API version 0" in status["oot_old_api"][1]
    assert data["device"]["name"] == "oot"
    topk = next(row for row in data["ops"] if row["op"] == "fast_topk")
    assert topk["provider"] == "oot_kernel" and topk["fallback"] is None


def test_strict_mode_turns_a_broken_plugin_into_an_error(plugin_site):
    done = run_python(plugin_site, "import spec_hal; spec_hal.current_device()", SPEC_HAL_STRICT="1")
    assert done.returncode != 0
    assert "PluginError" in done.stderr and "oot_" in done.stderr
    imported = run_python(plugin_site, "import spec_hal", SPEC_HAL_STRICT="1")
    assert imported.returncode == 0, imported.stderr  # import itself never loads plugins


def test_device_override_filters_plugins_before_import(plugin_site):
    code = (
        "import sys, spec_hal, spec_hal.plugins as p; spec_hal.current_device(); "
        "print([r.status for r in p.reports()], 'oot_vendor' in sys.modules)"
    )
    done = run_python(plugin_site, code, SPEC_HAL_DEVICE="cpu")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['skipped', 'skipped', 'skipped'] False"


CHECK = "import sys, spec_hal.cli as c; sys.exit(c.main(['check', '--device', 'oot', '--ops', 'fast_topk', '--no-compile']))"


def test_conformance_suite_runs_the_plugin_op_and_catches_its_wrong_variant(plugin_site):
    good = run_python(plugin_site, CHECK, OOT_VENDOR_PRESENT="1")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "oot_kernel" in good.stdout and "FAIL" not in good.stdout
    wrong = run_python(plugin_site, CHECK, OOT_VENDOR_PRESENT="1", OOT_VENDOR_WRONG="1")
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "FAIL fast_topk [oot_kernel]" in wrong.stdout
    assert "FAIL fast_topk [portable]" not in wrong.stdout


def test_pytest_form_of_the_suite_runs_the_plugin_op(plugin_site, tmp_path):
    report = tmp_path / "oot.json"
    code = (
        "import sys, pytest; sys.exit(pytest.main(['--pyargs', 'spec_hal.conformance', '--spec-hal-device=oot', "
        f"'-q', '-p', 'no:cacheprovider', '-k', 'fast_topk and oot_kernel and not compile', '--spec-hal-report={report}']))"
    )
    done = run_python(plugin_site, code, OOT_VENDOR_PRESENT="1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["device"] == "oot" and data["summary"].get("pass", 0) > 0 and not data["summary"].get("fail")
