"""What installing spec_hal brings and leaves behind: the dependencies and extras a user gets from
the README's command, and a build that writes nothing into the source tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["project"]


def _names(requirements: list[str]) -> list[str]:
    return [r.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip() for r in requirements]


def test_numpy_comes_with_spec_hal_and_the_hub_client_does_not():
    # torch warns "Failed to initialize NumPy" on every import without numpy
    core = _names(project()["dependencies"])
    assert "numpy" in core and "huggingface_hub" not in core


def test_extras():
    extras = project()["optional-dependencies"]
    assert _names(extras["hub"]) == ["huggingface_hub"] and "huggingface_hub" in _names(extras["test"])
    assert extras["triton"] == ["triton>=3.6; platform_system == 'Linux'"]
    assert extras["xpu"] == []  # torch's own torch.xpu: no intel-extension-for-pytorch
    assert _names(extras["bench"]) == ["matplotlib"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git lists the project's files")
def test_building_a_wheel_leaves_the_source_tree_as_it_was(tmp_path):
    """The build backend pyproject.toml names (the hooks pip and tox call), on a copy of the
    project's files."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    tree = tmp_path / "tree"
    for name in listed.stdout.splitlines():
        source = ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    (tmp_path / "meta").mkdir()  # a frontend hands the hooks existing directories
    with open(ROOT / "pyproject.toml", "rb") as handle:
        system = tomllib.load(handle)["build-system"]
    code = (
        f"import importlib, sys; sys.path[:0] = {system.get('backend-path', [])!r}; "
        f"backend = importlib.import_module({system['build-backend']!r}); "
        f"backend.prepare_metadata_for_build_wheel({str(tmp_path / 'meta')!r}); "
        f"print(backend.build_wheel({str(tmp_path / 'dist')!r}))"
    )
    # -B: the interpreter's own bytecode of the in-tree backend is not the build's doing.
    built = subprocess.run(
        [sys.executable, "-B", "-c", code], cwd=tree, capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "dist" / built.stdout.strip().splitlines()[-1]).exists()
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before
