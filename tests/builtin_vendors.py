"""The built-in vendors as the composition root lists them (imported by the tests as
``builtin_vendors``): a test about every built-in vendor reads them here, so adding a vendor
changes no test."""

from spec_hal.composition import BUILTIN_VENDORS, builtin_descriptors

#: Every built-in vendor package (its ``DESCRIPTOR``, and ``TRITON_CONFIG`` where it binds Triton).
PACKAGES = BUILTIN_VENDORS
#: Every built-in vendor, in detection order (each descriptor states its priority).
DETECTION_ORDER = tuple(d.name for d in sorted(builtin_descriptors(), key=lambda d: -d.priority))
#: The built-in vendors with a device of their own: their tensors are not CPU tensors.
ACCELERATORS = tuple(d.name for d in builtin_descriptors() if d.device_type != "cpu")
