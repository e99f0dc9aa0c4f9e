"""``spec-hal demo``: an end-to-end speculative-decoding loop built only from ``spec_hal.ops``.

A tiny fixed-seed transformer (``model.py``) decodes a batch of prompts through a paged KV cache
(``cache.py``) with EAGLE-style tree drafts or chains (``loop.py``), then once more by plain greedy
decoding through the same cache (the speed baseline); both outputs are checked against a greedy
recompute of the same model, and the cache against leaks. ``docs/migration.md`` walks
through the loop op by op.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from .. import registry, runtime
from .loop import GreedyDecoder, Request, SpecConfig, SpecDecoder, Stats
from .model import ModelConfig, TinyLM, greedy_reference

__all__ = [
    "ModelConfig",
    "TinyLM",
    "SpecConfig",
    "SpecDecoder",
    "GreedyDecoder",
    "Request",
    "add_arguments",
    "main",
]

#: (model, requests, max new tokens, prompt lengths) per size; the CPU default is "small"
SIZES = {
    "small": (
        ModelConfig(vocab_size=256, hidden=64, num_heads=4, num_layers=4, draft_layers=3),
        4,
        32,
        (4, 24),
    ),
    "large": (
        ModelConfig(vocab_size=4096, hidden=512, num_heads=8, num_layers=8, draft_layers=6, state_size=32),
        32,
        128,
        (16, 128),
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="spec_hal device name or torch device (default: the detected one)")
    parser.add_argument("--topk", type=int, default=2, help="children per draft node (1: chain drafts)")
    parser.add_argument("--steps", type=int, default=3, help="draft depth S")
    parser.add_argument(
        "--draft-tokens", type=int, help="verified nodes per request D (default from topk/steps)"
    )
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--sampling", choices=("greedy", "rejection"), default="greedy")
    parser.add_argument("--temperature", type=float, default=1.0, help="rejection sampling only")
    parser.add_argument("--requests", type=int, help="batch size (default: by --size)")
    parser.add_argument("--max-new-tokens", type=int, help="per request (default: by --size)")
    parser.add_argument("--size", choices=tuple(SIZES), help="model and batch preset (default: small on cpu)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument(
        "--simulate-acc-len", type=float, metavar="MEAN", help="benchmark: simulated acceptance"
    )
    parser.add_argument("--grammar", action="store_true", help="constrain output by an xgrammar EBNF grammar")
    parser.add_argument("--no-graphs", action="store_true", help="never capture the step into device graphs")
    parser.add_argument("--seed", type=int, default=0)


def _torch_device(name: str | None) -> torch.device:
    if name is None:
        return torch.device(registry.current_device().device_type)
    try:
        return torch.device(registry.device(name).device_type)
    except Exception:  # not a spec_hal device name: a torch device string ("cuda:1")
        return torch.device(name)


def make_prompts(count: int, lengths: tuple[int, int], vocab_size: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(rng.randint(*lengths))] for _ in range(count)]


def run(
    model: TinyLM,
    spec: SpecConfig,
    prompts: list[list[int]],
    max_new_tokens: int,
    device: torch.device | str,
    grammars: list | None = None,
    seed: int = 0,
    capture_ahead: bool = False,
) -> tuple[list[list[int]], Stats, SpecDecoder]:
    """Decode ``prompts`` speculatively; returns (outputs, stats, the engine for inspection)."""
    torch.manual_seed(seed)
    longest = max(len(p) for p in prompts) + max_new_tokens
    engine = SpecDecoder(
        model, spec, max_requests=len(prompts), max_context=longest, device=device, seed=seed
    )
    return _decode(engine, prompts, max_new_tokens, grammars, capture_ahead), engine.stats, engine


def run_greedy(
    model: TinyLM,
    prompts: list[list[int]],
    max_new_tokens: int,
    device: torch.device | str,
    grammars: list | None = None,
    page_size: int = 1,
    use_graphs: bool = True,
    capture_ahead: bool = False,
) -> tuple[list[list[int]], Stats, GreedyDecoder]:
    """Decode ``prompts`` by plain greedy decoding through the paged cache (the speed baseline)."""
    longest = max(len(p) for p in prompts) + max_new_tokens
    engine = GreedyDecoder(
        model, page_size=page_size, use_graphs=use_graphs, max_requests=len(prompts),
        max_context=longest, device=device,
    )  # fmt: skip
    return _decode(engine, prompts, max_new_tokens, grammars, capture_ahead), engine.stats, engine


def _decode(
    engine: SpecDecoder,
    prompts: list[list[int]],
    max_new_tokens: int,
    grammars: list | None,
    capture_ahead: bool,
) -> list[list[int]]:
    if capture_ahead:
        engine.prepare(range(1, len(prompts) + 1))
    requests = [
        Request(prompt, max_new_tokens, None if grammars is None else grammars[i])
        for i, prompt in enumerate(prompts)
    ]
    engine.generate(requests)
    return [r.output for r in requests]


def main(args: argparse.Namespace) -> int:
    device = _torch_device(args.device)
    size = args.size or ("small" if device.type == "cpu" else "large")
    config, requests, max_new_tokens, prompt_lengths = SIZES[size]
    requests = args.requests or requests
    max_new_tokens = args.max_new_tokens or max_new_tokens
    dtype = getattr(torch, args.dtype)
    model = TinyLM(config, device, dtype)
    spec = SpecConfig(
        topk=args.topk,
        num_steps=args.steps,
        draft_token_num=args.draft_tokens,
        page_size=args.page_size,
        sampling=args.sampling,
        temperature=args.temperature,
        simulate_acc_len=args.simulate_acc_len,
        use_graphs=not args.no_graphs,
    )
    prompts = make_prompts(requests, prompt_lengths, config.vocab_size, args.seed)
    grammars = baseline_grammars = reference_grammars = None
    if args.grammar:
        from .structured import list_grammars

        try:
            grammars = list_grammars(config.vocab_size, requests)
            baseline_grammars = list_grammars(config.vocab_size, requests)
            reference_grammars = list_grammars(config.vocab_size, requests)
        except ImportError as error:
            print(f"spec-hal demo: --grammar skipped: {error}")
            return 0
    graphs = spec.use_graphs and runtime.supports_graph_capture(device)
    print(
        f"spec-hal demo on {device} ({'device graphs' if graphs else 'eager'}, {args.dtype}): "
        f"topk {spec.topk}, steps {spec.num_steps}, draft tokens {spec.num_nodes}, page size "
        f"{spec.page_size}, sampling {spec.sampling}{', grammar' if args.grammar else ''}, "
        f"{requests} requests x {max_new_tokens} tokens"
    )
    print(
        f"  model ({size}): vocab {config.vocab_size}, hidden {config.hidden}, {config.num_layers} layers "
        f"+ recurrent state {config.state_size}; draft = first {config.draft_layers} layers"
    )
    outputs, stats, engine = run(
        model, spec, prompts, max_new_tokens, device, grammars, args.seed, capture_ahead=graphs
    )
    print(
        f"  {stats.tokens} tokens in {stats.decode_seconds:.3f} s: {stats.tokens_per_second:.1f} tokens/s, "
        f"mean accepted length {stats.mean_accepted_length:.2f} (tokens per verify, bonus included)"
        + (f", {stats.graphs} graphs captured" if graphs else "")
    )
    baseline, baseline_stats, baseline_engine = run_greedy(
        model, prompts, max_new_tokens, device, baseline_grammars, spec.page_size, spec.use_graphs,
        capture_ahead=graphs,
    )  # fmt: skip
    speed = baseline_stats.tokens_per_second
    print(
        f"  plain greedy (same model, paged cache): {speed:.1f} tokens/s; speculative speed-up "
        f"{stats.tokens_per_second / speed if speed else float('nan'):.2f}x"
    )
    started = time.perf_counter()
    expected = greedy_reference(model, prompts, max_new_tokens, reference_grammars)
    recompute = time.perf_counter() - started
    problems, verdict = [], []
    if spec.sampling == "greedy" and spec.simulate_acc_len is None:
        same = sum(o == e for o, e in zip(outputs, expected, strict=True))
        verdict.append(f"lossless: {same}/{requests} outputs equal the greedy reference")
        if same != requests:
            problems.append(_first_difference(model, prompts, outputs, expected))
    else:
        verdict.append("losslessness not checked here (sampling: see tests/test_demo.py)")
    same = sum(o == e for o, e in zip(baseline, expected, strict=True))
    verdict.append(
        f"plain greedy {same}/{requests} equal (reference: full recompute, no cache, {recompute:.1f} s)"
    )
    if same != requests:
        problems.append("plain greedy " + _first_difference(model, prompts, baseline, expected))
    leaks = engine.cache.leaks() + baseline_engine.cache.leaks()
    problems += leaks
    verdict.append("no KV leak" if not leaks else "LEAK")
    print("  check: " + "; ".join(verdict) + (" -- FAILED: " + "; ".join(problems) if problems else " -- ok"))
    return 1 if problems else 0


def _first_difference(model: TinyLM, prompts: list, outputs: list, expected: list) -> str:
    """Where speculative and plain greedy output first differ, with the target's top-2 logit gap
    there (a gap near 0 is a floating-point tie, not a logic error)."""
    for r, (got, want) in enumerate(zip(outputs, expected, strict=True)):
        for i, (a, b) in enumerate(zip(got, want, strict=False)):
            if a != b:
                context = torch.tensor([prompts[r] + want[:i]], device=model.embedding.device)
                top2 = model.dense_logits(context)[0, -1].topk(2).values
                gap = float(top2[0] - top2[1])
                return f"request {r} token {i}: got {a}, greedy {b} (top-2 logit gap {gap:.2e})"
        if len(got) != len(want):
            return f"request {r}: {len(got)} tokens, greedy {len(want)}"
    return "outputs differ"
