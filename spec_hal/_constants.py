"""Constants shared by the op contracts and the kernels. A leaf: it imports nothing of spec_hal, so
kernel modules may read it without reaching the rest of the package."""

from __future__ import annotations

import enum

import torch

#: One past the largest step, position and lane of a keyed draw's key (seed, position, step, domain,
#: lane): the counter that Philox reads packs them (``spec_hal.ops.sampling.keyed``).
STEP_LIMIT = 1 << 16
POSITION_LIMIT = 1 << 48
LANE_LIMIT = 1 << 34

#: The token id simulated acceptance writes where a draft token is not real (sglang's value).
SIMULATED_TOKEN = 100

#: A NaN logit ranks as this value in every argmax of the spec (compared in fp32).
NAN_LOGIT = -1e30


class TreeMaskMode(enum.IntEnum):
    """Layout of the attention mask written by ``build_tree_kernel_efficient``."""

    #: per request a block of D rows x (seq_len + D) bools; the caller fills the prefix columns.
    FULL_MASK = 0
    #: ``[bs*D*D]`` bools, row (b, i) at ``(b*D + i)*D``: tree columns only.
    QLEN_ONLY = 1
    #: one integer item per (b, i); bit c = tree column c (D <= 32).
    QLEN_ONLY_BITPACKING = 2


FULL_MASK = TreeMaskMode.FULL_MASK
QLEN_ONLY = TreeMaskMode.QLEN_ONLY
QLEN_ONLY_BITPACKING = TreeMaskMode.QLEN_ONLY_BITPACKING

#: Same-size signed dtype of an unsigned bit-packed mask item: CUDA has no bitwise_or for
#: uint16/32/64, and the bits are the same.
SIGNED_OF = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
