"""Family E's Triton kernel (interpreted) against the portable reference. Helpers and the kinds of
checks: see ``test_tree.py``."""

from __future__ import annotations

import functools

import pytest
import torch
from triton_family.interpreted import TRITON_VENDORS, small_cases
from triton_family.test_tree import (
    assert_passes,
    assert_passes_with_vendor_config,
    assert_providers_agree,
    built,
    case_id,
    column_major,
    padded,
    relaid,
)

from spec_hal.conformance.cases import simulated as simulated_cases
from spec_hal.kernels.triton import simulated as simulated_kernels
from spec_hal.kernels.triton.config import INTERPRETER

OP = "generate_simulated_accept_index"
B = simulated_cases.BUILDERS
EXTRA = [
    # Several programs of a few rows each (the interpreter block is 64 lanes).
    built(B, OP, "bs67_real_int32", bs=67, num_steps=5, token_mode="real-draft-token", idx_dtype=torch.int32, padded_rows=True),
    built(B, OP, "bs40_tree_fixed", bs=40, num_steps=3, topk=4, mean=9.0, padded_rows=True),
]  # fmt: skip
STRIDED = [relaid(case, layout) for case in small_cases(OP)[:2] for layout in (padded, column_major)]


@pytest.mark.parametrize("case", small_cases(OP) + EXTRA + STRIDED, ids=case_id)
def test_case(case):
    assert_passes(case)


@pytest.mark.parametrize("vendor", TRITON_VENDORS)
def test_every_vendor_configuration(vendor):
    golden = [c for c in small_cases(OP) if c.kind == "golden"]
    assert_passes_with_vendor_config(vendor, simulated_kernels, [*golden, EXTRA[0]])


@pytest.mark.parametrize("real_draft_tokens", [False, True])
def test_out_of_range_roots_are_masked(real_draft_tokens):
    # A root outside [0, bs*D) (unchecked on accelerators) leaves its new accept row as it was.
    bs, num_nodes, width, accept_len = 5, 4, 4, 3
    gen = torch.Generator().manual_seed(1)
    accept_index = torch.randint(0, bs * num_nodes, (bs, width), generator=gen)
    accept_index[:, 0] = torch.tensor([0, -1, bs * num_nodes, -5, 7])
    args = [
        accept_index,
        torch.full((bs * num_nodes,), -7, dtype=torch.int32),
        torch.full((bs,), -7, dtype=torch.int32),
        torch.randint(0, 1000, (bs, num_nodes), generator=gen).int(),
        torch.randint(0, 1000, (bs, num_nodes), generator=gen),
        accept_len,
        real_draft_tokens,
        torch.full((bs, width), -7, dtype=torch.int32),
    ]
    provider = functools.partial(simulated_kernels._generate_simulated_accept_index, INTERPRETER)
    assert_providers_agree(OP, provider, args)
