"""spec_hal: vendor-neutral device ops for speculative decoding.

``spec_hal.ops.<name>`` runs an op on the device of its tensors with the provider bound there;
``spec_hal.current_device()`` says which vendor was detected (``spec-hal info`` says why).
Importing spec_hal initialises no device and loads no plugin: both happen on first use.
"""

from . import composition, ops, runtime
from ._version import API_VERSION, __version__
from .detect import Check, HostFacts, ProbeResult
from .errors import BindingError, DeviceSelectionError, FallbackError, PluginError, SpecHalError
from .opdef import OpDef, define_op
from .registry import (
    PORTABLE,
    REGISTRY,
    TRITON,
    Capabilities,
    DeviceDescriptor,
    Intent,
    TorchDeviceModule,
    current_device,
    detect,
    devices,
    fallbacks,
    register_device,
    register_impl,
)

__all__ = [
    "API_VERSION",
    "PORTABLE",
    "REGISTRY",
    "OpDef",
    "TRITON",
    "BindingError",
    "Capabilities",
    "Check",
    "DeviceDescriptor",
    "DeviceSelectionError",
    "FallbackError",
    "HostFacts",
    "Intent",
    "PluginError",
    "ProbeResult",
    "SpecHalError",
    "TorchDeviceModule",
    "__version__",
    "current_device",
    "define_op",
    "detect",
    "devices",
    "fallbacks",
    "composition",
    "ops",
    "register_device",
    "register_impl",
    "runtime",
]
