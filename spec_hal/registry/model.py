"""The registry's data: vendors, their capabilities and intents, providers, fallbacks.

Everything here is a frozen value; the mutable state lives in :mod:`spec_hal.registry.state`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .._version import API_VERSION
from ..detect import HostFacts, ProbeResult

if TYPE_CHECKING:
    import torch

#: Provider names with a fixed meaning. Vendors may register other names (their own kernels).
PORTABLE = "portable"
TRITON = "triton"
#: The pseudo-vendor under which an op's portable reference is registered for every vendor.
ANY_VENDOR = "*"

#: Default provider priorities: the resolution walk is vendor kernel, then Triton, then portable.
PRIORITY_VENDOR_KERNEL = 300
PRIORITY_TRITON = 200
PRIORITY_PORTABLE = 0

#: Answer of a provider's ``supports`` check: None accepts the variant, a string is why it declines.
Decline = str | None
Variant = Hashable


class Runtime(Protocol):
    """Device-neutral runtime helpers a vendor provides (``spec_hal.runtime`` calls these)."""

    def synchronize(self, device: torch.device) -> None: ...

    def current_stream(self, device: torch.device) -> Any: ...

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None: ...

    def device_guard(self, device: torch.device) -> Any: ...

    def current_index(self) -> int: ...

    def is_capturing(self, device: torch.device) -> bool: ...

    def capture_graph(
        self, fn: Callable[[], None], device: torch.device, generators: Sequence[torch.Generator] = ()
    ) -> Callable[[], None]: ...


@dataclass(frozen=True)
class Capabilities:
    """What a device supports, as data (not as ``if vendor == ...`` elsewhere)."""

    graph_capture: bool = False
    triton: bool = False
    record_stream: bool = False
    #: Launches need the tensors' device made current (multi-device accelerators).
    needs_device_guard: bool = False


@dataclass(frozen=True)
class Intent:
    """The provider a vendor means to serve an op with, and why (required for ``portable``)."""

    provider: str
    reason: str = ""


@dataclass(frozen=True)
class TorchDeviceModule:
    """A runtime that is only data: torch's device module of the vendor's device type
    (``torch.get_device_module(device_type)``), reached after importing ``extension`` where that
    module appears only then (``"torch_npu"``). The registry builds the runtime on first use."""

    extension: str | None = None


@dataclass(frozen=True)
class DeviceDescriptor:
    """A vendor: how to find it, which torch device type its tensors have, what it binds.

    ``runtime`` and ``bindings`` are qualified names (``"pkg.module:attr"``), imported on first use so
    that describing a vendor never imports its software stack; ``bindings`` names a ``register()``
    function (a bare module name is imported for its side effects, once). A runtime that is torch's
    device module is data instead: ``runtime=TorchDeviceModule(...)``. ``families`` names the
    shared kernel families the vendor binds (``{"triton": launch_config}``); they are bound on
    first use too, before ``bindings`` runs.
    """

    name: str
    device_type: str
    priority: int
    probe: Callable[[HostFacts], ProbeResult]
    dist_backend: str
    capabilities: Capabilities = Capabilities()
    runtime: str | TorchDeviceModule = "spec_hal.runtime:HOST_RUNTIME"
    bindings: str | None = None
    #: Provider per op; ops not listed get the family's answer, else ``default_intent``.
    intents: Mapping[str, Intent] = field(default_factory=dict)
    default_intent: Intent = Intent(PORTABLE, "no accelerated provider for this op on this device")
    #: Why this vendor sits where it does in the detection order (shown by ``spec-hal info``).
    priority_reason: str = ""
    #: Limits and gaps worth knowing (shown by ``spec-hal info``), e.g. "no graph capture on torch < X".
    notes: tuple[str, ...] = ()
    api_version: int = API_VERSION
    #: Shared kernel families bound for this vendor, with the vendor's launch configuration of each.
    families: Mapping[str, object] = field(default_factory=dict)
    #: Triton's backend for this vendor's chips (a ``GPUTarget``'s backend, e.g. ``"hip"``), which
    #: ``spec-hal compile`` builds the family through; None: spec_hal knows no Triton target of it.
    triton_backend: str | None = None
    #: The targets ``spec-hal compile`` builds the family for by default (``"sm_90"``, ``"gfx942"``:
    #: names ``spec_hal.aot.parse_target`` reads).
    compile_targets: tuple[str, ...] = ()
    #: How this project verified the vendor's providers, strongest first, never more than was seen
    #: (``spec-hal info`` shows it).
    evidence: tuple[str, ...] = ("not verified by this project",)
    #: The ``torch.profiler.ProfilerActivity`` that records this vendor's kernels, by name (``"CUDA"``);
    #: None: a profile there has the host's clock only (``spec-hal demo``'s iteration profile).
    profiler_activity: str | None = None

    def intent(self, op: str) -> Intent:
        """The intent this descriptor states itself (the registry adds what bound families say)."""
        return self.intents.get(op, self.default_intent)

    def __repr__(self) -> str:
        # Short: the generated repr spells out the probe, intents and families over a page.
        return f"DeviceDescriptor(name={self.name!r}, device_type={self.device_type!r})"


@dataclass(frozen=True)
class Implementation:
    """One provider of one op for one vendor (or ``ANY_VENDOR``)."""

    op: str
    vendor: str
    provider: str
    fn: Callable[..., None]
    priority: int
    supports: Callable[[Variant], Decline] | None = None

    def declines(self, variant: Variant) -> Decline:
        return None if self.supports is None else self.supports(variant)


@dataclass(frozen=True)
class Fallback:
    op: str
    vendor: str
    variant: Variant
    intended: str
    chosen: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {
            "op": self.op,
            "vendor": self.vendor,
            "variant": repr(self.variant),
            "intended": self.intended,
            "chosen": self.chosen,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Detection:
    """The outcome of detection: the chosen vendor, why, and every probe."""

    device: DeviceDescriptor
    reason: str
    probes: tuple[ProbeResult, ...]
    overridden: bool


@dataclass(frozen=True)
class Choice:
    """The outcome of resolving one (op, vendor, variant)."""

    impl: Implementation
    intent: Intent
    fallback: Fallback | None
    skipped: tuple[tuple[str, str], ...]  # (provider, why not chosen)


class BindableOp(Protocol):
    """What the registry needs of an op object (``spec_hal.opdef.OpDef``): its name and class, a
    binding cache to drop, and a check of a provider's signature."""

    name: str

    @property
    def op_class(self) -> str: ...

    def clear_bindings(self) -> None: ...

    def check_provider(self, provider: str, fn: Callable[..., None]) -> None: ...
