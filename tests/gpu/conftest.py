"""Tests that need NVIDIA GPUs: each skips, with the reason, where the GPUs it needs are absent.

A test needs one GPU; ``@pytest.mark.gpus(n)`` asks for ``n``. GPUs are counted through NVML (what
``torch.cuda.device_count`` reads first), so counting creates no CUDA context in this process.
"""

from __future__ import annotations

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpus(n): the test needs n NVIDIA GPUs (default 1)")


def nvidia_gpus() -> tuple[int, str]:
    """(number of NVIDIA GPUs this process sees, why none when there are none)."""
    if torch.version.cuda is None:
        build = f"ROCm {torch.version.hip}" if torch.version.hip else "CPU-only"
        return 0, f"torch {torch.__version__} is a {build} build"
    count = torch.cuda.device_count()
    return count, "" if count else "no CUDA-capable GPU visible"


@pytest.fixture(autouse=True)
def _needs_gpus(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("gpus")
    needed = marker.args[0] if marker and marker.args else 1
    count, why = nvidia_gpus()
    if count < needed:
        pytest.skip(f"needs {needed} NVIDIA GPU(s): {why or f'{count} visible'}")
