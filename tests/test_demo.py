"""The demo engine (spec_hal/demo/) as the strongest test of the ops: they must work together.

Greedy speculative decoding must reproduce plain greedy decoding token for token (every topk, steps
and page size of the grid, self-speculative and EAGLE-style drafts), rejection sampling must
preserve the target distribution (also renormalised by per-request top-k and top-p), the plain
greedy speed baseline must decode exactly like the reference, and the paged cache must get every
slot and row back. The presets run end to end at small size, and their log keeps its format.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import math
import os
import re
import types

import pytest
import torch

import spec_hal.demo as demo
from spec_hal import ops
from spec_hal.demo import (
    SIZES,
    GreedyDecoder,
    ModelConfig,
    SpecConfig,
    SpecDecoder,
    TinyLM,
    add_arguments,
    main,
    run,
    run_greedy,
)
from spec_hal.demo.loop import Request
from spec_hal.demo.model import attention, greedy_reference
from spec_hal.demo.profile import RangedOps, profile_iteration

PROMPTS = [[5, 17, 3], [9, 1, 44, 2, 60, 31, 8, 12, 7], [33, 21, 50, 6, 0]]
MAX_NEW_TOKENS = 12


@pytest.fixture(autouse=True)
def one_thread():
    # tiny tensors: a second intra-op thread only adds contention on a shared 2-core machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model():
    return TinyLM(ModelConfig(), "cpu", torch.float64)  # float64: no argmax near-ties between paths


@pytest.fixture(scope="module")
def greedy_outputs(model):
    return greedy_reference(model, PROMPTS, MAX_NEW_TOKENS)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("num_steps", [1, 3])
@pytest.mark.parametrize("topk", [1, 2, 4])
def test_greedy_speculative_decoding_is_lossless(model, greedy_outputs, topk, num_steps, page_size):
    spec = SpecConfig(topk=topk, num_steps=num_steps, page_size=page_size)
    outputs, stats, engine = run(model, spec, PROMPTS, MAX_NEW_TOKENS, "cpu")
    assert outputs == greedy_outputs
    assert engine.cache.leaks() == []
    assert stats.mean_accepted_length >= 1.0


def test_acceptance_is_meaningful(model, greedy_outputs):
    outputs, stats, _ = run(model, SpecConfig(topk=2, num_steps=3), PROMPTS, MAX_NEW_TOKENS, "cpu")
    assert outputs == greedy_outputs
    assert 1.5 < stats.mean_accepted_length < 4.0  # drafts are often, not always, right


def test_explicit_draft_token_num(model, greedy_outputs):
    spec = SpecConfig(topk=4, num_steps=3, draft_token_num=16, page_size=4)
    outputs, _, engine = run(model, spec, PROMPTS, MAX_NEW_TOKENS, "cpu")
    assert outputs == greedy_outputs
    assert engine.cache.leaks() == []


@pytest.mark.parametrize("page_size", [1, 4])
def test_tree_draft_attends_along_the_real_path(model, monkeypatch, page_size):
    """Every draft forward equals a dense forward of the draft layers over prefix + root + the node's
    path: the per-branch KV of assign_draft_cache_locs_contiguous and
    generate_draft_decode_kv_indices plus move_kv_cache's re-gather follow select_top_k_tokens'
    choices."""
    from spec_hal import ops
    from spec_hal.demo import loop

    config = model.config
    draft = copy.copy(model)
    draft.blocks = model.blocks[: config.draft_layers]
    draft.config = dataclasses.replace(config, num_layers=config.draft_layers, state_size=0)
    topk, steps = 3, 4
    engine = SpecDecoder(
        model, SpecConfig(topk=topk, num_steps=steps, draft_token_num=13, page_size=page_size),
        max_requests=1, max_context=64, device="cpu",
    )  # fmt: skip
    events = []
    propose, select = engine._propose, ops.select_top_k_tokens

    def record_logits(buffers, logits, step):
        events.append(("logits", step, logits.clone()))
        return propose(buffers, logits, step)

    def record_selection(i, *args, **kwargs):
        result = select(i, *args, **kwargs)
        events.append(("select", i, result[0].tolist(), result[3][2][0].tolist()))
        return result

    monkeypatch.setattr(engine, "_propose", record_logits)
    monkeypatch.setattr(loop.ops, "select_top_k_tokens", record_selection)
    request = loop.Request([5, 17, 3, 9], 30)
    engine.prefill([request])
    for _ in range(3):
        events.clear()
        prefix, root = request.prompt + request.output[:-1], request.root
        engine._iterate([request])
        paths: list[list[int]] = [[]]
        for kind, step, *data in events:
            if kind == "logits":
                dense = draft.dense_logits(torch.tensor([prefix + [root] + p for p in paths]))[:, -1]
                torch.testing.assert_close(data[0], dense)
            elif step == 0:
                paths = [[token] for token in data[0]]
            else:  # select_top_k_tokens numbers parents K*K*(i-1) + K + chosen; chosen // K = branch
                chosen = [p - (topk * topk * (step - 1) + topk) for p in data[1]]
                paths = [paths[c // topk] + [data[0][j]] for j, c in enumerate(chosen)]


# --------------------------------------------------------------------------------------------------
# The EAGLE-style draft: it reads the target's hidden state through its fc


EAGLE = ModelConfig(
    vocab_size=64, hidden=32, num_heads=4, num_kv_heads=2, num_layers=3, draft_layers=1,
    draft_feature_scale=0.5, later_layer_scale=0.2,
)  # fmt: skip


@pytest.fixture(scope="module")
def eagle_model():
    return TinyLM(EAGLE, "cpu", torch.float64)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("topk", [1, 2])
def test_eagle_draft_decoding_is_lossless(eagle_model, topk, page_size):
    expected = greedy_reference(eagle_model, PROMPTS, MAX_NEW_TOKENS)
    spec = SpecConfig(topk=topk, num_steps=3, page_size=page_size)
    outputs, stats, engine = run(eagle_model, spec, PROMPTS, MAX_NEW_TOKENS, "cpu")
    assert outputs == expected
    assert engine.cache.leaks() == []
    assert 1.0 < stats.mean_accepted_length < 4.0


def _root_draft_logits(model: TinyLM, prefix: list[int], root: int, feature: torch.Tensor) -> torch.Tensor:
    """The draft's logits for the root, densely: the prefix's draft-layer KV is the target's (the
    layers are shared), the root's input is fc([embedding; feature])."""
    positions = torch.arange(len(prefix) + 1)
    x = model.embed(torch.tensor(prefix + [root]), positions)
    assert model.fc is not None
    x[-1] = torch.cat([x[-1], feature]) @ model.fc
    causal = torch.ones(len(x), len(x), dtype=torch.bool).tril()
    for layer in range(model.config.draft_layers):
        q, k, v = model.qkv(layer, x)
        x = model.finish_block(layer, x, attention(q[None], k[None], v[None], causal[None])[0])
    return model.logits(x[-1:])


@pytest.mark.parametrize("topk", [1, 2])
def test_eagle_draft_reads_the_targets_hidden_state(eagle_model, monkeypatch, topk):
    """After prefill and after every verify, a request's feature line holds the target's last hidden
    state of the token before its root, and the draft's first step reads it through the fc."""
    engine = SpecDecoder(
        eagle_model, SpecConfig(topk=topk, num_steps=3), max_requests=1, max_context=64, device="cpu"
    )
    root_logits = []
    propose = engine._propose

    def record(buffers, logits, step):
        if step == 0:
            root_logits.append(logits.clone())
        return propose(buffers, logits, step)

    monkeypatch.setattr(engine, "_propose", record)
    request = Request([5, 17, 3, 9], 30)
    engine.prefill([request])
    accepted = []
    for _ in range(4):
        context = (request.prompt + request.output)[: request.seq_len]
        hidden = eagle_model.dense_hidden(torch.tensor([context]))[0, -1]
        torch.testing.assert_close(engine.cache.features[request.row], hidden)
        committed, root = request.seq_len, request.root
        engine._iterate([request])
        torch.testing.assert_close(root_logits[-1], _root_draft_logits(eagle_model, context, root, hidden))
        accepted.append(request.seq_len - committed)
    assert max(accepted) > 1  # the draft's tokens were accepted: the features flowed through the tree


def test_the_feature_read_changes_the_draft(eagle_model):
    """A draft whose fc ignores the hidden state proposes from other logits: the read is real."""
    blind = copy.copy(eagle_model)
    assert eagle_model.fc is not None
    blind.fc = eagle_model.fc.clone()
    blind.fc[EAGLE.hidden :] = 0
    prefix, root = [5, 17, 3, 9], 11
    feature = eagle_model.dense_hidden(torch.tensor([prefix]))[0, -1]
    seeing = _root_draft_logits(eagle_model, prefix, root, feature)
    assert not torch.allclose(seeing, _root_draft_logits(blind, prefix, root, feature))


# --------------------------------------------------------------------------------------------------
# Rejection sampling: the committed tokens are exact target samples


SMALL_VOCAB = ModelConfig(
    vocab_size=8, hidden=16, num_heads=2, num_layers=2, draft_layers=1, state_size=4, later_layer_scale=0.6
)
SAMPLES = 1500


def _renormalised(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Row by row, as the renorm ops' contract says: keep ``p >= tau`` with tau the k-th largest value
    (``top_k <= 0`` or ``>= V`` keeps all), renormalise; then keep ``p >= tau`` with tau the value at
    which the descending running sum first reaches ``top_p`` of the total, renormalise."""
    rows = []
    for row in probs.tolist():
        if 0 < top_k < len(row):
            tau = sorted(row, reverse=True)[top_k - 1]
            row = [p if p >= tau else 0.0 for p in row]
        row = [p / sum(row) for p in row]
        running, total = 0.0, sum(row)
        for tau in sorted(row, reverse=True):
            running += tau
            if running >= top_p * total:
                break
        row = [p if p >= tau else 0.0 for p in row]
        rows.append([p / sum(row) for p in row])
    return torch.tensor(rows, dtype=probs.dtype)


def _exact_marginals(
    model: TinyLM, prompt: list[int], temperature: float, top_k: int = 0, top_p: float = 1.0
) -> list[torch.Tensor]:
    """Target distributions of the 1st, 2nd and 3rd generated token (enumerating the vocabulary),
    each step's distribution renormalised by ``top_k`` and ``top_p``."""
    vocab = model.config.vocab_size

    def next_probs(prefixes: torch.Tensor) -> torch.Tensor:
        probs = (model.dense_logits(prefixes)[:, -1] / temperature).softmax(-1)
        return _renormalised(probs, top_k, top_p)

    first = next_probs(torch.tensor([prompt]))[0]
    ones = torch.arange(vocab)
    second_given = next_probs(torch.cat([torch.tensor(prompt).expand(vocab, -1), ones[:, None]], 1))
    pairs = torch.cartesian_prod(ones, ones)
    third_given = next_probs(torch.cat([torch.tensor(prompt).expand(vocab * vocab, -1), pairs], 1))
    joint_two = first[:, None] * second_given  # [t1, t2]
    third = (joint_two.flatten()[:, None] * third_given).sum(0)
    return [first, joint_two.sum(0), third]


def _chi_square_passes(counts: torch.Tensor, probs: torch.Tensor, alpha_z: float = 3.09) -> bool:
    """Pearson's test at about alpha = 1e-3 (Wilson-Hilferty critical value); cells expecting
    fewer than 5 are pooled."""
    expected = probs * counts.sum()
    small = expected < 5
    observed = torch.cat([counts[~small], counts[small].sum().view(1)])
    expected = torch.cat([expected[~small], expected[small].sum().view(1)])
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    statistic = float(((observed - expected) ** 2 / expected).sum())
    df = observed.numel() - 1
    critical = df * (1 - 2 / (9 * df) + alpha_z * math.sqrt(2 / (9 * df))) ** 3
    return statistic < critical


@pytest.mark.parametrize(("topk", "num_steps"), [(1, 2), (2, 2)], ids=["chain", "tree"])
def test_rejection_sampling_preserves_the_target_distribution(topk, num_steps):
    model = TinyLM(SMALL_VOCAB, "cpu", torch.float64)
    prompt = [1, 6, 3]
    spec = SpecConfig(topk=topk, num_steps=num_steps, sampling="rejection", temperature=1.0)
    outputs, stats, engine = run(model, spec, [prompt] * SAMPLES, 3, "cpu", seed=1234)
    assert engine.cache.leaks() == []
    # both verdicts occur: otherwise the test would not exercise acceptance and the residual
    assert 1.2 < stats.mean_accepted_length < num_steps + 0.8
    tokens = torch.tensor(outputs)  # [SAMPLES, 3]: the first by prefill, then the spec steps
    for position, exact in enumerate(_exact_marginals(model, prompt, 1.0)):
        counts = torch.bincount(tokens[:, position], minlength=SMALL_VOCAB.vocab_size).double()
        assert _chi_square_passes(counts, exact), (position, counts / SAMPLES, exact)


@pytest.mark.parametrize(("topk", "num_steps"), [(1, 2), (2, 2)], ids=["chain", "tree"])
def test_rejection_sampling_keeps_each_requests_top_k_top_p_distribution(topk, num_steps):
    """Requests alternate between two (top-k, top-p) settings; each group's tokens follow the target
    distribution renormalised by its own setting, and no token outside its kept set is ever drawn."""
    model = TinyLM(SMALL_VOCAB, "cpu", torch.float64)
    prompt, settings = [1, 6, 3], [(3, 1.0), (0, 0.6)]
    spec = SpecConfig(topk=topk, num_steps=num_steps, sampling="rejection", temperature=1.0, top_k_top_p=True)
    outputs, stats, engine = run(
        model, spec, [prompt] * (2 * SAMPLES), 3, "cpu", seed=4321,
        top_k=[k for k, _ in settings], top_p=[p for _, p in settings],
    )  # fmt: skip
    assert engine.cache.leaks() == []
    assert 1.2 < stats.mean_accepted_length < num_steps + 0.8
    for group, (top_k, top_p) in enumerate(settings):
        tokens = torch.tensor(outputs[group::2])
        for position, exact in enumerate(_exact_marginals(model, prompt, 1.0, top_k, top_p)):
            counts = torch.bincount(tokens[:, position], minlength=SMALL_VOCAB.vocab_size).double()
            assert counts[exact == 0].sum() == 0, (group, position, counts, exact)
            assert _chi_square_passes(counts, exact), (group, position, counts / SAMPLES, exact)


@pytest.mark.parametrize(("topk", "num_steps"), [(1, 3), (2, 2)], ids=["chain", "tree"])
def test_keyed_rejection_sampling_gives_a_request_its_tokens_whatever_the_batch(topk, num_steps):
    """Each request's draws keyed by its seed and positions: decoded alone or among others (which
    finish earlier, so its row moves within a shrinking batch), it gets the same tokens, and another
    seed gets other tokens."""
    model = TinyLM(SMALL_VOCAB, "cpu", torch.float32)
    spec = SpecConfig(topk=topk, num_steps=num_steps, sampling="rejection", temperature=1.0, keyed=True)
    prompts = [[1, 6, 3], [2, 2], [5, 1, 4, 4], [7]]
    seeds = [11, -3, 2**40, 11]
    together, _, engine = run(model, spec, prompts, 12, "cpu", request_seeds=seeds)
    assert engine.cache.leaks() == []
    for r, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
        alone, _, _ = run(model, spec, [prompt], 12, "cpu", seed=r + 99, request_seeds=[seed])
        assert alone[0] == together[r]
    reseeded, _, _ = run(model, spec, prompts, 12, "cpu", request_seeds=[s + 1 for s in seeds])
    assert reseeded != together


def test_keyed_draws_are_for_rejection_sampling():
    with pytest.raises(ValueError, match="keyed"):
        SpecConfig(keyed=True).check(SMALL_VOCAB.vocab_size)


def test_the_chi_square_check_has_power():
    # the check used above rejects a visibly wrong distribution at this sample size
    probs = torch.tensor([0.3, 0.3, 0.2, 0.1, 0.05, 0.05])
    skewed = torch.tensor([0.36, 0.24, 0.2, 0.1, 0.05, 0.05]) * SAMPLES
    assert _chi_square_passes(probs * SAMPLES, probs)
    assert not _chi_square_passes(skewed, probs)


# --------------------------------------------------------------------------------------------------
# Other modes


def test_simulated_acceptance_reaches_the_requested_mean(model):
    spec = SpecConfig(topk=1, num_steps=3, simulate_acc_len=2.5)
    outputs, stats, engine = run(model, spec, PROMPTS, 40, "cpu")
    assert engine.cache.leaks() == []
    assert all(len(o) == 40 for o in outputs)
    assert abs(stats.mean_accepted_length - 2.5) < 0.5


@pytest.mark.skipif(importlib.util.find_spec("xgrammar") is None, reason="xgrammar not installed")
@pytest.mark.parametrize("topk", [1, 4])
def test_grammar_constrained_decoding_is_lossless(model, topk):
    from spec_hal.demo.structured import list_grammars

    count, vocab = len(PROMPTS), model.config.vocab_size
    expected = greedy_reference(model, PROMPTS, 20, list_grammars(vocab, count))
    grammars = list_grammars(vocab, count)
    outputs, _, engine = run(model, SpecConfig(topk=topk, num_steps=3), PROMPTS, 20, "cpu", grammars)
    assert outputs == expected
    assert engine.cache.leaks() == []
    for output in outputs:  # the output is a prefix of the grammar's language
        fresh = list_grammars(vocab, 1)[0]
        for token in output:
            fresh.accept_token(token)


@pytest.mark.parametrize("sampling", ["greedy", "rejection", "keyed"])
@pytest.mark.parametrize("topk", [1, 2])
def test_step_phases_run_on_meta_tensors(topk, sampling):
    """Meta tensors have no data: a host read or a data-dependent shape in the draft or verify
    phase would fail here. That is what graph capture needs."""
    model = TinyLM(ModelConfig(), "meta", torch.float32)
    keyed = sampling == "keyed"
    spec = SpecConfig(
        topk=topk, num_steps=3, page_size=4, sampling="rejection" if keyed else sampling, keyed=keyed
    )
    engine = SpecDecoder(model, spec, max_requests=3, max_context=32, device="meta")
    buffers = engine.buffers(3)
    engine.draft_phase(buffers)
    engine.verify_phase(buffers)
    assert buffers.accept_tokens.device.type == "meta"


@pytest.fixture
def forced_capture(monkeypatch):
    """Graph capture on the CPU: the regions a device captures run with ``is_capturing`` forced True,
    where an op given no output tensor (it would allocate one) or a KVBuffers built raises. An engine
    takes its capture path (dummy capture run, then "replays" that rerun the region under capture).
    Yields the context manager that forces the state."""
    import contextlib

    from spec_hal import runtime, validation
    from spec_hal.ops import kv

    capturing, dummy_run = [False], [False]

    def is_capturing(device):
        return capturing[0]

    @contextlib.contextmanager
    def under_capture():
        capturing[0] = True
        try:
            yield
        finally:
            capturing[0] = False

    def capture_graph(fn, device):
        # The capture run reads the dummy inputs (every row is DUMMY_ROW, so slots repeat across
        # rows): a device checks no values under capture, and neither does this run.
        dummy_run[0] = True
        try:
            with under_capture():
                fn()
        finally:
            dummy_run[0] = False

        def replay():
            with under_capture():
                fn()

        return replay

    monkeypatch.setattr(validation, "is_capturing", is_capturing)  # new_output's check (imported by name)
    monkeypatch.setattr(kv, "is_capturing", is_capturing)  # KVBuffers' check (imported by name)
    monkeypatch.setattr(validation, "is_compiling", lambda: dummy_run[0])  # value checks off
    monkeypatch.setattr(runtime, "supports_graph_capture", lambda device=None: True)
    monkeypatch.setattr(runtime, "capture_graph", capture_graph)
    return under_capture


@pytest.mark.parametrize(
    ("topk", "num_steps", "page_size", "sampling", "simulate"),
    [
        (1, 3, 1, "greedy", None),
        (2, 3, 4, "greedy", None),
        (4, 3, 1, "greedy", None),
        (1, 2, 1, "rejection", None),
        (2, 3, 4, "rejection", None),
        (1, 2, 1, "keyed", None),
        (2, 3, 4, "keyed", None),
        (1, 3, 1, "greedy", 2.5),
    ],
    ids=[
        "greedy-chain", "greedy-tree", "greedy-wide-tree", "rejection-chain", "rejection-tree", "keyed-chain",
        "keyed-tree", "simulated",
    ],
)  # fmt: skip
def test_captured_phases_pass_every_output(
    model, greedy_outputs, forced_capture, topk, num_steps, page_size, sampling, simulate
):
    """The draft and verify phases under (forced) capture on the CPU: see ``forced_capture``."""
    from spec_hal import ops

    with forced_capture(), pytest.raises(ValueError, match="during graph capture"):
        ops.fast_topk(torch.ones(2, 4), 2)  # the forced state is seen: an op left to allocate raises
    keyed = sampling == "keyed"
    spec = SpecConfig(
        topk=topk, num_steps=num_steps, page_size=page_size, sampling="rejection" if keyed else sampling,
        simulate_acc_len=simulate, keyed=keyed,
    )  # fmt: skip
    max_new = 20 if simulate else MAX_NEW_TOKENS
    seeds = range(len(PROMPTS))
    outputs, stats, engine = run(
        model, spec, PROMPTS, max_new, "cpu", capture_ahead=True, request_seeds=seeds
    )
    assert engine.graphs and stats.graphs == len(PROMPTS) * (1 if simulate else 2)
    assert engine.cache.leaks() == []
    if sampling == "greedy" and simulate is None:
        assert outputs == greedy_outputs
    else:
        assert all(len(output) == max_new for output in outputs)


# --------------------------------------------------------------------------------------------------
# The speed baseline: plain greedy decoding through the same paged cache


@pytest.mark.parametrize("captured", [False, True], ids=["eager", "captured"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_plain_greedy_baseline_equals_the_reference(model, greedy_outputs, request, page_size, captured):
    if captured:  # its step under (forced) capture: every op's output must be preallocated
        request.getfixturevalue("forced_capture")
    outputs, stats, engine = run_greedy(
        model, PROMPTS, MAX_NEW_TOKENS, "cpu", page_size=page_size, capture_ahead=captured
    )
    assert outputs == greedy_outputs
    assert engine.cache.leaks() == []
    assert stats.graphs == (len(PROMPTS) if captured else 0)
    assert stats.tokens == sum(len(o) - 1 for o in outputs)  # the first token is the prefill's
    assert stats.mean_accepted_length == 1.0


def test_plain_greedy_step_runs_on_meta_tensors():
    engine = GreedyDecoder(
        TinyLM(ModelConfig(), "meta", torch.float32), max_requests=3, max_context=32, device="meta"
    )
    buffers = engine.buffers(3)
    engine.step(buffers)
    assert buffers.next_tokens.device.type == "meta"


# --------------------------------------------------------------------------------------------------
# The model's grouped-query attention


def test_grouped_query_attention_equals_attention_with_repeated_kv_heads():
    generator = torch.Generator().manual_seed(5)
    q = torch.randn(3, 2, 4, 8, generator=generator, dtype=torch.float64)  # [G, Q, heads, d]
    k, v = torch.randn(2, 3, 7, 2, 8, generator=generator, dtype=torch.float64)  # [G, L, kv heads, d]
    visible = torch.rand(3, 2, 7, generator=generator) < 0.6
    visible[:, :, 0] = True
    repeated_k, repeated_v = k.repeat_interleave(2, 2), v.repeat_interleave(2, 2)
    scores = torch.einsum("gqhd,glhd->gqhl", q, repeated_k) * 8**-0.5
    scores = scores.masked_fill(~visible[:, :, None], float("-inf"))
    expected = torch.einsum("gqhl,glhd->gqhd", scores.softmax(-1), repeated_v)
    torch.testing.assert_close(attention(q, k, v, visible), expected)


# --------------------------------------------------------------------------------------------------
# The presets and the command's output


def test_the_large_preset_is_shaped_like_a_deployment():
    large = SIZES["large"]
    config = large.model
    assert 24 <= config.num_layers <= 32 and 2048 <= config.hidden <= 4096
    assert config.draft_layers <= 2 and config.reads_features  # an EAGLE-style one- or two-layer draft
    assert config.kv_heads < config.num_heads and config.state_size == 0
    assert config.parameters() > 4e9  # several GB to read per decode step: memory-bound
    assert large.batches == (1, 4, 8)


def test_the_small_preset_accepts_often_but_not_always():
    small = SIZES["small"]
    model = TinyLM(small.model, "cpu", torch.float32)
    prompts = demo.make_prompts(8, small.prompt_lengths, small.model.vocab_size, 0)
    spec = SpecConfig(topk=2, num_steps=3)
    outputs, stats, _ = run(model, spec, prompts, small.max_new_tokens, "cpu")
    baseline, _, _ = run_greedy(model, prompts, small.max_new_tokens, "cpu")
    assert outputs == baseline
    assert 1.5 < stats.mean_accepted_length <= 0.75 * (spec.num_steps + 1)


def _scaled_down(preset: demo.Preset) -> demo.Preset:
    """The preset's structure (draft, feature read, layer scales, recurrent block) at CI size."""
    model = dataclasses.replace(
        preset.model, vocab_size=256, hidden=32, num_heads=4, num_kv_heads=2, num_layers=4,
        mlp_hidden=64, max_positions=128,
    )  # fmt: skip
    return dataclasses.replace(
        preset, model=model, batches=(1, 2), max_new_tokens=6, prompt_lengths=(3, 8), exact_tokens=5,
        reference_requests=2,
    )  # fmt: skip


def _demo_output(monkeypatch, capsys, size: str, *options: str) -> tuple[int, list[str], str]:
    monkeypatch.setitem(SIZES, size, _scaled_down(SIZES[size]))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    code = main(parser.parse_args(["--device", "cpu", "--size", size, *options]))
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


BATCH_LINE = re.compile(
    r"batch (\d+): speculative [\d.]+ tokens/s, plain greedy [\d.]+ tokens/s \(same target, same "
    r"paged cache\): speed-up \d+\.\d\dx \(mean accepted length (\d+\.\d\d)\)"
)


@pytest.mark.parametrize(
    ("size", "dtype", "exact", "captured"),
    [
        ("small", "auto", 3, False),
        ("large", "auto", 3, False),
        ("large", "bfloat16", 2, False),
        ("large", "bfloat16", 2, True),
    ],
    ids=["small", "large", "large-bfloat16", "large-bfloat16-captured"],
)
def test_a_preset_at_small_size_prints_the_log_the_checks_read(
    monkeypatch, capsys, request, size, dtype, exact, captured
):
    if captured:  # the accelerator path: every step captured (forced on the CPU) ahead of timing
        request.getfixturevalue("forced_capture")
    code, lines, _ = _demo_output(monkeypatch, capsys, size, "--dtype", dtype)
    assert code == 0, "\n".join(lines)
    assert ("(device graphs)" if captured else "(eager)") in lines[0]
    batch_lines = [line for line in lines if line.startswith("batch ")]
    matches = [BATCH_LINE.fullmatch(line) for line in batch_lines]
    assert all(matches), batch_lines
    assert [int(m.group(1)) for m in matches if m] == [1, 2]  # the batch-1 greedy line first
    lossless = [line for line in lines if "lossless" in line]
    assert len(lossless) == 1 and lossless[0].startswith(
        f"lossless: {exact}/{exact} outputs equal plain greedy"
    )
    assert "float32" in lossless[0]  # exactness is checked in float32, whatever the timed dtype
    assert any(
        line.startswith("  spec_hal ops: ") and "% of a speculative iteration" in line for line in lines
    )
    assert any("a speed-up is not expected" in line for line in lines)  # the CPU says so
    assert any(
        line.startswith("rejection sampling at batch 2: ") and "mean accepted length" in line
        for line in lines
    )
    # the keyed rejection run's requests, alone and together, in float32 whatever the timed dtype
    assert any(
        line.startswith("reproducible: 2/2 requests gave the same tokens at batch 1 and batch 2 (float32")
        for line in lines
    )
    if dtype == "bfloat16":
        assert any(
            re.search(r"bfloat16 \(the timed runs\): \d/3 outputs equal bfloat16 plain greedy", line)
            for line in lines
        )
    assert lines[-1] == "check: ok"


def test_simulated_acceptance_neither_claims_nor_denies_exactness(monkeypatch, capsys):
    options = ("--topk", "1", "--simulate-acc-len", "2.5", "--sampling", "greedy")
    code, lines, _ = _demo_output(monkeypatch, capsys, "small", *options)
    assert code == 0
    assert not any("lossless" in line for line in lines)
    assert any("exactness not checked: simulated acceptance" in line for line in lines)
    assert any("simulated: drawn with the requested mean" in line for line in lines)


def test_grammar_mode_without_xgrammar_exits_non_zero(monkeypatch, capsys):
    from spec_hal.demo import structured

    def missing(vocab_size, count):
        raise ImportError("the grammar mode needs xgrammar: pip install spec-hal[grammar]")

    monkeypatch.setattr(structured, "list_grammars", missing)
    code, lines, err = _demo_output(monkeypatch, capsys, "small", "--grammar")
    assert code == 2 and lines == []  # refused before running anything
    assert "--grammar" in err and "pip install spec-hal[grammar]" in err


@pytest.mark.parametrize(
    "options",
    [
        ("--temperature", "0"),
        ("--top-p", "0.5,1.5"),
        ("--batches", "2,0"),
        ("--topk", "1", "--draft-tokens", "7"),
    ],
    ids=str,
)
def test_bad_options_exit_with_one_line(monkeypatch, capsys, options):
    code, lines, err = _demo_output(monkeypatch, capsys, "small", *options)
    assert code == 2 and lines == []
    assert err.count("\n") == 1 and err.startswith("spec-hal demo: error: ")


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (("--temperature", "nan"), "--temperature"),
        (("--simulate-acc-len", "nan"), "--simulate-acc-len"),
        (("--simulate-acc-len", "inf"), "--simulate-acc-len"),
        (("--max-new-tokens", "200"), "--max-new-tokens 200"),
        (("--steps", "300"), "--steps 300"),
        (("--topk", "0"), "--topk"),
        (("--page-size", "0"), "--page-size"),
        (
            ("--topk", "1", "--draft-tokens", "7"),
            "--draft-tokens: expected 4 (a chain) for --topk 1 --steps 3, got 7",
        ),
        (
            ("--topk", "2", "--draft-tokens", "50"),
            "--draft-tokens: expected a value in [2, 11] for --topk 2 --steps 3",
        ),
    ],
    ids=str,
)
def test_bad_option_values_name_the_flag_in_one_line(monkeypatch, capsys, options, flag):
    code, lines, err = _demo_output(monkeypatch, capsys, "small", *options)
    assert (code, lines) == (2, [])
    assert err.count("\n") == 1 and err.startswith("spec-hal demo: error: ") and flag in err, err


def test_a_speed_up_below_one_is_explained():
    on_host = types.SimpleNamespace(device=torch.device("cpu"), size="small")
    small_on_device = types.SimpleNamespace(device=torch.device("cuda"), size="small")
    assert "CPU" in demo._why_slow(on_host)
    assert "too little per forward" in demo._why_slow(small_on_device)


# --------------------------------------------------------------------------------------------------
# The profile of one iteration


def test_the_profile_counts_the_spec_hal_ops_of_one_iteration(eagle_model):
    engine = SpecDecoder(
        eagle_model, SpecConfig(topk=2, num_steps=3, use_graphs=False), max_requests=3, max_context=40,
        device="cpu",
    )  # fmt: skip
    requests = [Request(prompt, 20) for prompt in PROMPTS]
    result = profile_iteration(engine, requests)
    assert result.clock == "host"  # no device clock on the CPU
    assert result.op_calls >= 10  # draft: 2 + per step 2-3, tree: 2, verify: 4 and more
    assert 0 < result.ops_us < result.iteration_us
    assert engine.ops is ops and engine.cache.ops is ops  # the ranges are gone again
    assert engine.cache.leaks() == []  # the profiled requests ended and gave their KV back


def test_the_profile_writes_none_of_the_profilers_marks_to_stderr(eagle_model, capfd):
    engine = SpecDecoder(
        eagle_model, SpecConfig(topk=1, num_steps=2, use_graphs=False), max_requests=1, max_context=40,
        device="cpu",
    )  # fmt: skip
    profile_iteration(engine, [Request(PROMPTS[0], 10)])
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "USDT:" not in err, err


def test_held_stderr_gives_back_every_line_but_the_profilers_marks(capfd):
    from spec_hal.demo.profile import _without_profiler_marks

    with _without_profiler_marks():
        os.write(
            2, b"USDT:2026-12-04 23:07:38 13523:13523 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
        )
        os.write(2, b"a warning of the iteration\n")
    assert capfd.readouterr().err == "a warning of the iteration\n"


def test_a_run_too_short_to_profile_says_so(monkeypatch, capsys):
    code, lines, _ = _demo_output(
        monkeypatch, capsys, "small", "--sampling", "greedy", "--max-new-tokens", "1"
    )
    assert code == 0, lines
    (profile,) = [line for line in lines if line.startswith("  spec_hal ops: ")]
    assert "share not measured (the requests end within one iteration" in profile, profile


def test_ranged_ops_wrap_ops_and_pass_everything_else():
    ranged = RangedOps()
    assert ranged.KVBuffers is ops.KVBuffers and ranged.QLEN_ONLY == ops.QLEN_ONLY
    assert ranged.fast_topk is not ops.fast_topk and ranged.fast_topk.__name__ == "fast_topk"
    _, index = ranged.fast_topk(torch.tensor([[0.1, 0.7, 0.2]]), 1)
    assert index.tolist() == [[1]]
    assert not hasattr(ranged, "no_such_op")


# --------------------------------------------------------------------------------------------------
# The EAGLE-style draft and per-request top-k / top-p inside captured and meta phases


@pytest.mark.parametrize("sampling", ["greedy", "rejection"])
@pytest.mark.parametrize("topk", [1, 2])
def test_eagle_phases_run_on_meta_tensors(topk, sampling):
    model = TinyLM(EAGLE, "meta", torch.bfloat16)
    spec = SpecConfig(
        topk=topk, num_steps=3, sampling=sampling, top_k_top_p=sampling == "rejection", page_size=2
    )
    engine = SpecDecoder(model, spec, max_requests=2, max_context=32, device="meta")
    buffers = engine.buffers(2)
    engine.draft_phase(buffers)
    engine.verify_phase(buffers)
    assert buffers.accept_tokens.device.type == "meta"


@pytest.mark.parametrize(("topk", "sampling"), [(2, "greedy"), (1, "rejection"), (2, "rejection")])
def test_captured_eagle_phases_pass_every_output(eagle_model, forced_capture, topk, sampling):
    spec = SpecConfig(topk=topk, num_steps=3, sampling=sampling, top_k_top_p=sampling == "rejection")
    outputs, stats, engine = run(
        eagle_model, spec, PROMPTS, MAX_NEW_TOKENS, "cpu", capture_ahead=True, top_k=(0, 5), top_p=(0.9,)
    )
    assert engine.graphs and stats.graphs == len(PROMPTS) * 2
    assert engine.cache.leaks() == []
    if sampling == "greedy":
        assert outputs == greedy_reference(eagle_model, PROMPTS, MAX_NEW_TOKENS)


@pytest.mark.parametrize("greedy", [False, True], ids=["speculative", "plain-greedy"])
def test_iterations_launch_no_op_outside_their_phases(model, greedy):
    """The whole request is reserved at admission: between the captured phases an iteration calls
    no spec_hal op (an eager launch there would be timed, and may compile)."""
    if greedy:
        engine: SpecDecoder = GreedyDecoder(model, max_requests=3, max_context=40, device="cpu")
    else:
        engine = SpecDecoder(
            model, SpecConfig(topk=2, num_steps=3), max_requests=3, max_context=40, device="cpu"
        )
    calls = []
    counting = types.SimpleNamespace(
        KVBuffers=ops.KVBuffers,
        assign_req_to_token_pool=lambda *args: calls.append(args) or ops.assign_req_to_token_pool(*args),
    )
    engine.cache.ops = counting
    requests = [Request(prompt, MAX_NEW_TOKENS) for prompt in PROMPTS]
    engine.prefill(requests)
    assert len(calls) == 1  # the admission
    active = requests
    while active:
        active = engine.advance(active)
    assert len(calls) == 1
    assert [r.output for r in requests] == greedy_reference(model, PROMPTS, MAX_NEW_TOKENS)
    assert engine.cache.leaks() == []
