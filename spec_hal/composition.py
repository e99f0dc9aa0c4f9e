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

from . import ops, plugins, registry
from .devices import cpu, cuda, hip, musa, npu, xpu
from .registry import PORTABLE, TRITON, DeviceDescriptor, Intent

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


def bind_triton_family(vendor: str, config: object) -> None:
    """Register every launcher of the Triton family for ``vendor`` with its launch configuration,
    and state the family's intent for the ops it leaves to torch. Where Triton is not installed,
    say so: each op that intended Triton then records a fallback with that reason."""
    try:
        from .kernels.triton import family
    except ImportError as exc:
        if not (exc.name or "").startswith("triton"):
            raise
        registry.declare_unavailable(vendor, TRITON, f"Triton is not installed ({exc})")
        return
    launch_config = family.launch_config(config)  # type: ignore[arg-type]
    for name, launcher in family.LAUNCHERS.items():
        getattr(ops, name).register_impl(vendor, TRITON, functools.partial(launcher, launch_config))
    for name in registry.ops():
        if name not in family.LAUNCHERS or name in family.LEFT_TO_TORCH:
            reason = family.LEFT_TO_TORCH.get(name, "the Triton family has no kernel for it")
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
