"""CPU providers of family G (mamba state commit): none, on purpose.

The portable references already are the CPU implementation: ``verify_commit_step_indices`` is a
few vectorised ops over ``bs`` (27x faster than a per-request Python loop at bs = 256 on 2 cores,
with or without tracking), and ``scatter_mamba_states_after_mtp_verify`` is one gather and one
``index_copy_`` per state tensor, bound by memory bandwidth; ATen's row copies are what a
hand-written CPU loop would do. ``commit_mamba_states_after_verify`` is the two in sequence.
"""
