"""CPU provider of ``keyed_uniform``: Philox4x32-10 in numpy's unsigned integers.

The portable reference holds 32-bit words in int64 tensors and multiplies in 16-bit limbs (no
device torch runs on overflows that way). On the host numpy multiplies uint32 words into uint64
products directly: a third of the multiplies and none of the limb bookkeeping.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ... import ops
from ...ops.sampling.keyed import PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1

_PROVIDER = "cpu"
_WORD = np.uint64(0xFFFFFFFF)


def _philox(counter: list[np.ndarray], key_low: np.ndarray, key_high: np.ndarray) -> list[np.ndarray]:
    c0, c1, c2, c3 = counter
    k0, k1 = key_low, key_high
    for round_index in range(PHILOX_ROUNDS):
        if round_index:
            k0 = (k0 + np.uint64(PHILOX_W0)) & _WORD
            k1 = (k1 + np.uint64(PHILOX_W1)) & _WORD
        product0 = c0 * np.uint64(PHILOX_M0)
        product1 = c2 * np.uint64(PHILOX_M1)
        c0, c1, c2, c3 = (
            (product1 >> np.uint64(32)) ^ c1 ^ k0,
            product1 & _WORD,
            (product0 >> np.uint64(32)) ^ c3 ^ k1,
            product0 & _WORD,
        )
    return [c0, c1, c2, c3]


def keyed_uniform(seeds: Tensor, positions: Tensor, step: int, domain: int, out: Tensor) -> None:
    batch, n = out.shape
    seed = seeds.numpy().view(np.uint64)[:, None]
    position = positions.numpy().view(np.uint64)[:, None]
    groups = np.arange((n + 3) // 4, dtype=np.uint64)[None, :]
    shape = (batch, groups.shape[1])
    counter = [
        np.broadcast_to(groups, shape),
        np.broadcast_to(position & _WORD, shape),
        np.broadcast_to((position >> np.uint64(32)) | np.uint64(step << 16), shape),
        np.full(shape, domain, dtype=np.uint64),
    ]
    words = np.stack(_philox(counter, seed & _WORD, seed >> np.uint64(32)), axis=2).reshape(batch, -1)[:, :n]
    uniforms = ((words >> np.uint64(9)) * np.uint64(2) + np.uint64(1)).astype(np.float32) * np.float32(
        2.0**-24
    )
    out.copy_(torch.from_numpy(uniforms))


def register() -> None:
    ops.keyed_uniform.register_impl(
        "cpu", _PROVIDER, keyed_uniform, intended="Philox in numpy's unsigned words: no 16-bit limbs"
    )
