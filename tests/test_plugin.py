"""The out-of-tree vendor package under tests/oot_vendor: pip-installed, discovered, used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent / "oot_vendor"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """Build and install the plugin package (offline, no deps) into its own site directory. It is
    built from a copy: setuptools leaves build/ and *.egg-info where it builds."""
    target = tmp_path_factory.mktemp("oot_site")
    build = tmp_path_factory.mktemp("oot_build")
    source = shutil.copytree(
        PACKAGE, build / "oot_vendor", ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
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
            str(source),
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


@pytest.mark.parametrize("setting", ["0", "off"])
def test_info_says_plugins_are_disabled_and_lists_them_unimported(plugin_site, setting):
    code = "import sys, spec_hal.cli as c; c.main(['info']); print('oot_vendor' in sys.modules)"
    done = run_python(plugin_site, code, SPEC_HAL_PLUGINS=setting)
    assert done.returncode == 0, done.stderr
    plugins = done.stdout.split("\nplugins:\n")[1].split("\n\n")[0].splitlines()
    assert (
        plugins[0] == f"  disabled by SPEC_HAL_PLUGINS={setting} (none is imported)"
    )  # as the user spelt it
    assert len(plugins) == 4 and all(
        f"skipped - SPEC_HAL_PLUGINS={setting} disables plugins" in p for p in plugins[1:]
    )
    assert done.stdout.split()[-1] == "False"


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


# --------------------------------------------------------------------------------------------------
# Plugins that misbehave while importing, and plugin device names in any case. These are made on
# the spot: a module and a .dist-info with entry_points.txt on PYTHONPATH (no pip install).

RTDEV_PLUGIN = """
import spec_hal
from spec_hal import Capabilities, Check, DeviceDescriptor, ProbeResult

SPEC_HAL_API_VERSION = 1


def probe(facts):
    ok = Check(True, "always here")
    return ProbeResult("RTDev", ok, ok, ok)


def register():
    spec_hal.register_device(
        DeviceDescriptor(
            name="RTDev", device_type="cpu", priority=-5, probe=probe, dist_backend="gloo",
            capabilities=Capabilities(), priority_reason="a test vendor whose name has capitals",
        )
    )
"""


def made_plugins(site: Path, **entry_points: str) -> Path:
    """``entry_points``: entry-point name -> module source (the entry point is ``module:register``)."""
    site.mkdir(parents=True, exist_ok=True)
    lines = ["[spec_hal.devices]"]
    for name, source in entry_points.items():
        module = f"made_plugin_{name.lower()}"
        (site / f"{module}.py").write_text(source)
        lines.append(f"{name} = {module}:register")
    info = site / "made_spec_hal_plugins-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: made-spec-hal-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return site


CALL_TWICE = """
import logging, torch, spec_hal
logging.basicConfig(level=logging.WARNING, format="LOG %(name)s %(message)s")
for attempt in range(2):
    try:
        spec_hal.ops.fast_topk(torch.tensor([[3.0, 9.0, 1.0]]), 1)
        print("call ran")
    except Exception as error:
        print("call raised", type(error).__name__)
"""


@pytest.mark.parametrize("escape", ["import sys; sys.exit(3)", "raise KeyboardInterrupt"])
def test_a_plugin_that_exits_while_importing_is_reported_not_propagated(tmp_path, escape):
    site = made_plugins(tmp_path / "site", leaving=escape)
    done = run_python(site, CALL_TWICE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["call ran", "call ran"]
    assert "LOG spec_hal" in done.stderr and "plugin leaving (made_plugin_leaving:register)" in done.stderr
    reported = run_python(
        site,
        "import spec_hal, spec_hal.plugins as p; spec_hal.devices(); print([(r.name, r.status) for r in p.reports()])",
    )
    assert reported.stdout.strip() == "[('leaving', 'failed')]", reported.stderr


@pytest.mark.parametrize("escape", ["import sys; sys.exit(3)", "raise ImportError('broken')"])
def test_under_strict_every_op_call_fails_after_a_plugin_failed(tmp_path, escape):
    site = made_plugins(tmp_path / "site", leaving=escape)
    done = run_python(site, CALL_TWICE, SPEC_HAL_STRICT="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["call raised PluginError", "call raised PluginError"]


def test_a_plugin_device_named_in_capitals_is_selected_by_spec_hal_device(tmp_path):
    site = made_plugins(tmp_path / "site", RTDev=RTDEV_PLUGIN)
    code = "import spec_hal; print(spec_hal.current_device().name)"
    for selected in ("RTDev", "rtdev", "RTDEV"):
        done = run_python(site, code, SPEC_HAL_DEVICE=selected)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "RTDev"
