"""The shared Triton kernel family: one copy of each kernel, launched with a vendor's
:class:`~spec_hal.kernels.triton.config.LaunchConfig`.

Importing this package needs no Triton (vendor packages read :mod:`.config` from it); the kernel
modules and :mod:`.family`, which lists their launchers, do.
"""
