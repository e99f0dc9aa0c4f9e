"""The demo engine (spec_hal/demo/) as the strongest test of the ops: they must work together.

Greedy speculative decoding must reproduce plain greedy decoding token for token (every topk, steps
and page size of the grid), rejection sampling must preserve the target distribution, the plain
greedy speed baseline must decode exactly like the reference, and the paged cache must get every
slot and row back.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import math

import pytest
import torch

from spec_hal.demo import (
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
from spec_hal.demo.model import greedy_reference

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
    path: A3/A4's per-branch KV plus move_kv_cache's re-gather follow select_top_k_tokens' choices."""
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
    engine._prefill([request])
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
# Rejection sampling: the committed tokens are exact target samples


SMALL_VOCAB = ModelConfig(
    vocab_size=8, hidden=16, num_heads=2, num_layers=2, draft_layers=1, state_size=4, later_layer_scale=0.6
)
SAMPLES = 1500


def _exact_marginals(model: TinyLM, prompt: list[int], temperature: float) -> list[torch.Tensor]:
    """Target distributions of the 1st, 2nd and 3rd generated token (enumerating the vocabulary)."""
    vocab = model.config.vocab_size

    def next_probs(prefixes: torch.Tensor) -> torch.Tensor:
        return (model.dense_logits(prefixes)[:, -1] / temperature).softmax(-1)

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


@pytest.mark.parametrize("sampling", ["greedy", "rejection"])
@pytest.mark.parametrize("topk", [1, 2])
def test_step_phases_run_on_meta_tensors(topk, sampling):
    """Meta tensors have no data: a host read or a data-dependent shape in the draft or verify
    phase would fail here. That is what graph capture needs."""
    model = TinyLM(ModelConfig(), "meta", torch.float32)
    spec = SpecConfig(topk=topk, num_steps=3, page_size=4, sampling=sampling)
    engine = SpecDecoder(model, spec, max_requests=3, max_context=32, device="meta")
    buffers = engine.buffers(3)
    engine.draft_phase(buffers)
    engine.verify_phase(buffers)
    assert buffers.accept_tokens.device.type == "meta"


@pytest.fixture
def forced_capture(monkeypatch):
    """Graph capture on the CPU: the regions a device captures run with ``is_capturing`` forced True,
    where an op given no output tensor (spec §P rule (b)) or a KVBuffers built raises. An engine
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

    monkeypatch.setattr(runtime, "is_capturing", is_capturing)  # new_output imports it per call
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
        (1, 3, 1, "greedy", 2.5),
    ],
    ids=["greedy-chain", "greedy-tree", "greedy-wide-tree", "rejection-chain", "rejection-tree", "simulated"],
)
def test_captured_phases_pass_every_output(
    model, greedy_outputs, forced_capture, topk, num_steps, page_size, sampling, simulate
):
    """The draft and verify phases under (forced) capture on the CPU: see ``forced_capture``."""
    from spec_hal import ops

    with forced_capture(), pytest.raises(ValueError, match="during graph capture"):
        ops.fast_topk(torch.ones(2, 4), 2)  # the forced state is seen: an op left to allocate raises
    spec = SpecConfig(
        topk=topk, num_steps=num_steps, page_size=page_size, sampling=sampling, simulate_acc_len=simulate
    )
    max_new = 20 if simulate else MAX_NEW_TOKENS
    outputs, stats, engine = run(model, spec, PROMPTS, max_new, "cpu", capture_ahead=True)
    assert engine.graphs and stats.graphs == len(PROMPTS) * (1 if simulate else 2)
    assert engine.cache.leaks() == []
    if sampling == "greedy" and simulate is None:
        assert outputs == greedy_outputs
    else:
        assert all(len(output) == max_new for output in outputs)


def test_cli_main_prints_the_check_line(capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--device", "cpu", "--requests", "2", "--max-new-tokens", "8", "--page-size", "4"]
    )
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "tokens/s" in printed and "mean accepted length" in printed
    assert "lossless: 2/2" in printed and "no KV leak" in printed
    assert "plain greedy (same model, paged cache):" in printed and "speculative speed-up" in printed
    assert "plain greedy 2/2 equal" in printed


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
