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


def register_launchers(vendor: str, config, launchers: dict) -> list[str]:
    """Register ``launchers`` (a family module's ``LAUNCHERS``) for ``vendor`` with ``config``, which
    the composition root would replace by the interpreter's: tests of a vendor's real launch
    configuration under the interpreter. Returns the ops registered."""
    import functools

    from spec_hal import ops

    for name, launcher in launchers.items():
        getattr(ops, name).register_impl(vendor, "triton", functools.partial(launcher, config))
    return list(launchers)


def provider(op: str, config=None):
    """The Triton family's launcher of ``op`` bound to ``config`` (default: the interpreter's),
    called directly: no contract, no checks."""
    import functools

    from spec_hal.kernels.triton import family
    from spec_hal.kernels.triton.config import INTERPRETER

    return functools.partial(family.LAUNCHERS[op], INTERPRETER if config is None else config)
