"""Keyed randomness (D8): ``keyed_uniform``'s bits against Random123's known answers and a loop
oracle, the keyed draws of ``fast_sample`` and ``sample_draft_proposal`` (no generator touched, the
same ids whatever the batch), and their distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spec_hal import ops
from spec_hal.conformance.cases import keyed as keyed_cases
from spec_hal.devices.cpu import keyed as cpu_keyed
from spec_hal.ops.sampling import keyed as keyed_module
from spec_hal.testing import use_provider

META = torch.device("meta")


@pytest.mark.parametrize("counter, key, answer", keyed_cases.KNOWN_ANSWERS)
def test_every_philox_implementation_gives_the_known_answers(counter, key, answer):
    assert keyed_cases.philox_oracle(counter, key) == answer
    as_tensors = [torch.tensor([word], dtype=torch.int64) for word in (*counter, *key)]
    words = keyed_module.philox4x32_10(tuple(as_tensors[:4]), (as_tensors[4], as_tensors[5]))
    assert tuple(int(w) for w in words) == answer
    as_arrays = [np.array([word], dtype=np.uint64) for word in (*counter, *key)]
    words = cpu_keyed._philox(as_arrays[:4], as_arrays[4], as_arrays[5])
    assert tuple(int(w[0]) for w in words) == answer


def test_a_wrong_oracle_is_refused(monkeypatch):
    monkeypatch.setattr(keyed_cases, "philox_oracle", lambda counter, key: (0, 0, 0, 0))
    with pytest.raises(AssertionError, match="known answer"):
        keyed_cases.checked_oracle()


@pytest.mark.parametrize("provider", ["portable", "cpu"])
def test_keyed_uniform_matches_the_loop_oracle(provider):
    seeds = [0, -1, 2**63 - 1, -(2**63), 0x0123456789ABCDEF]
    positions = [0, 2**48 - 1, 2**32, 5, 123456789]
    with use_provider("keyed_uniform", provider):
        got = ops.keyed_uniform(torch.tensor(seeds), torch.tensor(positions), 65535, ops.FINAL_COIN, 13)
    want = keyed_cases.oracle_uniforms(seeds, positions, 65535, ops.FINAL_COIN, 13)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_uniforms_are_odd_multiples_of_2_to_the_minus_24_strictly_inside_0_1():
    u = ops.keyed_uniform(torch.arange(64), torch.arange(64) * 1000, 0, ops.ACCEPT_COIN, 4096)
    scaled = (u.double() * 2**24).round()
    assert torch.equal(scaled, u.double() * 2**24) and bool((scaled % 2 == 1).all())
    assert float(u.min()) > 0 and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.005  # 262144 draws


def test_every_part_of_the_key_changes_the_draws():
    seeds, positions = torch.tensor([7]), torch.tensor([100])
    base = ops.keyed_uniform(seeds, positions, 2, ops.ACCEPT_COIN, 8)
    others = [
        ops.keyed_uniform(seeds + 1, positions, 2, ops.ACCEPT_COIN, 8),
        ops.keyed_uniform(seeds, positions + 1, 2, ops.ACCEPT_COIN, 8),
        ops.keyed_uniform(seeds, positions, 3, ops.ACCEPT_COIN, 8),
        ops.keyed_uniform(seeds, positions, 2, ops.FINAL_COIN, 8),
    ]
    for other in others:
        assert not bool((other == base).any())
    # Lanes are a prefix: more lanes extend the row, never change it.
    assert torch.equal(ops.keyed_uniform(seeds, positions, 2, ops.ACCEPT_COIN, 3), base[:, :3])


def _sampling_calls(batch: int, vocab: int):
    gen = torch.Generator().manual_seed(batch)
    probs = torch.softmax(torch.randn(batch, vocab, generator=gen) * 2, dim=-1)
    logits = torch.randn(batch, vocab, generator=gen)
    temperatures = torch.rand(batch, 1, generator=gen) + 0.5
    seeds = torch.randint(-(2**62), 2**62, (batch,), generator=gen)
    positions = torch.randint(0, 2**40, (batch,), generator=gen)

    def fast_sample(rows):
        return ops.fast_sample(probs[rows], 2, seeds=seeds[rows], positions=positions[rows], step=1)

    def sample_draft_proposal(rows):
        return ops.sample_draft_proposal(
            logits[rows], temperatures[rows], seeds=seeds[rows], positions=positions[rows]
        )

    return {"fast_sample": fast_sample, "sample_draft_proposal": sample_draft_proposal}


@pytest.mark.parametrize("op", ["fast_sample", "sample_draft_proposal"])
def test_keyed_sampling_touches_no_generator_and_ignores_the_batch(op):
    call = _sampling_calls(8, 50)[op]
    torch.manual_seed(0)
    state = torch.get_rng_state()
    full = call(slice(0, 8))
    assert torch.equal(torch.get_rng_state(), state)
    for rows in (slice(3, 4), slice(2, 7), [7, 0, 5]):
        part = call(rows)
        for got, want in zip(part, full, strict=True):
            assert torch.equal(got, want[rows])
    assert all(torch.equal(a, b) for a, b in zip(call(slice(0, 8)), full, strict=True))  # run to run


def test_keyed_fast_sample_draws_from_the_distribution():
    """Over many positions a row's keyed draws follow its probabilities."""
    probs = torch.tensor([[0.5, 0.25, 0.125, 0.125, 0.0]]).expand(4000, 5).contiguous()
    _, ids = ops.fast_sample(probs, seeds=torch.full((4000,), 99), positions=torch.arange(4000))
    frequencies = torch.bincount(ids.flatten(), minlength=5).double() / 4000
    assert torch.allclose(frequencies, probs[0].double(), atol=0.03)
    assert int(frequencies[4]) == 0


def test_keyed_ids_equal_the_race_over_keyed_uniform_noise():
    """The keyed race is fast_sample's race over -log(keyed_uniform(..., DRAFT_PROPOSAL, V))."""
    probs = torch.softmax(torch.randn(6, 40, generator=torch.Generator().manual_seed(1)), dim=-1)
    seeds, positions = torch.arange(6) - 3, torch.arange(6) * 11
    _, ids = ops.fast_sample(probs, 3, seeds=seeds, positions=positions, step=9)
    noise = -ops.keyed_uniform(seeds, positions, 9, ops.DRAFT_PROPOSAL, 40).log()
    scores = probs / noise
    assert torch.equal(ids, torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :3])


def test_keyed_calls_run_on_meta():
    seeds, positions = (
        torch.zeros(3, dtype=torch.int64, device=META),
        torch.zeros(3, dtype=torch.int64, device=META),
    )
    assert ops.keyed_uniform(seeds, positions, 0, ops.ACCEPT_COIN, 5).shape == (3, 5)
    p, ids = ops.fast_sample(torch.empty(3, 7, device=META), seeds=seeds, positions=positions)
    assert ids.shape == (3, 1) and ids.device == META
