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


#: The row-wise ops whose portable references add along a row (D8 (b)).
ADDING_ALONG_A_ROW = (
    "renorm_draft_probs",
    "sample_draft_proposal",
    "top_k_renorm_prob",
    "top_p_renorm_prob",
    "tree_speculative_sampling_target_only",
    "chain_speculative_sampling",
)


def _provider_calls(op: str) -> list[tuple]:
    """The provider arguments of every small conformance case of ``op`` (with a non-empty batch)."""
    from spec_hal.conformance import runner

    cpu = torch.device("cpu")
    calls = []
    for case in runner.all_cases():
        if case.op == op and case.small:
            calls += runner.provider_args(case, runner.fresh_build(case, cpu))
    return calls


@pytest.mark.parametrize("op", ADDING_ALONG_A_ROW)
def test_the_row_wise_references_add_without_torchs_reductions(op, monkeypatch):
    """torch's row reductions and scans made to fail while the reference runs: where the batch can
    change their order of addition on some device, a reference must not call them."""
    calls = _provider_calls(op)
    assert calls

    def refused(name, original):
        def call(tensor, *args, **kwargs):
            if tensor.is_floating_point():  # integer sums are exact in any order
                raise AssertionError(f"{name} of floats: its order of addition may depend on the batch")
            return original(tensor, *args, **kwargs)

        return call

    for owner in (torch, torch.Tensor, torch.nn.functional):
        for name in ("sum", "cumsum", "softmax", "log_softmax", "logsumexp", "mean"):
            if hasattr(owner, name):
                monkeypatch.setattr(owner, name, refused(name, getattr(owner, name)))
    for args in calls:
        getattr(ops, op).reference(*args)
