"""Helpers of the Triton family tests (imported as ``triton_family.interpreted``)."""

#: Vendors whose bindings register the shared Triton family, each with its launch configuration.
TRITON_VENDORS = ("cuda", "hip", "musa", "xpu")


def small_cases(op: str):
    """The conformance suite's small cases of ``op`` (a few programs each: interpreter speed)."""
    from spec_hal.conformance.runner import all_cases

    return [case for case in all_cases() if case.op == op and case.small]
