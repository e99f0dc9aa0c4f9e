"""The tox plugin (toxfile.py): an env whose hardware is absent passes, saying it skipped, without
installing anything. Run where tox is installed (not inside a tox env, which has no tox)."""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

import pytest

TOX = shutil.which("tox")
SOURCE_TREE = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(TOX is None, reason="tox is not installed")
@pytest.mark.skipif(bool(glob.glob("/dev/nvidia[0-9]*")), reason="a CUDA device is present")
def test_an_env_whose_hardware_is_absent_passes_saying_it_skipped(tmp_path):
    assert TOX is not None
    done = subprocess.run(
        [TOX, "-e", "cuda", "--workdir", str(tmp_path)],
        cwd=SOURCE_TREE, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped: no cuda device" in done.stdout
    assert not list(tmp_path.rglob("*.whl")) and not (tmp_path / ".pkg" / "bin").exists()  # nothing built
