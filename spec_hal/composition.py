"""The composition root: the one module that knows the built-in vendors and the kernel families.

The registry knows no vendor. Importing spec_hal installs two hooks in it from here:

* on first use, :func:`register_vendors` registers each built-in vendor package's ``DESCRIPTOR``
  through the same public call a plugin makes, then loads the out-of-tree plugins of the
  entry-point group ``spec_hal.devices``;
* when a vendor is first resolved, :func:`bind_families` binds the kernel families its descriptor
  names (``families={"triton": launch_config}``), for built-in vendors and plugins alike.

Nothing here runs at import but the installation of the hooks, so ``import spec_hal`` stays cheap
and fork-safe.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, cast

from . import ops, plugins, registry
from .devices import cpu, cuda, hip, musa, npu, xpu
from .registry import PORTABLE, TRITON, DeviceDescriptor, Intent

if TYPE_CHECKING:
    from .kernels.triton.config import LaunchConfig
    from .kernels.triton.launcher import Launcher

#: Every built-in vendor package (each is data: a ``DESCRIPTOR``), in the order of the vendor matrix
#: (docs/vendors.md); the detection order is each descriptor's own ``priority``.
BUILTIN_VENDORS = (cuda, hip, musa, xpu, npu, cpu)


def builtin_descriptors() -> tuple[DeviceDescriptor, ...]:
    """The descriptors of the built-in vendors, in the order of :data:`BUILTIN_VENDORS`."""
    return tuple(package.DESCRIPTOR for package in BUILTIN_VENDORS)


def register_vendors() -> None:
    """Register every built-in vendor, then the plugins (the registry's initializer)."""
    for descriptor in builtin_descriptors():
        registry.register_device(descriptor)
    plugins.load_plugins()


def register_launcher(vendor: str, launcher: Launcher, launch_config: LaunchConfig) -> None:
    """Register the Triton family's ``launcher`` as provider ``triton`` of its op for ``vendor``,
    launching with ``launch_config``, declining what its record declines."""
    getattr(ops, launcher.op).register_impl(
        vendor, TRITON, functools.partial(launcher.launch, launch_config), supports=launcher.supports
    )


def bind_triton_family(vendor: str, config: object) -> None:
    """Register every launcher of the Triton family for ``vendor`` with its launch configuration,
    and state the family's intent for the ops it leaves to torch: those it has no kernel for (with
    the op's own reason where it gives one) and those whose launcher wants a vocabulary tile the
    vendor has not measured. Where Triton is not installed, say so: each op that intended Triton
    then records a fallback with that reason."""
    try:
        from .kernels.triton import family
    except ImportError as exc:
        if not (exc.name or "").startswith("triton"):
            raise
        registry.declare_unavailable(vendor, TRITON, f"Triton is not installed ({exc})")
        return
    vendor_config = cast("LaunchConfig", config)
    launch_config = family.launch_config(vendor_config)
    for launcher in family.LAUNCHERS:
        register_launcher(vendor, launcher, launch_config)
        if launcher.wants_vocabulary_tile:
            if vendor_config.vocab_block_bytes:  # a vocabulary tile of the vendor's own
                intent = Intent(
                    TRITON, f"the shared Triton family, with {vendor_config.name}'s vocabulary tile"
                )
            else:
                intent = Intent(PORTABLE, family.COPY_TILE_LOSES)
            registry.declare_intent(vendor, launcher.op, intent)
    covered = {launcher.op for launcher in family.LAUNCHERS}
    for name, op in registry.ops().items():
        if name not in covered:
            # An op object may say why torch serves it (spec_hal.opdef.OpDef.portable_reason).
            reason = getattr(op, "portable_reason", None) or "the Triton family has no kernel for it"
            registry.declare_intent(vendor, name, Intent(PORTABLE, reason))


FAMILY_BINDERS = {TRITON: bind_triton_family}


def bind_families(descriptor: DeviceDescriptor) -> None:
    """Bind the kernel families ``descriptor`` names (the registry's family binder)."""
    for family_name, config in descriptor.families.items():
        binder = FAMILY_BINDERS.get(family_name)
        if binder is None:
            registry.declare_unavailable(
                descriptor.name, family_name, f"spec_hal has no kernel family {family_name!r}"
            )
            continue
        binder(descriptor.name, config)


registry.set_initializer(register_vendors)
registry.set_family_binder(bind_families)
