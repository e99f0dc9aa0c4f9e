"""The portable providers' row sums: the same bits for a row at any batch, on every device. The CPU
adds a lone row as it adds a batch's, so the reductions whose order depends on the batch elsewhere
(CUDA's scan of a lone row, a softmax's sum in a slice) are kept out of the references instead."""

from __future__ import annotations

import pytest
import torch

from spec_hal import ops
from spec_hal.ops.rowwise import row_sums, running_row_sums


def rows(batch: int, width: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(batch, width, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("width", [1, 2, 3, 7, 64, 1000, 4097])
def test_row_sums_add_each_row(width):
    x = rows(5, width)
    assert row_sums(x).shape == (5, 1)
    torch.testing.assert_close(row_sums(x), x.double().sum(1, keepdim=True).float())
    whole = torch.full((2, width), 0.5)  # exact in any order
    assert torch.equal(row_sums(whole), torch.full((2, 1), 0.5 * width))


@pytest.mark.parametrize("width", [1, 2, 3, 7, 64, 1000, 4097])
def test_running_row_sums_are_the_inclusive_scan(width):
    x = rows(5, width)
    torch.testing.assert_close(running_row_sums(x), x.double().cumsum(1).float())
    ones = torch.ones(2, width)  # exact in any order
    assert torch.equal(running_row_sums(ones), torch.arange(1, width + 1).float().expand(2, width))


def test_an_empty_row_sums_to_zero():
    assert torch.equal(row_sums(torch.empty(3, 0)), torch.zeros(3, 1))
    assert running_row_sums(torch.empty(3, 0)).shape == (3, 0)


def test_a_row_adds_to_the_same_bits_alone_in_a_slice_and_in_a_batch():
    batch = rows(9, 3001, seed=1) * torch.logspace(-6, 3, 3001)  # magnitudes that round differently
    for reduce in (row_sums, running_row_sums):
        whole = reduce(batch)
        assert torch.equal(reduce(batch[4:5]), whole[4:5])
        assert torch.equal(reduce(batch[2:7]), whole[2:7])
        assert torch.equal(reduce(batch.flip(0)), whole.flip(0))


@pytest.fixture
def batch_dependent_reductions(monkeypatch):
    """torch's row reductions and scans made to fail: where the batch can change their order of
    addition on some device, a reference must not call them."""

    def refuse(name):
        def call(*args, **kwargs):
            raise AssertionError(f"{name}: its order of addition may depend on the batch")

        return call

    for owner in (torch, torch.Tensor):
        for name in ("sum", "cumsum", "softmax", "logsumexp"):
            monkeypatch.setattr(owner, name, refuse(name))
    monkeypatch.setattr(torch.nn.functional, "softmax", refuse("softmax"))


def test_the_row_wise_references_add_without_torchs_reductions(batch_dependent_reductions):
    probs = rows(3, 50) / 25  # any non-negative rows
    logits = rows(3, 50, seed=2) * 8
    temperatures = torch.full((3, 1), 0.7)
    out = torch.empty(3, 50)
    ops.top_k_renorm_prob.reference(probs, None, 5, out)
    ops.top_p_renorm_prob.reference(probs, None, 0.8, out)
    ops.renorm_draft_probs.reference(logits, temperatures, out)
    q, q_x, x = torch.empty(3, 50), torch.empty(3, 1), torch.empty(3, 1, dtype=torch.int64)
    noise = torch.rand(3, 50) + 0.5
    ops.sample_draft_proposal.reference(logits, temperatures, None, noise, None, None, 0, q, q_x, x)
