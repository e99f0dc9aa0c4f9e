"""Helpers of the Triton family tests (imported as ``triton_family.interpreted``)."""

from spec_hal.composition import builtin_descriptors

#: The launch configuration each built-in vendor binding the shared Triton family registers it with
#: (``spec_hal.composition.bind_triton_family``; emulation replaces it by the interpreter's).
VENDOR_CONFIGS = {d.name: d.families["triton"] for d in builtin_descriptors() if "triton" in d.families}
#: Vendors whose bindings register the shared Triton family.
TRITON_VENDORS = tuple(VENDOR_CONFIGS)


def small_cases(op: str):
    """The conformance suite's small cases of ``op`` (a few programs each: interpreter speed)."""
    from spec_hal.conformance.runner import all_cases

    return [case for case in all_cases() if case.op == op and case.small]


def register_launchers(vendor: str, config, launchers) -> list[str]:
    """Register ``launchers`` (a family module's ``LAUNCHERS`` records) for ``vendor`` with
    ``config``, which the composition root would replace by the interpreter's: tests of a vendor's
    real launch configuration under the interpreter. Returns the ops registered."""
    from spec_hal.composition import register_launcher

    for launcher in launchers:
        register_launcher(vendor, launcher, config)
    return [launcher.op for launcher in launchers]


def provider(op: str, config=None):
    """The Triton family's launcher of ``op`` bound to ``config`` (default: the interpreter's),
    called directly: no contract, no checks."""
    import functools

    from spec_hal.kernels.triton import family
    from spec_hal.kernels.triton.config import INTERPRETER

    launcher = family.launcher_of(op)
    assert launcher is not None, f"the Triton family has no launcher of {op}"
    return functools.partial(launcher.launch, INTERPRETER if config is None else config)
