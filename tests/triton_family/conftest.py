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
