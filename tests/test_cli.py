"""``spec-hal``: ``info`` through the console script and ``python -m spec_hal``, exit codes and
one-line errors, the bench's options, and spec_hal.reporting (versions, the commit measured,
progress lines)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from builtin_vendors import ACCELERATORS, DETECTION_ORDER


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
    assert set(data) == {
        "schema_version",
        "device",
        "probes",
        "ops",
        "plugins",
        "versions",
        "triton_launches",
    }
    assert data["schema_version"] == 1
    assert data["device"]["name"] == "cpu"
    assert [p["vendor"] for p in data["probes"]] == list(DETECTION_ORDER)
    assert all({"installed", "present", "visible"} <= set(p) for p in data["probes"])
    assert data["ops"], "no op bound"
    assert all(row["provider"] and row["fallback"] is None for row in data["ops"])
    assert data["versions"]["torch"]


def test_info_text_explains_the_choice():
    done = spec_hal("info")
    assert done.returncode == 0, done.stderr
    assert "device: cpu" in done.stdout and "why:" in done.stdout and "fast_topk" in done.stdout


@pytest.mark.parametrize("vendor", ACCELERATORS)
def test_info_explains_an_absent_vendor(vendor):
    done = spec_hal("info", "--json", "--device", vendor)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["device"]["name"] == vendor and data["device"]["usable_here"] is False
    assert all(row["provider"] for row in data["ops"])


def test_unknown_device_exits_non_zero_with_a_clear_message():
    done = spec_hal("check", SPEC_HAL_DEVICE="nonsense")
    assert done.returncode != 0
    assert "SPEC_HAL_DEVICE='nonsense' is not a known device" in done.stderr
    assert f"known: {', '.join(DETECTION_ORDER)}" in done.stderr and "Traceback" not in done.stderr


def python_with(blocked: str, *args: str) -> subprocess.CompletedProcess:
    """``spec-hal ARGS`` in a Python where the package ``blocked`` cannot be imported."""
    code = f"import sys; sys.modules[{blocked!r}] = None; from spec_hal.cli import main; sys.exit(main(sys.argv[1:]))"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_HAL_")}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=environment, timeout=300
    )


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """The error of a command that refused to run: exit status 2, nothing on stdout, one line."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "", done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spec-hal: error: "), done.stderr
    return lines[0]


def _usable(vendor: str) -> bool:
    from spec_hal import registry

    return any(p.vendor == vendor and p.usable for p in registry.detect().probes)


@pytest.mark.skipif(_usable("cuda"), reason="a CUDA device is present")
@pytest.mark.parametrize(
    "args",
    [
        ["check", "--device", "cuda"],
        ["bench", "--device", "cuda"],
        ["bench", "--sweep", "--device", "cuda"],
        ["demo", "--device", "cuda"],
        ["demo", "--device", "cuda:0"],
    ],
)
def test_commands_that_run_ops_refuse_an_absent_device(args):
    done = spec_hal(*args, SPEC_HAL_STRICT="1")
    assert "no cuda device here: " in one_line_error(done)


def test_info_explains_an_absent_device_and_demo_names_a_bad_one():
    assert spec_hal("info", "--device", "musa").returncode == 0
    line = one_line_error(spec_hal("demo", "--device", "nonsense"))
    assert "'nonsense' is neither a spec_hal device" in line


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("fast_topk=nonsense", "op 'fast_topk' has no provider 'nonsense' on device 'cpu'; available: "),
        ("nonsense_op=portable", "SPEC_HAL_OPS names unknown op(s): nonsense_op"),
        ("fast_topk", "SPEC_HAL_OPS: entry 'fast_topk' is not of the form op=provider"),
    ],
)
def test_a_bad_op_override_is_one_error(override, message):
    assert message in one_line_error(spec_hal("info", SPEC_HAL_OPS=override))


def test_a_bad_op_override_stops_check_before_it_runs():
    line = one_line_error(spec_hal("check", SPEC_HAL_OPS="fast_topk=nonsense"))
    assert "op 'fast_topk' has no provider 'nonsense'" in line


def test_a_good_op_override_binds():
    done = spec_hal("info", "--json", SPEC_HAL_OPS="assign_extend_cache_locs=portable")
    assert done.returncode == 0, done.stderr
    row = next(r for r in json.loads(done.stdout)["ops"] if r["op"] == "assign_extend_cache_locs")
    assert row["provider"] == "portable" and "SPEC_HAL_OPS" in row["reason"]


def test_check_refuses_when_the_devices_own_providers_are_missing():
    line = one_line_error(python_with("triton", "check", "--device", "hip", "--emulate", "--small"))
    assert "check --device hip would not test hip's own providers: " in line
    assert "Triton is not installed" in line and 'pip install "spec-hal[triton]"' in line


def test_bench_plot_needs_matplotlib_before_it_benchmarks():
    line = one_line_error(python_with("matplotlib", "bench", "--device", "cpu", "--plot", "x.png"))
    assert line == 'spec-hal: error: --plot needs matplotlib: pip install "spec-hal[bench]"'


def test_help_reads_as_text():
    top = spec_hal("--help")
    assert top.returncode == 0 and "`" not in top.stdout and "spec_hal: vendor-neutral" in top.stdout
    bench = spec_hal("bench", "--help")
    assert "--sizes {quick,full}  quick: batch sizes 1, 64, 256" in bench.stdout


def test_info_says_why_other_providers_were_not_chosen_once():
    text = spec_hal("info").stdout
    assert "skipped" not in text and "not chosen: portable (intended provider is 'cpu')" in text
    fallback = python_with("triton", "info", "--device", "hip").stdout
    rows = [line for line in fallback.splitlines() if "FALLBACK: " in line]
    said = [line for line in fallback.splitlines() if "'triton' is not registered for 'hip'" in line]
    assert rows and said == rows  # the reason once, on the FALLBACK line
    assert "not chosen: triton" not in fallback


def test_the_current_device_has_a_short_repr():
    import spec_hal

    assert repr(spec_hal.current_device()) == "DeviceDescriptor(name='cpu', device_type='cpu')"


def test_check_summary_counts_pass_fail_skip_in_that_order_and_groups_skip_reasons(capsys):
    from spec_hal.cli import print_check, summary_line

    assert summary_line({"skip": 2, "pass": 5}) == "5 pass, 2 skip"
    assert summary_line({"fail": 1, "pass": 0, "skip": 3}) == "0 pass, 1 fail, 3 skip"

    def row(op, status, reason=""):
        return {"op": op, "provider": "portable", "status": status, "reason": reason}

    generator = "takes a torch.Generator, which dynamo cannot trace"
    results = [row("fast_topk", "pass"), row("fast_sample", "skip", generator)]
    results += [row("sample_draft_proposal", "skip", generator), row("move_kv_cache", "skip", "no graphs")]
    print_check({"device": "cpu", "seconds": 1.0, "summary": {"pass": 1, "skip": 3}, "results": results})
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "conformance on cpu (1.0 s): 1 pass, 3 skip"
    named = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "seconds": 2.0, "summary": {"pass": 1}}
    print_check({**named, "results": results[:1]})
    assert (
        capsys.readouterr().out.splitlines()[0]
        == "conformance on cuda (NVIDIA H100 80GB HBM3, 2.0 s): 1 pass"
    )
    assert (
        "skip reasons:\n"
        f"     2 skipped: {generator} (fast_sample, sample_draft_proposal)\n"
        "     1 skipped: no graphs (move_kv_cache)\n"
    ) in out


def test_log_records_start_on_a_line_of_their_own_on_a_terminal():
    import logging

    from spec_hal.cli import LineLogHandler

    stream = Terminal()
    handler = LineLogHandler(stream)
    stream.write("\r  12 checks (fast_topk)")
    handler.emit(logging.LogRecord("spec_hal", logging.WARNING, __file__, 1, "careful", None, None))
    assert stream.getvalue().endswith("\r" + " " * 80 + "\rcareful\n")


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


class Terminal(io.StringIO):
    """A stream that says it is a terminal (progress lines are rewritten in place there)."""

    def isatty(self):
        return True


def test_check_progress_prints_failures_at_once_and_counts_on_stderr():
    from spec_hal.conformance.runner import Result
    from spec_hal.reporting import check_progress

    out, log = io.StringIO(), io.StringIO()
    progress = check_progress(out, log, every=2)
    progress(Result("cpu", "fast_topk", "portable", "random", "c0", "pass"))
    assert out.getvalue() == "" and log.getvalue() == ""
    progress(Result("cpu", "fast_topk", "cpu", "golden", "g1", "fail", "x" * 400))
    assert out.getvalue() == f"FAIL fast_topk [cpu] golden g1: {'x' * 300}\n"
    assert log.getvalue() == "  2 checks (fast_topk)\n"  # not a terminal: a plain line
    terminal = Terminal()
    check_progress(io.StringIO(), terminal, every=2)(Result("cpu", "fast_topk", "cpu", "random", "c", "pass"))
    assert terminal.getvalue() == "\r  1 checks (fast_topk)".ljust(70)


def test_check_progress_shows_the_total_where_the_run_gives_it():
    from spec_hal.conformance.runner import Result
    from spec_hal.reporting import check_progress

    log = io.StringIO()
    progress = check_progress(io.StringIO(), log, every=1)
    progress(Result("cpu", "fast_topk", "portable", "random", "c0", "pass"), 7)
    assert log.getvalue() == "  [1/7] checks (fast_topk)\n"


def test_bench_progress_rewrites_one_line_on_a_terminal_and_writes_lines_elsewhere():
    from spec_hal.reporting import bench_progress, end_status_line

    terminal = Terminal()
    progress = bench_progress(terminal)
    progress("[1/2] op {'bs': 1}")
    progress("y" * 100)
    end_status_line(terminal)
    assert terminal.getvalue() == "\r[1/2] op {'bs': 1}".ljust(80) + ("\r" + "y" * 79) + "\n"
    log = io.StringIO()
    progress = bench_progress(log)
    progress("[1/2] op {'bs': 1}")
    progress("[2/2] op {'bs': 64}")
    end_status_line(log)
    assert log.getvalue() == "[1/2] op {'bs': 1}\n[2/2] op {'bs': 64}\n"


def test_a_check_written_to_a_log_has_no_carriage_returns():
    done = spec_hal("check", "--device", "cpu", "--ops", "fill_bonus_tokens,move_kv_cache", "--no-compile")
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stdout + done.stderr and "  [50/" in done.stderr  # a line per 50


# --------------------------------------------------------------------------------------------------
# spec-hal bench: --sweep and --host-profile


def test_bench_options_default_to_the_plain_bench():
    from spec_hal.cli import build_parser

    args = build_parser().parse_args(["bench"])
    assert not args.sweep and args.sweep_kib is None and args.sweep_warps is None
    assert args.sweep_row_programs is None
    assert args.host_profile is None and args.sizes == "quick"


def test_sweep_and_host_profile_options_parse():
    from spec_hal.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        ["bench", "--sweep", "--sweep-kib", "4, 64,4", "--sweep-warps", "2", "--ops", "x"]
    )
    assert args.sweep and args.sweep_kib == [4, 64] and args.sweep_warps == [2] and args.ops == "x"
    assert parser.parse_args(["bench", "--sweep", "--sweep-row-programs", "64,1024"]).sweep_row_programs == [
        64,
        1024,
    ]
    assert parser.parse_args(["bench", "--host-profile"]).host_profile == 64
    assert parser.parse_args(["bench", "--host-profile", "8"]).host_profile == 8


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--sweep", "--sweep-kib", "0"],
        ["bench", "--sweep", "--sweep-warps", "four"],
        ["bench", "--sweep", "--sweep-kib", ","],
        ["bench", "--sweep", "--sweep-row-programs", "-8"],
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
        (["--sweep-kib", "4"], "--sweep-kib, --sweep-warps and --sweep-row-programs choose the candidates"),
        (["--sweep-row-programs", "64"], "--sweep-row-programs choose the candidates of --sweep"),
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
    assert f"results written to {path}" in done.stdout
    data = json.loads(path.read_text())
    (profile,) = data["host_profile"]
    assert profile["op"] == "assign_extend_cache_locs" and profile["bs"] == 8 and profile["top"]
    assert {r["op"] for r in data["rows"]} == {"assign_extend_cache_locs"}


def test_info_says_what_is_proven_per_vendor_and_never_more():
    from spec_hal.cli import info_data

    hip = info_data("hip")["device"]["proven"]
    assert "compiled ahead of time for gfx90a, gfx942, gfx950" in hip and "hardware" not in hip
    assert info_data("npu")["device"]["proven"] == "emulated: portable providers on CPU tensors"
    assert info_data("cuda")["device"]["proven"].startswith("hardware: H200")


def test_info_shows_a_vendor_whose_bindings_failed(capsys):
    from fake_devices import device

    from spec_hal import cli, registry
    from spec_hal.registry import DeviceDescriptor, Intent
    from spec_hal.testing import isolated_registry

    broken = device("broken", default=Intent("kernel", "vendor kernel"))
    with isolated_registry():
        registry.register_device(
            DeviceDescriptor(**{**vars(broken), "bindings": "spec_hal_missing_vendor:register"})
        )
        data = cli.info_data("broken")
        cli._print_info(data)
    failure = "bindings spec_hal_missing_vendor:register raised ModuleNotFoundError"
    assert data["device"]["bindings_failed"].startswith(failure)
    assert all(failure in row["fallback"] for row in data["ops"])
    assert f"BINDINGS FAILED: {failure}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--report", "{missing}/r.json"],
        ["bench", "--json", "{missing}/r.json"],
        ["bench", "--plot", "{missing}/p.png"],
        ["bench", "--sweep", "--json", "{missing}/r.json"],
        ["compile", "--json", "{missing}/c.json"],
        ["bench", "--json", "{folder}"],
    ],
)
def test_an_unwritable_output_path_is_refused_before_the_run(args, tmp_path):
    argv = [a.format(missing=tmp_path / "missing" / "dir", folder=tmp_path) for a in args]
    line = one_line_error(spec_hal(*argv))
    assert f"{args[-2]} {argv[-1]}: " in line
    assert ("does not exist" if "missing" in args[-1] else "is a directory") in line
    assert list(tmp_path.iterdir()) == []  # nothing created


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compile-backend", "bogus"], "--compile-backend: unknown torch.compile backend 'bogus'; known: "),
        (["--inductor-ops", "nope"], "--inductor-ops: unknown op(s): nope"),
    ],
)
def test_check_refuses_bad_compile_options_before_it_runs(args, message):
    assert message in one_line_error(spec_hal("check", "--ops", "fast_topk", *args))


@pytest.mark.parametrize(
    "setting", [{"SPEC_HAL_STRICT": "2"}, {"SPEC_HAL_DEBUG": "maybe"}, {"SPEC_HAL_PLUGINS": "nah"}]
)
def test_a_boolean_variable_with_another_value_is_refused_in_one_line(setting):
    ((name, value),) = setting.items()
    line = one_line_error(spec_hal("info", **setting))
    assert f"{name}={value!r}: expected a boolean" in line


def test_boolean_variables_read_by_the_library_refuse_other_values(monkeypatch):
    from spec_hal import config
    from spec_hal.errors import ConfigError

    monkeypatch.setenv("SPEC_HAL_STRICT", "2")
    with pytest.raises(ConfigError, match="SPEC_HAL_STRICT='2': expected a boolean"):
        config.strict()
    for value, expected in (("ON", True), ("no", False), ("", False)):
        monkeypatch.setenv("SPEC_HAL_STRICT", value)
        assert config.strict() is expected


def test_device_names_are_read_in_any_case_by_flag_and_variable():
    by_flag = spec_hal("info", "--json", "--device", "CPU")
    by_variable = spec_hal("info", "--json", SPEC_HAL_DEVICE="CPU")
    assert by_flag.returncode == by_variable.returncode == 0, by_flag.stderr + by_variable.stderr
    assert (
        json.loads(by_flag.stdout)["device"]["name"]
        == json.loads(by_variable.stdout)["device"]["name"]
        == "cpu"
    )


def test_check_emulate_runs_the_triton_family_in_the_interpreter_without_the_variable():
    pytest.importorskip("triton")
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-m", "spec_hal", "check", "--device", "hip", "--emulate", "--small", "--no-compile",
         "--ops", "draft_topk1_postprocess"],
        capture_output=True, text=True, env=environment, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "draft_topk1_postprocess  triton " in done.stdout and "FAIL" not in done.stdout


def test_check_emulate_refuses_with_the_fix_where_triton_was_imported_without_the_interpreter(monkeypatch):
    from spec_hal import cli, registry
    from spec_hal.errors import SpecHalError

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setitem(sys.modules, "triton", object())
    with pytest.raises(SpecHalError, match="set TRITON_INTERPRET=1 before starting"):
        cli._interpret_triton_kernels(registry.device("hip"))
    assert "TRITON_INTERPRET" not in os.environ
    cli._interpret_triton_kernels(registry.device("cpu"))  # no Triton family: nothing to set
    assert "TRITON_INTERPRET" not in os.environ


@pytest.mark.skipif(_usable("cuda"), reason="a CUDA device is present")
@pytest.mark.parametrize(
    ("setting", "args", "explained"),
    [
        ("cuda", ["--device", "cuda"], "cuda"),
        ("cuda", [], "cpu"),
        ("nonsense", [], "cpu"),
    ],
)
def test_info_explains_a_bad_device_setting_instead_of_refusing(setting, args, explained):
    done = spec_hal("info", *args, SPEC_HAL_DEVICE=setting)
    assert done.returncode == 0, done.stderr
    assert f"device: {explained} " in done.stdout
    assert f"BAD SETTING: SPEC_HAL_DEVICE='{setting}'" in done.stdout and "known: hip, musa" in done.stdout
    data = json.loads(spec_hal("info", "--json", *args, SPEC_HAL_DEVICE=setting).stdout)
    assert (
        data["device"]["name"] == explained
        and f"SPEC_HAL_DEVICE='{setting}'" in data["device"]["bad_setting"]
    )


def test_compile_without_triton_says_how_to_install_it():
    line = one_line_error(python_with("triton", "compile", "--vendor", "hip"))
    assert 'spec-hal compile needs Triton: pip install "spec-hal[triton]"' in line


def test_info_shows_how_triton_kernels_launch(monkeypatch, capsys):
    pytest.importorskip("triton")
    from spec_hal import cli
    from spec_hal.kernels.triton import launch

    monkeypatch.setattr(launch, "_INTERPRETED", False)
    off_the_gate = launch.gate("3.99.0")
    monkeypatch.setattr(launch, "_planned", off_the_gate[0])
    monkeypatch.setattr(launch, "_reason", off_the_gate[1])
    data = cli.info_data()
    assert data["triton_launches"] == {"planned": False, "reason": off_the_gate[1]}
    cli._print_info(data)
    assert f"triton launches: {off_the_gate[1]}" in capsys.readouterr().out.splitlines()


def test_info_without_triton_has_no_triton_launches():
    done = python_with("triton", "info", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["triton_launches"] is None


def test_info_header_shows_an_absent_triton_as_its_table_does(monkeypatch, capsys):
    from spec_hal import cli

    data = cli.info_data()
    monkeypatch.setitem(data["versions"], "triton", None)
    cli._print_info(data)
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("  triton -")
    assert any(line.split() == ["triton", "-"] for line in out.splitlines())
