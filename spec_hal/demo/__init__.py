"""``spec-hal demo``: an end-to-end speculative-decoding loop built only from ``spec_hal.ops``.

A fixed-seed transformer and its EAGLE-style draft (``model.py``) decode batches of prompts through a
paged KV cache (``cache.py``) with tree drafts or chains (``loop.py``); the same prompts are decoded
once more by plain greedy decoding of the same target through the same cache, the speed baseline.
Two presets: ``large``, shaped like a deployment (a memory-bound target, a one-layer draft; the
default on accelerators), and ``small`` (CPU and CI: quick, no speed-up expected). The demo prints,
per batch size, speculative against plain greedy tokens/s with the mean accepted length; the share
of a speculative iteration's device time spent in spec_hal ops (``profile.py``); exactness in
float32 (greedy speculative output equals plain greedy output, and plain greedy equals a full
recompute without cache); the timed low-precision run's agreement with its own plain greedy; a
rejection-sampling run with per-request top-k and top-p; and that every KV page came back.
``docs/migration.md`` walks through the loop op by op.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .. import registry, runtime
from .loop import GreedyDecoder, Request, SpecConfig, SpecDecoder, Stats
from .model import ModelConfig, TinyLM, greedy_reference
from .profile import IterationProfile, profile_iteration

__all__ = [
    "ModelConfig",
    "TinyLM",
    "SpecConfig",
    "SpecDecoder",
    "GreedyDecoder",
    "Request",
    "Preset",
    "SIZES",
    "add_arguments",
    "main",
    "run",
    "run_greedy",
]

#: the largest share of the top logit by which two tokens' logits may differ for a low-precision
#: mismatch to count as a near-tie (verify and one-token decoding reduce in different orders)
NEAR_TIE = 2**-6


@dataclass(frozen=True)
class Preset:
    """A model and the workload the demo runs on it."""

    model: ModelConfig
    batches: tuple[int, ...]  # one timed line per batch size
    max_new_tokens: int
    prompt_lengths: tuple[int, int]
    exact_tokens: int  # new tokens per request of the exactness run, when it is a run of its own
    reference_requests: int  # how many plain greedy outputs a full recompute checks
    what: str  # why the preset is shaped so (printed)


# fmt: off
SIZES = {
    "small": Preset(
        ModelConfig(
            vocab_size=512, hidden=64, num_heads=4, num_kv_heads=2, num_layers=6, draft_layers=1,
            state_size=8, later_layer_scale=0.3, draft_feature_scale=0.02, max_positions=256,
        ),
        batches=(1, 4, 8), max_new_tokens=24, prompt_lengths=(4, 24), exact_tokens=24,
        reference_requests=8,
        what="a tiny model for the CPU and CI: it checks the loop, not the speed",
    ),
    "large": Preset(
        ModelConfig(
            vocab_size=32000, hidden=4096, num_heads=32, num_kv_heads=8, num_layers=32, draft_layers=1,
            mlp_hidden=14336, state_size=0, later_layer_scale=0.05, draft_feature_scale=0.02,
            max_positions=512,
        ),
        batches=(1, 4, 8), max_new_tokens=128, prompt_lengths=(16, 64), exact_tokens=64,
        reference_requests=1,
        what="shaped like a deployment: a decode step reads every layer's weights, so it is memory-bound",
    ),
}
# fmt: on


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="spec_hal device name or torch device (default: the detected one)")
    parser.add_argument(
        "--size",
        choices=tuple(SIZES),
        help="model and workload preset (default: small on the CPU, large elsewhere)",
    )
    parser.add_argument("--topk", type=int, default=2, help="children per draft node (1: chain drafts)")
    parser.add_argument("--steps", type=int, default=3, help="draft depth S")
    parser.add_argument(
        "--draft-tokens", type=int, help="verified nodes per request D (default from topk/steps)"
    )
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument(
        "--sampling",
        choices=("both", "greedy", "rejection"),
        default="both",
        help="greedy: the timed greedy-verify runs and the exactness check; rejection: the "
        "rejection-sampling run; both (default): all of them",
    )
    parser.add_argument("--temperature", type=float, default=0.8, help="rejection sampling (> 0)")
    for flag, kind, default, what in (
        ("--top-k", int, (0, 20, 50, 100), "top-k (0 keeps every token)"),
        ("--top-p", float, (1.0, 0.9, 0.95, 0.8), "top-p in (0, 1]"),
    ):
        parser.add_argument(
            flag,
            type=_numbers(kind),
            default=default,
            metavar="LIST",
            help=f"rejection sampling: per-request {what}, comma-separated, cycled over the requests "
            f"(default {','.join(map(str, default))})",
        )
    parser.add_argument(
        "--batches",
        type=_numbers(int),
        metavar="LIST",
        help="batch sizes, comma-separated (default: by --size)",
    )
    parser.add_argument("--requests", type=int, help="a single batch size (instead of --batches)")
    parser.add_argument("--max-new-tokens", type=int, help="per request (default: by --size)")
    parser.add_argument(
        "--dtype",
        choices=("auto", "float32", "float64", "bfloat16", "float16"),
        default="auto",
        help="dtype of the timed runs (auto: bfloat16 on accelerators, float32 on the CPU); "
        "exactness is always checked in float32 (float64 with --dtype float64)",
    )
    parser.add_argument(
        "--simulate-acc-len", type=float, metavar="MEAN", help="benchmark: simulated acceptance"
    )
    parser.add_argument("--grammar", action="store_true", help="constrain output by an xgrammar EBNF grammar")
    parser.add_argument("--no-graphs", action="store_true", help="never capture the step into device graphs")
    parser.add_argument("--seed", type=int, default=0)


def _numbers(kind: type) -> Callable[[str], tuple]:
    """An argparse type: comma-separated numbers of ``kind``."""

    def parse(text: str) -> tuple:
        try:
            return tuple(kind(part) for part in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None

    return parse


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
    top_k: Sequence[int] = (0,),
    top_p: Sequence[float] = (1.0,),
    request_seeds: Sequence[int] = (),
) -> tuple[list[list[int]], Stats, SpecDecoder]:
    """Decode ``prompts`` speculatively; returns (outputs, stats, the engine for inspection).
    ``top_k`` and ``top_p`` are cycled over the requests (rejection sampling with
    ``spec.top_k_top_p``); ``request_seeds`` gives each request its seed (``spec.keyed``)."""
    torch.manual_seed(seed)
    longest = max(len(p) for p in prompts) + max_new_tokens
    engine = SpecDecoder(
        model, spec, max_requests=len(prompts), max_context=longest, device=device, seed=seed
    )
    requests = _requests(prompts, max_new_tokens, grammars, top_k, top_p)
    for request, request_seed in zip(requests, request_seeds, strict=False):
        request.seed = request_seed
    return _decode(engine, requests, capture_ahead), engine.stats, engine


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
    requests = _requests(prompts, max_new_tokens, grammars, (0,), (1.0,))
    return _decode(engine, requests, capture_ahead), engine.stats, engine


def _requests(
    prompts: list[list[int]],
    max_new_tokens: int,
    grammars: list | None,
    top_k: Sequence[int],
    top_p: Sequence[float],
) -> list[Request]:
    return [
        Request(
            prompt,
            max_new_tokens,
            None if grammars is None else grammars[i],
            top_k=top_k[i % len(top_k)],
            top_p=top_p[i % len(top_p)],
        )
        for i, prompt in enumerate(prompts)
    ]


def _decode(engine: SpecDecoder, requests: list[Request], capture_ahead: bool) -> list[list[int]]:
    if capture_ahead:
        engine.prepare(range(1, len(requests) + 1))
    engine.generate(requests)
    return [r.output for r in requests]


# --------------------------------------------------------------------------------------------------
# The command


@dataclass
class _Setup:
    """What one ``spec-hal demo`` invocation runs, resolved from its arguments."""

    device: torch.device
    size: str
    preset: Preset
    dtype: torch.dtype
    exact_dtype: torch.dtype
    spec: SpecConfig
    batches: tuple[int, ...]
    max_new_tokens: int
    graphs: bool
    grammars: Callable[[int], list] | None  # fresh grammars for n requests, or None

    @property
    def largest(self) -> int:
        return max(self.batches)


def main(args: argparse.Namespace) -> int:
    problem = _argument_problem(args)
    if problem:
        print(f"spec-hal demo: error: {problem}", file=sys.stderr)
        return 2
    try:
        setup = _setup(args)
    except ValueError as error:  # a draft shape SpecConfig refuses (--topk, --steps, --draft-tokens)
        print(f"spec-hal demo: error: {error}", file=sys.stderr)
        return 2
    if args.grammar:
        from .structured import list_grammars

        vocab = setup.preset.model.vocab_size
        try:
            list_grammars(vocab, 1)
        except ImportError as error:
            print(f"spec-hal demo: error: --grammar: {error}", file=sys.stderr)
            return 2
        setup.grammars = lambda count: list_grammars(vocab, count)
    _print_header(setup, args)
    problems: list[str] = []
    timed_model = TinyLM(setup.preset.model, setup.device, setup.dtype)
    if args.sampling in ("both", "greedy"):
        timed = _timed_batches(setup, timed_model, args.seed, problems)
        _print_profile(setup, timed_model, args.seed)
        if setup.spec.simulate_acc_len is not None:
            print("  exactness not checked: simulated acceptance replaces the verify result (benchmark mode)")
        elif setup.dtype == setup.exact_dtype:
            _exactness(setup, timed_model, timed, problems)
        else:
            _agreement(setup, timed_model, timed, args.seed)
            del timed
            exact_model = TinyLM(setup.preset.model, setup.device, setup.exact_dtype)
            _exactness(setup, exact_model, _exact_run(setup, exact_model, args.seed, problems), problems)
            del exact_model
    if args.sampling in ("both", "rejection"):
        _rejection_run(setup, timed_model, args, problems)
        if setup.dtype == setup.exact_dtype:
            _reproducibility(setup, timed_model, args, problems)
        else:
            _reproducibility(
                setup, TinyLM(setup.preset.model, setup.device, setup.exact_dtype), args, problems
            )
    print("check: " + ("ok" if not problems else "FAILED: " + "; ".join(problems)))
    return 1 if problems else 0


def _argument_problem(args: argparse.Namespace) -> str | None:
    if not (0 < args.temperature < math.inf):  # NaN fails too
        return f"--temperature: expected a finite value > 0, got {args.temperature}"
    if args.simulate_acc_len is not None and not math.isfinite(args.simulate_acc_len):
        return f"--simulate-acc-len: expected a finite number, got {args.simulate_acc_len}"
    for flag, value in (("--topk", args.topk), ("--steps", args.steps), ("--page-size", args.page_size)):
        if value < 1:
            return f"{flag}: expected a value >= 1, got {value}"
    if args.draft_tokens is not None:
        fewest, most = SpecConfig(topk=args.topk, num_steps=args.steps).node_range()
        if not fewest <= args.draft_tokens <= most:
            shape = f"--topk {args.topk} --steps {args.steps}"
            wanted = f"{fewest} (a chain)" if fewest == most else f"a value in [{fewest}, {most}]"
            return f"--draft-tokens: expected {wanted} for {shape}, got {args.draft_tokens}"
    if any(not 0 < p <= 1 for p in args.top_p):
        return f"--top-p: expected values in (0, 1], got {','.join(map(str, args.top_p))}"
    batches = (args.requests,) if args.requests is not None else args.batches or (1,)
    if any(b < 1 for b in batches):
        return f"--batches/--requests: expected batch sizes >= 1, got {','.join(map(str, batches))}"
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        return f"--max-new-tokens: expected a value >= 1, got {args.max_new_tokens}"
    return None


def _setup(args: argparse.Namespace) -> _Setup:
    device = _torch_device(args.device)
    on_host = device.type == "cpu"
    size = args.size or ("small" if on_host else "large")
    preset = SIZES[size]
    if args.dtype == "auto":
        dtype = torch.float32 if on_host else torch.bfloat16
    else:
        dtype = getattr(torch, args.dtype)
    spec = SpecConfig(
        topk=args.topk,
        num_steps=args.steps,
        draft_token_num=args.draft_tokens,
        page_size=args.page_size,
        simulate_acc_len=args.simulate_acc_len,
        use_graphs=not args.no_graphs,
    )
    spec.check(preset.model.vocab_size)
    max_new_tokens = args.max_new_tokens or preset.max_new_tokens
    _check_positions(size, preset, max_new_tokens, spec.num_steps)
    if args.requests is not None:
        batches: tuple[int, ...] = (args.requests,)
    else:
        batches = tuple(args.batches or preset.batches)
    return _Setup(
        device=device,
        size=size,
        preset=preset,
        dtype=dtype,
        exact_dtype=torch.float64 if dtype == torch.float64 else torch.float32,
        spec=spec,
        batches=batches,
        max_new_tokens=max_new_tokens,
        graphs=spec.use_graphs and runtime.supports_graph_capture(device),
        grammars=None,
    )


def _check_positions(size: str, preset: Preset, max_new_tokens: int, num_steps: int) -> None:
    """The longest prompt, its new tokens and a draft past the last of them must fit the model's
    position table (a ValueError naming the flags, not an IndexError deep in the model)."""
    prompt = preset.prompt_lengths[1]
    room = preset.model.max_positions - prompt - 1
    if max_new_tokens + num_steps > room:
        raise ValueError(
            f"--max-new-tokens {max_new_tokens} with --steps {num_steps}: the {size} preset's model has "
            f"{preset.model.max_positions} positions, prompts of up to {prompt} tokens leave "
            f"--max-new-tokens + --steps <= {room}"
        )


def _count(number: float) -> str:
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if number >= scale:
            return f"{number / scale:.2f} {unit}"
    return f"{number:.0f} "


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _print_header(setup: _Setup, args: argparse.Namespace) -> None:
    spec, config, preset = setup.spec, setup.preset.model, setup.preset
    print(
        f"spec-hal demo on {setup.device} ({'device graphs' if setup.graphs else 'eager'}): "
        f"topk {spec.topk}, steps {spec.num_steps}, draft tokens {spec.num_nodes}, page size "
        f"{spec.page_size}{', grammar' if args.grammar else ''}"
        + (f", simulated acceptance {spec.simulate_acc_len}" if spec.simulate_acc_len is not None else "")
    )
    weights = config.parameters() * torch.empty((), dtype=setup.dtype).element_size()
    kv = f"{config.num_heads} heads" + (
        f" ({config.kv_heads} KV heads)" if config.kv_heads != config.num_heads else ""
    )
    print(
        f"  target ({setup.size} preset, {preset.what}): {config.num_layers} layers, hidden "
        f"{config.hidden}, {kv}, MLP {config.mlp}, vocab {config.vocab_size}"
        + (f", a recurrent block (state {config.state_size})" if config.state_size else "")
        + f"; {_count(config.parameters())} parameters, {_count(weights)}B in {_dtype_name(setup.dtype)}"
    )
    later = config.num_layers - config.draft_layers
    layers = "layer" if config.draft_layers == 1 else "layers"
    reads = (
        "; reads the target's last hidden state through an fc (EAGLE-style)" if config.reads_features else ""
    )
    print(
        f"  draft: {config.draft_layers} {layers}; shares the target's embedding, final norm and LM head"
        + reads
    )
    fc = (
        f"; its fc passes the token embedding through and adds the hidden state at scale "
        f"{config.draft_feature_scale} (random: it carries the read's cost, not a learned benefit)"
        if config.reads_features
        else ""
    )
    print(
        f"  weights: synthetic and deterministic (seed {config.seed}, drawn on the device, nothing "
        f"downloaded). The draft's {layers} {'is' if config.draft_layers == 1 else 'are'} the target's "
        f"first, KV included{fc}; the target's {later} later layers add residual updates scaled by "
        f"{config.later_layer_scale}, so the draft agrees with the target often, by construction, "
        "not always"
    )
    batch = setup.largest
    tokens = setup.max_new_tokens
    print(
        f"  per batch B: B prompts of {preset.prompt_lengths[0]}-{preset.prompt_lengths[1]} tokens, "
        f"{tokens} new tokens each; tokens/s counts the new tokens after each request's first (prefill "
        f"makes it): batch {batch} decodes {batch} x {tokens} - {batch} = {batch * tokens - batch}"
    )
    if setup.device.type == "cpu":
        print(
            "  on the CPU a speed-up is not expected: eager steps of many small ops and a model too "
            "small for verifying several tokens at once to pay; run the large preset on an accelerator"
        )


def _timed_batches(setup: _Setup, model: TinyLM, seed: int, problems: list[str]) -> dict:
    """One line per batch size: speculative and plain greedy tokens/s, speed-up, mean accepted length.
    Returns ``{batch: (prompts, speculative outputs, plain greedy outputs)}``."""
    config, spec = setup.preset.model, setup.spec
    results = {}
    slow = agrees_too_often = False
    if not setup.graphs:  # eager: the first calls of a process pay one-time costs (captures warm up)
        prompts = make_prompts(1, setup.preset.prompt_lengths, config.vocab_size, seed)
        run(model, spec, prompts, 2, setup.device, _grammars(setup, 1), seed)
        run_greedy(model, prompts, 2, setup.device, _grammars(setup, 1), spec.page_size, False)
    for batch in setup.batches:
        prompts = make_prompts(batch, setup.preset.prompt_lengths, config.vocab_size, seed)
        outputs, stats, engine = run(
            model, spec, prompts, setup.max_new_tokens, setup.device, _grammars(setup, batch), seed,
            capture_ahead=setup.graphs,
        )  # fmt: skip
        problems += engine.cache.leaks()
        del engine
        baseline, baseline_stats, baseline_engine = run_greedy(
            model, prompts, setup.max_new_tokens, setup.device, _grammars(setup, batch), spec.page_size,
            spec.use_graphs, capture_ahead=setup.graphs,
        )  # fmt: skip
        problems += baseline_engine.cache.leaks()
        del baseline_engine
        speed, base = stats.tokens_per_second, baseline_stats.tokens_per_second
        ratio = speed / base if base else float("nan")
        slow = slow or ratio < 1
        agrees_too_often = agrees_too_often or stats.mean_accepted_length > 0.75 * (spec.num_steps + 1)
        print(
            f"batch {batch}: speculative {speed:.1f} tokens/s, plain greedy {base:.1f} tokens/s "
            f"(same target, same paged cache): speed-up {ratio:.2f}x "
            f"(mean accepted length {stats.mean_accepted_length:.2f})",
            flush=True,
        )
        results[batch] = (prompts, outputs, baseline)
    most = spec.num_steps + 1
    note = (
        "simulated: drawn with the requested mean, not verified"
        if spec.simulate_acc_len is not None
        else "the draft's tokens the target accepted, plus its bonus token"
    )
    print(f"  mean accepted length: tokens committed per verify ({note}), at most steps + 1 = {most}")
    if agrees_too_often and spec.simulate_acc_len is None:
        print(
            "  warning: mean accepted length above 75% of steps + 1: a draft that almost always "
            "agrees proves little about speculation"
        )
    if slow:
        print("  speed-up below 1: " + _why_slow(setup))
    return results


def _why_slow(setup: _Setup) -> str:
    if setup.device.type == "cpu":
        return "expected on the CPU (see above)"
    if setup.size != "large":
        return (
            f"the {setup.size} preset's target costs too little per forward for verifying several "
            "tokens at once to pay back the draft steps; run --size large"
        )
    return (
        "the draft steps and the verify cost more here than the accepted tokens save (see the profile line)"
    )


def _grammars(setup: _Setup, count: int) -> list | None:
    return None if setup.grammars is None else setup.grammars(count)


def _print_profile(setup: _Setup, model: TinyLM, seed: int) -> None:
    """The spec_hal ops' share of one speculative iteration (eager, torch.profiler)."""
    batch = setup.largest
    spec = dataclasses.replace(setup.spec, use_graphs=False)
    prompts = make_prompts(batch, setup.preset.prompt_lengths, model.config.vocab_size, seed)
    longest = max(len(p) for p in prompts) + setup.max_new_tokens
    engine = SpecDecoder(model, spec, max_requests=batch, max_context=longest, device=setup.device)
    requests = _requests(prompts, setup.max_new_tokens, _grammars(setup, batch), (0,), (1.0,))
    try:
        result: IterationProfile = profile_iteration(engine, requests)
    except Exception as error:  # a profiler this torch build or device lacks: the rest still runs
        print(f"  spec_hal ops: share not measured (torch.profiler failed: {error})")
        return
    if not result.op_calls:  # every request ended in the warm-up iteration: nothing to profile
        print(
            f"  spec_hal ops: share not measured (the requests end within one iteration of "
            f"{setup.max_new_tokens} new tokens: raise --max-new-tokens)"
        )
        return
    if result.clock == "device" and not result.ops_us:
        print("  spec_hal ops: share not measured (the profiler linked no kernel to an op's range)")
        return
    target = " (target <= 5%)" if result.clock == "device" else ""
    print(
        f"  spec_hal ops: {result.share:.1%} of a speculative iteration's {result.clock} time{target} "
        f"(batch {batch}, one iteration profiled eagerly with torch.profiler: {result.op_calls} op calls, "
        f"{result.ops_us / 1e3:.3f} of {result.iteration_us / 1e3:.3f} ms)"
        + ("; the CPU has no device clock" if result.clock == "host" else "")
    )


def _agreement(setup: _Setup, model: TinyLM, timed: dict, seed: int) -> None:
    """How often the timed (low-precision) speculative output equals plain greedy in that precision;
    for each that differs, whether it first differs at a near-tie."""
    same = total = ties = 0
    worst = 0.0
    for prompts, outputs, baseline in timed.values():
        for prompt, got, want in zip(prompts, outputs, baseline, strict=True):
            total += 1
            if got == want:
                same += 1
                continue
            gap = _relative_gap(model, prompt, got, want)
            ties += gap <= NEAR_TIE
            worst = max(worst, gap)
    name = _dtype_name(setup.dtype)
    line = f"  {name} (the timed runs): {same}/{total} outputs equal {name} plain greedy"
    if same != total:
        line += (
            f"; of the {total - same} that differ, {ties} first differ at a near-tie (the two tokens' "
            f"logits within {NEAR_TIE:.1%} of the top logit), {total - same - ties} elsewhere "
            f"(largest gap {worst:.2%})"
        )
    print(line)


def _relative_gap(model: TinyLM, prompt: list[int], got: list[int], want: list[int]) -> float:
    """At the first token where ``got`` and ``want`` differ: the target's logit gap between the two
    tokens over the top logit's magnitude (a full recompute in the model's dtype)."""
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            context = torch.tensor([prompt + want[:i]], device=model.embedding.device)
            logits = model.dense_logits(context)[0, -1].float()
            return float((logits[a] - logits[b]).abs() / logits.abs().max())
    return 0.0  # one is a prefix of the other (a grammar ended it): no token choice differs


def _exact_run(setup: _Setup, model: TinyLM, seed: int, problems: list[str]) -> dict:
    batch = setup.largest
    tokens = min(setup.max_new_tokens, setup.preset.exact_tokens)
    prompts = make_prompts(batch, setup.preset.prompt_lengths, model.config.vocab_size, seed)
    outputs, _, engine = run(
        model, setup.spec, prompts, tokens, setup.device, _grammars(setup, batch), seed,
        capture_ahead=setup.graphs,
    )  # fmt: skip
    problems += engine.cache.leaks()
    del engine
    baseline, _, baseline_engine = run_greedy(
        model, prompts, tokens, setup.device, _grammars(setup, batch), setup.spec.page_size,
        setup.spec.use_graphs, capture_ahead=setup.graphs,
    )  # fmt: skip
    problems += baseline_engine.cache.leaks()
    return {batch: (prompts, outputs, baseline)}


def _exactness(setup: _Setup, model: TinyLM, runs: dict, problems: list[str]) -> None:
    """Speculative output against plain greedy output (``runs`` in the exactness dtype), and plain
    greedy against a full recompute of the first requests; prints the exactness line."""
    name = _dtype_name(model.embedding.dtype)
    largest = max(runs)
    prompts, _, baseline = runs[largest]
    checked = min(setup.preset.reference_requests, len(prompts))
    started = time.perf_counter()
    grammars = _grammars(setup, checked)
    tokens = max(len(o) for o in baseline)
    expected = greedy_reference(model, prompts[:checked], tokens, grammars)
    recompute = time.perf_counter() - started
    reference_same = sum(o == e for o, e in zip(baseline, expected, strict=False))
    if reference_same != checked:
        problems.append("plain greedy " + _first_difference(model, prompts, baseline, expected))
    leak = "" if not problems else "; see the check line"
    same = total = 0
    for batch_prompts, outputs, batch_baseline in runs.values():
        total += len(outputs)
        same += sum(o == e for o, e in zip(outputs, batch_baseline, strict=True))
        if any(o != e for o, e in zip(outputs, batch_baseline, strict=True)):
            problems.append(_first_difference(model, batch_prompts, outputs, batch_baseline))
    sizes = "batch " + ", ".join(str(b) for b in runs)
    print(
        f"lossless: {same}/{total} outputs equal plain greedy ({name}, {sizes}, {tokens} new tokens "
        f"each); plain greedy equals a full recompute without cache for {reference_same}/{checked} "
        f"requests ({recompute:.1f} s){leak}"
    )


def _rejection_spec(setup: _Setup, args: argparse.Namespace) -> SpecConfig:
    """Rejection sampling with per-request top-k and top-p, every draw keyed by its request's seed."""
    return dataclasses.replace(
        setup.spec, sampling="rejection", temperature=args.temperature, top_k_top_p=True,
        simulate_acc_len=None, keyed=True,
    )  # fmt: skip


def _rejection_decode(
    setup: _Setup, model: TinyLM, args: argparse.Namespace, first: int, count: int, max_new_tokens: int
) -> tuple[list[list[int]], Stats, SpecDecoder]:
    """Requests ``first .. first + count - 1`` of the rejection run (request r: prompt r, seed
    ``args.seed + r``, and the top-k and top-p cycled by r), decoded as one batch."""
    largest = setup.largest
    prompts = make_prompts(largest, setup.preset.prompt_lengths, model.config.vocab_size, args.seed)
    chosen = range(first, first + count)
    grammars = _grammars(setup, largest)
    return run(
        model, _rejection_spec(setup, args), [prompts[r] for r in chosen], max_new_tokens, setup.device,
        None if grammars is None else [grammars[r] for r in chosen], args.seed, capture_ahead=setup.graphs,
        top_k=[args.top_k[r % len(args.top_k)] for r in chosen], top_p=[args.top_p[r % len(args.top_p)] for r in chosen],
        request_seeds=[args.seed + r for r in chosen],
    )  # fmt: skip


def _rejection_run(setup: _Setup, model: TinyLM, args: argparse.Namespace, problems: list[str]) -> None:
    batch = setup.largest
    spec = _rejection_spec(setup, args)
    _, stats, engine = _rejection_decode(setup, model, args, 0, batch, setup.max_new_tokens)
    problems += engine.cache.leaks()
    accepted = stats.mean_accepted_length - 1
    print(
        f"rejection sampling at batch {batch}: {stats.tokens_per_second:.1f} tokens/s, mean accepted "
        f"length {stats.mean_accepted_length:.2f} ({accepted:.2f} of {spec.num_steps} draft tokens "
        f"accepted per verify); temperature {spec.temperature}, per-request top-k "
        f"{','.join(map(str, args.top_k))} and top-p {','.join(map(str, args.top_p))} cycled over the "
        f"requests (spec_hal's top_k_renorm_prob and top_p_renorm_prob), request r keyed by seed "
        f"{args.seed} + r; its exactness is a distribution (tests/test_demo.py)"
    )


def _reproducibility(setup: _Setup, model: TinyLM, args: argparse.Namespace, problems: list[str]) -> None:
    """The rejection run's requests decoded one at a time and all together (``model`` in float32):
    keyed draws and batch-invariant ops give each request the same tokens either way."""
    batch = setup.largest
    tokens = min(setup.max_new_tokens, setup.preset.exact_tokens)
    together, _, engine = _rejection_decode(setup, model, args, 0, batch, tokens)
    problems += engine.cache.leaks()
    del engine
    alone = []
    for r in range(batch):
        outputs, _, engine = _rejection_decode(setup, model, args, r, 1, tokens)
        problems += engine.cache.leaks()
        alone += outputs
    same = sum(a == b for a, b in zip(alone, together, strict=True))
    if same != batch:
        prompts = make_prompts(batch, setup.preset.prompt_lengths, model.config.vocab_size, args.seed)
        problems.append("reproducibility: " + _first_difference(model, prompts, alone, together))
    print(
        f"reproducible: {same}/{batch} requests gave the same tokens at batch 1 and batch {batch} "
        f"({_dtype_name(model.embedding.dtype)}, rejection sampling, seeds {args.seed}..{args.seed + batch - 1}, "
        f"{tokens} new tokens each)"
    )


def _first_difference(model: TinyLM, prompts: list, outputs: list, expected: list) -> str:
    """Where two decodings first differ, with the target's top-2 logit gap there (a gap near 0 is a
    floating-point tie, not a logic error)."""
    for r, (got, want) in enumerate(zip(outputs, expected, strict=False)):
        for i, (a, b) in enumerate(zip(got, want, strict=False)):
            if a != b:
                context = torch.tensor([prompts[r] + want[:i]], device=model.embedding.device)
                top2 = model.dense_logits(context)[0, -1].topk(2).values
                gap = float(top2[0] - top2[1])
                return f"request {r} token {i}: got {a}, expected {b} (top-2 logit gap {gap:.2e})"
        if len(got) != len(want):
            return f"request {r}: {len(got)} tokens, expected {len(want)}"
    return "outputs differ"
