"""pytest plugin registered through the ``pytest11`` entry point: adds ``--spec-hal-device``."""

from __future__ import annotations

from typing import Any


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("spec_hal")
    group.addoption(
        "--spec-hal-device",
        action="store",
        default=None,
        help="conformance: run against this spec_hal device (default: every usable device)",
    )
