"""The keyed draws in Triton (interpreted): Philox4x32-10 against Random123's known answers, and
``keyed_uniform``'s launcher bit for bit against the portable reference over tile boundaries,
rows past the grid and strided outputs."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import triton
import triton.language as tl
from triton_family.interpreted import provider

from spec_hal.conformance.cases import keyed as keyed_cases
from spec_hal.kernels.triton.config import INTERPRETER
from spec_hal.kernels.triton.device_math import philox4x32_10
from spec_hal.ops.sampling import keyed as keyed_module


@triton.jit
def _philox_kernel(words_ptr):
    lanes = tl.arange(0, 4)
    words = tl.load(words_ptr + lanes)  # the counter
    key = tl.load(words_ptr + 4 + lanes)  # the key, in its first two words
    zero = tl.zeros([1], tl.uint32)
    c0, c1, c2, c3 = (zero + tl.sum(tl.where(lanes == j, words, 0), 0) for j in range(4))
    k0, k1 = (zero + tl.sum(tl.where(lanes == j, key, 0), 0) for j in range(2))
    w0, w1, w2, w3 = philox4x32_10(c0, c1, c2, c3, k0, k1)
    for j, w in enumerate((w0, w1, w2, w3)):
        tl.store(words_ptr + 8 + j + tl.arange(0, 1), w)


@pytest.mark.parametrize("counter, key, answer", keyed_cases.KNOWN_ANSWERS)
def test_the_kernels_philox_gives_the_known_answers(counter, key, answer):
    words = torch.tensor([*counter, *key, 0, 0, 0, 0, 0, 0], dtype=torch.int64).to(torch.uint32)
    _philox_kernel[(1,)](words)
    assert tuple(int(w) for w in words[8:].to(torch.int64)) == answer


@pytest.mark.parametrize("batch, n", [(1, 1), (3, 37), (5, 256), (4, 700)])
def test_keyed_uniform_matches_the_reference_bit_for_bit(batch, n):
    gen = torch.Generator().manual_seed(n)
    seeds = torch.randint(-(2**63), 2**63 - 1, (batch,), generator=gen)
    positions = torch.randint(0, 2**48, (batch,), generator=gen)
    config = dataclasses.replace(INTERPRETER, max_grid=2)  # programs take several rows
    # Strided output: every other column of a wider tensor, the rest left as it was.
    wide = torch.full((batch, 2 * n), -1.0)
    provider("keyed_uniform", config)(seeds, positions, 65535, 3, wide[:, ::2])
    want = torch.empty(batch, n)
    keyed_module._keyed_uniform_reference(seeds, positions, 65535, 3, want)
    assert torch.equal(wide[:, ::2].view(torch.int32), want.view(torch.int32))
    assert bool((wide[:, 1::2] == -1.0).all())
