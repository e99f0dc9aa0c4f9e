"""What the long runs (``spec-hal check``, ``spec-hal bench``, the conformance plugin) record and
print: the versions and the commit measured, and a progress line on stderr.

A leaf: it imports nothing of spec_hal, so the CLI, the bench and the conformance runner can all
read it without importing one another.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol, TextIO

#: Packages whose versions a report records (besides spec_hal itself), absent ones as None.
VERSIONED_PACKAGES = (
    "torch",
    "triton",
    "numpy",
    "torch_npu",
    "torch_musa",
    "torchada",
    "intel_extension_for_pytorch",
    "xgrammar",
    "huggingface_hub",
)


def package_version(name: str) -> str | None:
    """The installed version of a distribution, tried with dashes then as written; None if absent."""
    for candidate in dict.fromkeys((name.replace("_", "-"), name)):
        try:
            return version(candidate)
        except PackageNotFoundError:
            continue
    return None


def versions(spec_hal_version: str | None = None) -> dict[str, str | None]:
    """``{"spec_hal": ..., "torch": ..., ...}`` for :data:`VERSIONED_PACKAGES`.

    ``spec_hal_version`` is the running package's ``__version__`` (callers pass it: this module does
    not import spec_hal); without it, the installed distribution's version, or None.
    """
    found: dict[str, str | None] = {
        "spec_hal": spec_hal_version if spec_hal_version is not None else package_version("spec-hal")
    }
    for name in VERSIONED_PACKAGES:
        found[name] = package_version(name)
    return found


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    """The commit measured: ``SPEC_HAL_COMMIT`` when set (tools/h200_run.sh sets it: the copy it runs
    in has no .git), else ``git rev-parse --short HEAD`` in ``cwd`` (default: the working directory);
    None outside a git checkout or without git."""
    if os.environ.get("SPEC_HAL_COMMIT"):
        return os.environ["SPEC_HAL_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=cwd,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def status_line(message: str, *, width: int = 80, stream: TextIO | None = None) -> None:
    """Show a progress message on ``stream`` (default stderr): on a terminal it rewrites the
    progress line in place, cut to ``width``; elsewhere (a log, a pipe) it is a line of its own."""
    out = stream or sys.stderr
    if out.isatty():
        print(f"\r{message}".ljust(width)[:width], end="", file=out, flush=True)
    else:
        print(message, file=out, flush=True)


def end_status_line(stream: TextIO | None = None) -> None:
    """End the progress line on a terminal, so that what follows starts on a line of its own."""
    out = stream or sys.stderr
    if out.isatty():
        print("", file=out)


class CheckResult(Protocol):
    """What :func:`check_progress` reads of a conformance result."""

    @property
    def op(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def case_class(self) -> str: ...
    @property
    def case(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str: ...


def check_progress(
    out: TextIO | None = None, err: TextIO | None = None, every: int = 50
) -> Callable[[CheckResult, int | None], None]:
    """A progress callback for a conformance run: each failure printed on ``out`` (stdout) at once, so
    that a run cut short by a time limit still shows it; a count of checks (``[done/total]`` where the
    run says its total) on ``err`` (stderr), rewritten after every check on a terminal, else a line
    every ``every`` checks."""
    done = 0

    def progress(result: CheckResult, total: int | None = None) -> None:
        nonlocal done
        done += 1
        if result.status == "fail":
            print(
                f"FAIL {result.op} [{result.provider}] {result.case_class} {result.case}: {result.reason[:300]}",
                file=out or sys.stdout,
                flush=True,
            )
        stream = err or sys.stderr
        if stream.isatty() or done % every == 0:
            count = f"[{done}/{total}]" if total is not None else str(done)
            status_line(f"  {count} checks ({result.op})", width=70, stream=stream)

    return progress


def bench_progress(stream: TextIO | None = None) -> Callable[[str], None]:
    """A progress callback for the bench: each message replaces the last on one status line (one
    line per message when ``stream`` is not a terminal)."""

    def progress(message: str) -> None:
        status_line(message, stream=stream)

    return progress


__all__ = [
    "VERSIONED_PACKAGES",
    "CheckResult",
    "bench_progress",
    "check_progress",
    "end_status_line",
    "git_commit",
    "package_version",
    "status_line",
    "versions",
]


def unwritable_reason(path: str | None) -> str | None:
    """Why a file could not be written at ``path`` (None: it could, or no path was given), found
    without creating or truncating anything."""
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "is a directory, expected a file name"
    if not os.path.isdir(folder):
        return f"the directory {folder} does not exist"
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        return "not writable here"
    return None
