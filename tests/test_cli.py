"""``spec-hal``: ``info`` through the console script and ``python -m spec_hal``, the bench's options,
and spec_hal.reporting (versions, the commit measured, progress lines)."""

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


# --------------------------------------------------------------------------------------------------
# spec_hal.reporting: versions, the commit measured, progress lines (a leaf the CLI, the bench and
# the conformance runner share)


def test_reporting_is_a_leaf():
    import ast

    import spec_hal.reporting as reporting

    with open(reporting.__file__, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    imported = [
        node.module or "" if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]
    relative = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
    assert not relative and not [name for name in imported if name.split(".")[0] == "spec_hal"]


def test_commit_from_the_environment_wins(monkeypatch, tmp_path):
    from spec_hal.reporting import git_commit

    monkeypatch.setenv("SPEC_HAL_COMMIT", "abc1234")
    assert git_commit() == "abc1234"
    assert git_commit(tmp_path) == "abc1234"  # not a checkout: the variable is all there is


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_commit_read_from_a_git_checkout(monkeypatch, tmp_path):
    from spec_hal.reporting import git_commit

    monkeypatch.delenv("SPEC_HAL_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_commit(tmp_path) is None  # not a checkout
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    assert git_commit(tmp_path) is None  # a checkout without a commit
    (tmp_path / "file").write_text("x")
    subprocess.run([*git, "add", "file"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], cwd=tmp_path, check=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.strip()
    short = git_commit(tmp_path)
    assert short and 7 <= len(short) < len(head) and head.startswith(short)
    monkeypatch.setenv("SPEC_HAL_COMMIT", "given")
    assert git_commit(tmp_path) == "given"


def test_versions_name_spec_hal_and_every_recorded_package():
    import torch

    import spec_hal
    from spec_hal.reporting import VERSIONED_PACKAGES, package_version, versions

    found = versions(spec_hal.__version__)
    assert list(found) == ["spec_hal", *VERSIONED_PACKAGES]
    assert found["spec_hal"] == spec_hal.__version__
    assert found["torch"] and found["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert package_version("spec_hal_surely_not_a_package") is None
    assert versions()["spec_hal"] == package_version("spec-hal")  # not passed: the installed one


def test_check_progress_prints_failures_at_once_and_counts_on_stderr():
    import io

    from spec_hal.conformance.runner import Result
    from spec_hal.reporting import check_progress

    out, err = io.StringIO(), io.StringIO()
    progress = check_progress(out, err, every=2)
    progress(Result("cpu", "fast_topk", "portable", "random", "c0", "pass"))
    assert out.getvalue() == "" and err.getvalue() == ""
    progress(Result("cpu", "fast_topk", "cpu", "golden", "g1", "fail", "x" * 400))
    assert out.getvalue() == f"FAIL fast_topk [cpu] golden g1: {'x' * 300}\n"
    assert err.getvalue() == "\r  2 checks (fast_topk)".ljust(70)


def test_bench_progress_rewrites_one_line():
    import io

    from spec_hal.reporting import bench_progress, end_status_line

    err = io.StringIO()
    progress = bench_progress(err)
    progress("[1/2] op {'bs': 1}")
    progress("y" * 100)
    end_status_line(err)
    assert err.getvalue() == "\r[1/2] op {'bs': 1}".ljust(80) + ("\r" + "y" * 79) + "\n"


# --------------------------------------------------------------------------------------------------
# spec-hal bench: --sweep and --host-profile


def test_bench_options_default_to_the_plain_bench():
    from spec_hal.cli import build_parser

    args = build_parser().parse_args(["bench"])
    assert not args.sweep and args.sweep_kib is None and args.sweep_warps is None
    assert args.host_profile is None and args.sizes == "quick"


def test_sweep_and_host_profile_options_parse():
    from spec_hal.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        ["bench", "--sweep", "--sweep-kib", "4, 64,4", "--sweep-warps", "2", "--ops", "x"]
    )
    assert args.sweep and args.sweep_kib == [4, 64] and args.sweep_warps == [2] and args.ops == "x"
    assert parser.parse_args(["bench", "--host-profile"]).host_profile == 64
    assert parser.parse_args(["bench", "--host-profile", "8"]).host_profile == 8


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--sweep", "--sweep-kib", "0"],
        ["bench", "--sweep", "--sweep-warps", "four"],
        ["bench", "--sweep", "--sweep-kib", ","],
        ["bench", "--host-profile", "-1"],
    ],
)
def test_bad_bench_options_are_usage_errors(argv, capsys):
    from spec_hal.cli import build_parser

    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(argv)
    assert raised.value.code == 2
    assert "error: argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "--device", "cpu"], "--sweep times graph replays of Triton providers on an accelerator"),
        (
            ["--sweep", "--ops", "fast_topk"],
            "--sweep cannot time fast_topk: it sweeps the copy-bound Triton ops",
        ),
        (["--sweep-kib", "4"], "--sweep-kib and --sweep-warps choose the candidates of --sweep"),
        (["--sweep", "--plot", "x.png"], "--plot and --host-profile do not apply"),
    ],
)
def test_sweep_refuses_clearly(args, message):
    done = spec_hal("bench", *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_bench_host_profile_prints_and_records_the_profile(tmp_path):
    path = tmp_path / "bench.json"
    done = spec_hal(
        "bench",
        "--device",
        "cpu",
        "--ops",
        "assign_extend_cache_locs",
        "--host-profile",
        "8",
        "--json",
        str(path),
    )
    assert done.returncode == 0, done.stderr
    assert "=== assign_extend_cache_locs bs=8:" in done.stdout and "tottime" in done.stdout
    data = json.loads(path.read_text())
    (profile,) = data["host_profile"]
    assert profile["op"] == "assign_extend_cache_locs" and profile["bs"] == 8 and profile["top"]
    assert {r["op"] for r in data["rows"]} == {"assign_extend_cache_locs"}
