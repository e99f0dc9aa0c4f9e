"""House rules a test can check: vendor calls stay in spec_hal/devices/, vendor packages never
import each other, and the tested spec_hal is the installed one when tox says so."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import spec_hal

PACKAGE = Path(spec_hal.__file__).parent
VENDOR_CALL = re.compile(r"torch\.(cuda|npu|xpu|musa)\b|\.is_cuda\b|is_hip\(|is_npu\(|is_musa\(|is_xpu\(")
VENDORS = ("cuda", "hip", "musa", "npu", "xpu", "cpu")


def python_files(root: Path):
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_vendor_calls_outside_devices():
    offenders = []
    for path in python_files(PACKAGE):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "devices":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if VENDOR_CALL.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == [], "vendor calls outside spec_hal/devices/:\n" + "\n".join(offenders)


def test_the_lint_catches_a_planted_vendor_call():
    assert VENDOR_CALL.search("x = torch.cuda.current_stream()")
    assert VENDOR_CALL.search("if t.is_cuda:")
    assert not VENDOR_CALL.search("device_type = 'cuda'")


def test_vendor_packages_never_import_each_other():
    offenders = []
    for vendor in VENDORS:
        others = [v for v in VENDORS if v != vendor]
        pattern = re.compile(
            r"(from\s+\.\.({})\b|devices\.({})\b)".format("|".join(others), "|".join(others))
        )
        for path in python_files(PACKAGE / "devices" / vendor):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert offenders == []


@pytest.mark.skipif(
    os.environ.get("SPEC_HAL_EXPECT_INSTALLED") != "1", reason="only under tox (installed wheel)"
)
def test_installed_wheel_is_what_is_tested():
    source = Path(os.environ["SPEC_HAL_SOURCE_TREE"]).resolve()
    assert PACKAGE.resolve() != source / "spec_hal", (
        f"tests import the source tree ({PACKAGE}), not the wheel"
    )
    assert "site-packages" in PACKAGE.parts
