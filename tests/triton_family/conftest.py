"""Triton family tests: kernels run on CPU tensors under TRITON_INTERPRET=1 (results are emulated).

Run by the tox env ``triton-interpret``; elsewhere the whole directory is skipped, because
``TRITON_INTERPRET`` must be set before any kernel is decorated.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") != "1":
    collect_ignore_glob = ["test_*.py"]
else:
    pytest.importorskip("triton")


@pytest.fixture(params=["cuda"])
def triton_vendor(request):
    """A vendor emulated on the CPU with its Triton providers bound."""
    from spec_hal.testing import emulate

    with emulate(request.param) as descriptor:
        yield descriptor


@pytest.fixture
def fake_runtime(monkeypatch):
    """Planned launches on stand-ins (no device, no interpreter): a driver on device 0, stream 1234,
    and no launch hook or debug switch of Triton's."""
    import types

    import triton

    from spec_hal.kernels.triton import launch

    driver = types.SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device: 1234)
    monkeypatch.setattr(launch, "driver", types.SimpleNamespace(active=driver))
    monkeypatch.setattr(launch, "_INTERPRETED", False)
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(triton.knobs.runtime, "launch_exit_hook", None)
    monkeypatch.setattr(triton.knobs.runtime, "debug", False)
    return driver
