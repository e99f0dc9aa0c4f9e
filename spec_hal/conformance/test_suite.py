"""The conformance suite as pytest tests: ``pytest --pyargs spec_hal.conformance [--spec-hal-device=X]``.

Each check (op x provider x case) is one test, parametrised by the ``spec_hal.conformance.plugin``
pytest plugin (installed with spec_hal through the ``pytest11`` entry point).
"""

import pytest


def test_conformance(conformance_check):
    result = conformance_check()
    if result.status == "skip":
        pytest.skip(result.reason)
    assert result.status == "pass", result.reason
