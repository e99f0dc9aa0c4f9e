"""pytest plugin (``pytest11`` entry point): ``--spec-hal-device`` and ``--spec-hal-report``.

It parametrises ``spec_hal/conformance/test_suite.py`` with every check of the suite on the chosen
devices (default: every usable device) and writes the machine-readable report if asked. It imports
nothing heavy until a session actually collects the conformance tests. Under pytest-xdist (``-n``)
each worker hands its results to the controller, which writes one report of them all.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("spec_hal")
    group.addoption(
        "--spec-hal-device",
        action="store",
        default=None,
        help="conformance: run against this device (default: every usable device)",
    )
    group.addoption(
        "--spec-hal-report", action="store", default=None, help="conformance: write the JSON report here"
    )
    group.addoption(
        "--spec-hal-small", action="store_true", help="conformance: only small cases (Triton interpreter)"
    )
    group.addoption(
        "--spec-hal-emulate",
        action="store_true",
        help="conformance: run the device's providers on CPU tensors (results are emulated)",
    )
    group.addoption(
        "--spec-hal-no-compile", action="store_true", help="conformance: skip the torch.compile checks"
    )


def _devices(config: Any) -> list[Any]:
    """The devices to check. A named device must be present (unless emulated) and have its intended
    providers registered: otherwise the suite would test something else than asked."""
    import pytest

    from spec_hal import registry
    from spec_hal.conformance.runner import absent_reason, unavailable_providers

    name = config.getoption("--spec-hal-device")
    emulated = config.getoption("--spec-hal-emulate")
    if not name:
        if emulated:
            raise pytest.UsageError("--spec-hal-emulate needs --spec-hal-device")
        return [registry.device(p.vendor) for p in registry.detect().probes if p.usable]
    descriptor = registry.device(name)
    absent = None if emulated else absent_reason(descriptor)
    problems = ([absent] if absent else []) + unavailable_providers(descriptor)
    if problems:
        raise pytest.UsageError(f"--spec-hal-device={name}: " + "; ".join(problems))
    return [descriptor]


def pytest_generate_tests(metafunc: Any) -> None:
    if "conformance_check" not in metafunc.fixturenames:
        return
    from spec_hal.conformance.runner import Selection, device_context, planned, result_of

    config = metafunc.config
    emulated = config.getoption("--spec-hal-emulate")
    selection = Selection(
        small_only=config.getoption("--spec-hal-small"),
        emulated=emulated,
        compile=not config.getoption("--spec-hal-no-compile"),
    )
    checks, ids = [], []
    for descriptor in _devices(config):
        with device_context(descriptor, emulated):
            plan = list(planned(descriptor, selection))
        for op, provider, case_class, name, thunk in plan:

            def check(d=descriptor, o=op, p=provider, c=case_class, n=name, t=thunk):
                with device_context(d, emulated):
                    result = result_of(d.name, o, p, c, n, t)
                _results(config).append(result)
                return result

            checks.append(check)
            ids.append(f"{descriptor.name}-{op}-{provider}-{case_class}-{name}")
    metafunc.parametrize("conformance_check", checks, ids=ids)


def pytest_sessionstart(session: Any) -> None:
    session.config._spec_hal_started = time.time()


def _results(config: Any) -> list[Any]:
    if not hasattr(config, "_spec_hal_results"):
        config._spec_hal_results = []
    return config._spec_hal_results


#: The key of an xdist worker's results in what it hands the controller (``workeroutput``).
_WORKER_RESULTS = "spec_hal_results"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist, on the controller: a worker's results join the controller's (its report's)."""
    from spec_hal.conformance.runner import Result

    handed = getattr(node, "workeroutput", {}).get(_WORKER_RESULTS)
    if handed is not None:
        _results(node.config).extend(Result(**fields) for fields in handed)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    config = session.config
    results = getattr(config, "_spec_hal_results", None)
    if results is None:
        return
    worker_output = getattr(config, "workeroutput", None)
    if worker_output is not None:  # an xdist worker: the controller writes the report
        worker_output[_WORKER_RESULTS] = [result.to_json() for result in results]
        return
    path = config.getoption("--spec-hal-report", default=None)
    if not path:
        return
    from spec_hal import registry
    from spec_hal.conformance.runner import report

    devices = sorted({r.device for r in results})
    data = report(
        results,
        registry.device(devices[0]) if devices else registry.current_device(),
        time.time() - config._spec_hal_started,
        bool(config.getoption("--spec-hal-emulate")),
    )
    data["devices"] = devices
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
