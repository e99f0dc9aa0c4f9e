"""The shared conformance suite: one set of cases for every device and every provider bound there.

Run it with ``spec-hal check``, ``pytest --pyargs spec_hal.conformance``, or tox.
"""
