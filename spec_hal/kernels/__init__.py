"""Kernel families shared by several vendors: one copy of each kernel, pure leaves (nothing of
spec_hal outside ``spec_hal/kernels/`` is imported here but the constants leaf). A vendor binds a
family with its own launch configuration; the composition root turns that into registrations."""
