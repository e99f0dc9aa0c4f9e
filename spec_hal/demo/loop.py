"""The speculative-decoding loop of the demo, built from ``spec_hal.ops`` (spec v2 style).

A request's state between iterations: ``seq_len`` tokens have KV in the cache, and the last
committed token (the *root*, ``verified_id``) has not been run yet. One iteration of a batch:

draft phase (device, no host sync):
  1. ``assign_draft_cache_locs_contiguous``: the K*S draft slots (K branches of S steps);
     ``generate_draft_decode_kv_indices``: per draft step, each branch's KV list (prefix + its steps).
  2. S draft forwards of K rows per request (step 0 runs the root once per branch, reading the
     target's hidden state of the token before it when the draft is EAGLE-shaped). After each:
     greedy trees ``renorm_draft_probs`` + ``fast_topk``, greedy chains ``draft_topk1_postprocess``,
     sampled chains ``sample_draft_proposal``; then ``select_top_k_tokens`` keeps the K best paths
     (and gathers each new node's parent hidden state, the next step's draft input).
     Before step i >= 2 each branch's earlier draft KV is re-gathered from the branch its new node
     descends from (``move_kv_cache``), so draft attention follows the real tree path.
  3. ``organize_draft_results`` + ``build_tree_kernel_efficient`` (QLEN_ONLY mask): the D-node tree.
host (grammar mode only): ``generate_token_bitmask`` over the tree, copied to the device.
verify phase (device, no host sync):
  4. ``assign_extend_cache_locs_uniform``: the D verify slots; the target forward over the tree
     (and the recurrent block's per-node states into ``intermediate_ssm``).
  5. ``target_verify_topk1_postprocess`` (greedy chain) | ``verify_tree_greedy`` (greedy tree) |
     ``chain_speculative_sampling`` (sampled chain) | ``tree_speculative_sampling_target_only``
     (sampled tree), with the target's probabilities first renormalised over each request's top-k
     and top-p (``top_k_renorm_prob``, ``top_p_renorm_prob``); optionally
     ``generate_simulated_accept_index`` (benchmark mode, host draw).
  6. ``fill_bonus_tokens`` (next root), ``move_accept_tokens_to_target_kvcache`` (accepted KV to its
     committed columns), ``commit_mamba_states_after_verify`` (recurrent state of the last accepted
     node); the target's hidden state of the last accepted node is kept for the next draft.
host: read the committed tokens, advance ``seq_len``, finish requests (``PagedKVCache.release``).
A request's KV columns are reserved whole at admission (``assign_req_to_token_pool``), so nothing
but the two phases touches the device between iterations.

Both phases read and write only per-batch-size static buffers (:class:`StepBuffers`), so on a device
with graph capture each is captured once per batch size and replayed. The engine calls the ops
through ``self.ops`` (``spec_hal.ops``), so a profiler can put a range around each call.

:class:`GreedyDecoder`, the speed baseline, reuses this engine without the draft: one captured target
step per new token (``assign_extend_cache_locs_uniform`` with D = 1), same cache, prefill and release.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .. import ops, runtime
from .cache import DUMMY_ROW, PagedKVCache
from .model import TinyLM, apply_token_bitmask


@dataclass(frozen=True)
class SpecConfig:
    topk: int = 2
    num_steps: int = 3
    draft_token_num: int | None = None  # None: min(K + (S-1)K^2, S*K) + 1 (S + 1 for chains)
    page_size: int = 1
    sampling: str = "greedy"  # or "rejection"
    temperature: float = 1.0
    top_k_top_p: bool = False  # rejection sampling: renormalise by each request's top_k and top_p
    simulate_acc_len: float | None = None  # benchmark mode: a simulated mean accept length
    use_graphs: bool = True  # where the device supports capture
    # rejection sampling: every draw keyed by its request's seed (Request.seed) and position, so a
    # request's tokens do not depend on the batch around it; else drawn from torch's generator
    keyed: bool = False

    @property
    def num_nodes(self) -> int:
        if self.draft_token_num is not None:
            return self.draft_token_num
        k, s = self.topk, self.num_steps
        return min(k + (s - 1) * k * k, s * k) + 1

    def node_range(self) -> tuple[int, int]:
        """(fewest, most) verified nodes a request of this draft shape takes: S + 1 for a chain
        (topk 1), [2, K + (S-1)K^2 + 1] for a tree."""
        k, s = self.topk, self.num_steps
        return (s + 1, s + 1) if k == 1 else (2, k + (s - 1) * k * k + 1)

    def check(self, vocab_size: int) -> None:
        k, s, d = self.topk, self.num_steps, self.num_nodes
        if k < 1 or s < 1 or self.page_size < 1:
            raise ValueError("topk, num_steps and page_size must be >= 1")
        if self.sampling not in ("greedy", "rejection"):
            raise ValueError(f"sampling must be 'greedy' or 'rejection', got {self.sampling!r}")
        if self.top_k_top_p and self.sampling != "rejection":
            raise ValueError("top_k_top_p: per-request top-k and top-p apply to rejection sampling only")
        if self.keyed and self.sampling != "rejection":
            raise ValueError("keyed: keyed draws apply to rejection sampling only")
        fewest, most = self.node_range()
        if k == 1 and d != s + 1:
            raise ValueError(f"a chain (topk 1) verifies num_steps + 1 = {s + 1} tokens, got {d}")
        if not fewest <= d <= most:
            raise ValueError(f"draft_token_num must lie in [2, K + (S-1)K^2 + 1] = [2, {most}], got {d}")
        if self.simulate_acc_len is not None and k > 1 and vocab_size <= 100:
            raise ValueError("simulated acceptance of trees commits token 100: needs vocab_size > 100")


@dataclass
class Request:
    prompt: list[int]
    max_new_tokens: int
    grammar: ops.Grammar | None = None  # tracks the committed tokens
    top_k: int = 0  # rejection sampling with SpecConfig.top_k_top_p: <= 0 keeps every token
    top_p: float = 1.0  # likewise: 1 keeps every token
    seed: int = 0  # SpecConfig.keyed: the key of every draw of this request
    output: list[int] = field(default_factory=list)
    row: int = DUMMY_ROW
    seq_len: int = 0  # tokens with KV in the cache
    root: int = 0  # last committed token, not run yet

    @property
    def finished(self) -> bool:
        done = self.grammar is not None and self.grammar.is_terminated()
        return done or len(self.output) >= self.max_new_tokens


@dataclass
class Stats:
    tokens: int = 0
    verify_rows: int = 0  # request-iterations
    committed: int = 0  # tokens committed by verify (bonus included)
    decode_seconds: float = 0.0
    graphs: int = 0

    @property
    def mean_accepted_length(self) -> float:
        return self.committed / max(self.verify_rows, 1)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.decode_seconds if self.decode_seconds else 0.0


class _BatchInputs:
    """The per-request inputs of a batch step, written by the host before each step (or replay)."""

    def __init__(self, bs: int, device: torch.device) -> None:
        self.bs = bs
        self.req_pool_indices = torch.zeros(bs, dtype=torch.int64, device=device)
        self.seq_lens = torch.zeros(bs, dtype=torch.int64, device=device)
        self.verified_id = torch.zeros(bs, dtype=torch.int64, device=device)  # the roots
        self.top_k = torch.zeros(bs, dtype=torch.int64, device=device)
        self.top_p = torch.ones(bs, dtype=torch.float32, device=device)
        self.seeds = torch.zeros(bs, dtype=torch.int64, device=device)

    def load(self, requests: list[Request], filters: bool = False, keyed: bool = False) -> None:
        def put(buffer: Tensor, values: list) -> None:
            buffer.copy_(torch.tensor(values, dtype=buffer.dtype))

        put(self.req_pool_indices, [r.row for r in requests])
        put(self.seq_lens, [r.seq_len for r in requests])
        put(self.verified_id, [r.root for r in requests])
        if filters:
            put(self.top_k, [r.top_k for r in requests])
            put(self.top_p, [r.top_p for r in requests])
        if keyed:
            put(self.seeds, [r.seed for r in requests])

    def load_dummy(self) -> None:
        """Inputs for capture runs: every row is the dummy row (it writes only dummy slots/lines)."""
        self.req_pool_indices.fill_(DUMMY_ROW)
        self.seq_lens.zero_()
        self.verified_id.zero_()
        self.top_k.zero_()
        self.top_p.fill_(1.0)
        self.seeds.zero_()


class StepBuffers(_BatchInputs):
    """Every tensor one iteration of a batch of ``bs`` reads or writes, allocated once."""

    def __init__(self, engine: SpecDecoder, bs: int) -> None:
        k, s, d = engine.spec.topk, engine.spec.num_steps, engine.spec.num_nodes
        config, pool_len = engine.model.config, engine.cache.max_context
        vocab = config.vocab_size
        device = engine.device

        def ints(*shape: int, dtype: torch.dtype = torch.int64, fill: int = 0) -> Tensor:
            return torch.full(shape, fill, dtype=dtype, device=device)

        super().__init__(bs, device)
        # draft phase
        self.draft_slots = ints(bs * k * s)
        self.branch_prefix = ints(bs * k)
        self.draft_positions = ints(bs * k)
        self.kv_indices = ints(s, k * bs * pool_len + bs * k * s, dtype=torch.int32)
        self.kv_indptr = ints(s, bs * k + 1, dtype=torch.int32)  # column 0 stays 0
        self.temperatures = torch.full((bs * k, 1), engine.spec.temperature, device=device)
        self.draft_probs = (
            torch.zeros(bs, d, vocab, device=device) if engine.spec.sampling != "greedy" else None
        )
        # The outputs of every spec_hal op the phases call: under graph capture an op must not
        # allocate one (an op given no output allocates it), so each is passed. A draft step proposes for ``rows`` =
        # bs*K rows (the root step for the first bs): the proposal buffers are used as ``[:rows]``.
        greedy_chain = engine.spec.sampling == "greedy" and k == 1
        f32 = torch.float32
        self.draft_q = None if greedy_chain else torch.zeros(bs * k, vocab, dtype=f32, device=device)
        self.topk_p = torch.zeros(bs * k, k, dtype=f32, device=device)
        self.topk_index = ints(bs * k, k)
        self.draft_input_ids = ints(s, bs * k)  # select_top_k_tokens' outputs, one set per step
        # the hidden state each next draft row reads (its parent's), when the draft reads one
        self.draft_features = (
            torch.zeros(s, bs * k, config.hidden, dtype=engine.model.embedding.dtype, device=device)
            if config.reads_features
            else None
        )
        self.scores = torch.zeros(s, bs, k, dtype=f32, device=device)
        self.tree_info = [
            (torch.zeros(bs, 1, k, dtype=f32, device=device), ints(bs, k), ints(bs, k + 1))
            if step == 0
            else (torch.zeros(bs, k, k, dtype=f32, device=device), ints(bs, k * k), ints(bs, k))
            for step in range(s)
        ]
        self.parent_list = ints(bs, k * (s - 1) + 1 if s > 1 else 0)  # organize_draft_results
        self.selected_index = ints(bs, d - 1)
        self.draft_tokens = ints(bs, d - 1)
        self.tree_mask = torch.zeros(bs * d * d, dtype=torch.bool, device=device)
        self.tree_positions = ints(bs * d)
        self.retrieve_index = ints(bs, d)
        self.retrieve_next_token = ints(bs, d)
        self.retrieve_next_sibling = ints(bs, d)
        self.candidates = ints(bs, d)
        # verify phase
        self.out_cache_loc = ints(bs * d)
        self.bitmask = ints(bs * d, math.ceil(vocab / 32), dtype=torch.int32, fill=-1)
        self.intermediate_ssm = torch.zeros(
            1, bs, d, engine.cache.ssm_states.shape[2], device=device, dtype=engine.cache.ssm_states.dtype
        )
        width = s + 1
        self.predicts = ints(bs * d, dtype=torch.int32)
        self.accept_index = ints(bs, width, dtype=torch.int32, fill=-1)
        # rejection sampling's coins (keyed draws write them: an op's outputs are passed under capture)
        self.coins = torch.zeros(bs, d, dtype=f32, device=device)
        self.final_coins = torch.zeros(bs, dtype=f32, device=device)
        self.num_correct_drafts = ints(bs, dtype=torch.int32)
        self.accept_lens = ints(bs, dtype=torch.int32)
        self.bonus_tokens = ints(bs, dtype=torch.int32)
        self.accept_tokens = ints(bs, width)
        self.tgt_loc = ints(bs * width)
        self.src_loc = ints(bs * width)
        # the remaining outputs of target_verify_topk1_postprocess (greedy chains)
        self.topk1_rest = (ints(bs), ints(bs), ints(bs * d))
        self.last_correct_step = ints(bs)  # verify_commit_step_indices (recurrent commit)
        self.simulated_accept_index = ints(bs, width, dtype=torch.int32)  # benchmark mode


@dataclass
class _RecurrentStates:
    """The verify-step view of the recurrent cache that commit_mamba_states_after_verify reads."""

    ssm_states: Tensor
    intermediate_ssm: Tensor
    state_indices: Tensor
    conv_states: list = field(default_factory=list)  # the demo's recurrent block has no conv window
    intermediate_conv_windows: list = field(default_factory=list)
    mamba_track_interval: int | None = None
    mamba_track_indices: Tensor | None = None


class SpecDecoder:
    def __init__(
        self,
        model: TinyLM,
        spec: SpecConfig,
        *,
        max_requests: int,
        max_context: int,
        device: torch.device | str,
        seed: int = 0,
    ) -> None:
        spec.check(model.config.vocab_size)
        self.model, self.spec = model, spec
        self.device = torch.device(device)
        self.ops = ops  # the op namespace every call goes through (a profiler may wrap it)
        k, s, ps = spec.topk, spec.num_steps, spec.page_size
        # headroom past the committed tokens: the draft's paged branches and the verify window
        headroom = k * (s + 2 * ps) + spec.num_nodes + ps
        pool_len = -(-(max_context + headroom) // ps) * ps
        config = model.config
        self.cache = PagedKVCache(
            num_layers=config.num_layers,
            num_heads=config.kv_heads,
            head_dim=config.head_dim,
            page_size=ps,
            num_pages=max_requests * pool_len // ps + 1,
            max_requests=max_requests,
            max_context=pool_len,
            state_size=config.state_size,
            feature_size=config.hidden if config.reads_features else 0,
            device=self.device,
            dtype=model.embedding.dtype,
        )
        # the draft's re-gather KVBuffers: built here, as KVBuffers may not be built under capture
        self.cache.layer_kv(config.draft_layers)
        self.host_generator = torch.Generator().manual_seed(seed)  # simulated accept lengths
        self.graphs = spec.use_graphs and runtime.supports_graph_capture(self.device)
        self._buffers: dict[int, StepBuffers] = {}
        self._replays: dict[int, tuple] = {}
        self.stats = Stats()

    def use_ops(self, op_namespace: Any) -> None:
        """Route every op call of this engine and its cache through ``op_namespace``."""
        self.ops = self.cache.ops = op_namespace

    # ---- the two device phases -----------------------------------------------------------------

    def _draft_rows(self, b: StepBuffers, step: int) -> tuple[Tensor, Tensor]:
        """Row z's KV list of draft step ``step`` as a padded slot table (from the CSR lists of
        generate_draft_decode_kv_indices)."""
        indptr = b.kv_indptr[step].long()
        start, length = indptr[:-1], indptr[1:] - indptr[:-1]
        column = torch.arange(self.cache.max_context + self.spec.num_steps, device=self.device)
        visible = column < length[:, None]
        position = (start[:, None] + column).clamp(max=b.kv_indices.shape[1] - 1)
        slots = b.kv_indices[step].long()[position]
        return torch.where(visible, slots, 0), visible[:, None, :]

    def _regather_branches(self, b: StepBuffers, tree_parents: Tensor, step: int) -> None:
        """Before draft step ``step`` >= 2: branch t's draft slots 1..step-1 get the KV of the branch
        its new frontier node descends from (generate_draft_decode_kv_indices lists each branch's own
        slots, but select_top_k_tokens may have moved a branch to another parent)."""
        k, s = self.spec.topk, self.spec.num_steps
        chosen = tree_parents - (k * k * (step - 2) + k)  # undo select_top_k_tokens' node numbering
        parent_branch = chosen.div(k, rounding_mode="floor")  # [bs, K]
        slots = b.draft_slots.view(b.bs, k, s)
        source = slots.gather(1, parent_branch[:, :, None].expand(-1, -1, s))[:, :, 1:step]
        target = slots[:, :, 1:step]
        stays = (parent_branch == torch.arange(k, device=self.device))[:, :, None]
        segments = torch.full((b.bs,), k * (step - 1), dtype=torch.int64, device=self.device)
        self.ops.move_kv_cache(
            self.cache.layer_kv(self.model.config.draft_layers),
            torch.where(stays, -1, target).flatten(),
            torch.where(stays, -1, source).flatten(),
            segments,  # one segment per request: its lanes read before any of them writes
        )

    def _propose(self, b: StepBuffers, logits: Tensor, step: int) -> tuple[Tensor, Tensor]:
        """The children of each expanded node: (probabilities or path weights, tokens)."""
        k, rows, ops = self.spec.topk, logits.shape[0], self.ops
        out = (b.topk_p[:rows], b.topk_index[:rows])
        if self.spec.sampling == "greedy":
            if k == 1:  # advances draft_positions in place
                return ops.draft_topk1_postprocess(logits, b.draft_positions, out=out)
            assert b.draft_q is not None
            probs = ops.renorm_draft_probs(logits, None, False, probs=b.draft_q[:rows])
            return ops.fast_topk(probs, k, out=out)
        assert b.draft_q is not None
        if k == 1:  # the chain verify needs the exact q each draft token was drawn from
            # keyed: draft step ``step`` of the iteration that starts at the request's seq_len
            keys = {"seeds": b.seeds, "positions": b.seq_lens, "step": step} if self.spec.keyed else {}
            q, q_of_token, token = ops.sample_draft_proposal(
                logits, b.temperatures[:rows], out=(b.draft_q[:rows], *out), **keys
            )
            assert b.draft_probs is not None
            b.draft_probs[:, step].copy_(q)
            return q_of_token, token
        # trees are verified target-only: their tokens are the top-k of the tempered draft
        probs = ops.renorm_draft_probs(logits, b.temperatures[:rows], True, probs=b.draft_q[:rows])
        return ops.fast_topk(probs, k, out=out)

    def draft_phase(self, b: StepBuffers) -> None:
        spec, cache, model, ops = self.spec, self.cache, self.model, self.ops
        k, s, d, bs = spec.topk, spec.num_steps, spec.num_nodes, b.bs
        ops.assign_draft_cache_locs_contiguous(
            b.req_pool_indices, cache.req_to_token, b.seq_lens, k, s, spec.page_size, out=b.draft_slots
        )
        b.branch_prefix.copy_(b.seq_lens.repeat_interleave(k))
        ops.generate_draft_decode_kv_indices(
            b.req_pool_indices, cache.req_to_token, b.seq_lens, b.branch_prefix, spec.page_size, k, s,
            b.kv_indices, b.kv_indptr,
        )  # fmt: skip
        b.draft_positions.copy_(b.branch_prefix)
        slots = b.draft_slots.view(bs, k, s)
        tokens = b.verified_id.repeat_interleave(k)  # step 0: the root, once per branch
        # step 0 reads the target's hidden state of the token before the root (kept by the last
        # verify or the prefill); later steps read their parent node's draft hidden state
        features = None
        if model.config.reads_features:
            features = cache.features[b.req_pool_indices].repeat_interleave(k, 0)
        scores: Tensor | None = None
        trees: list[tuple[Tensor, Tensor, Tensor]] = []
        for step in range(s):
            if step >= 2 and k > 1:
                self._regather_branches(b, trees[-1][2], step)
            kv_slots, visible = self._draft_rows(b, step)
            x = model.draft_embed(tokens, b.draft_positions, features)
            x = model.paged_layers(
                x, range(model.config.draft_layers), slots[:, :, step].flatten(), kv_slots, visible,
                cache.k, cache.v,
            )  # fmt: skip
            logits = model.logits(x)
            if step == 0:  # the K copies of the root agree: one row per request
                logits, x = logits[::k], x[::k]
            topk_p, topk_index = self._propose(b, logits, step)
            next_features = None if b.draft_features is None else b.draft_features[step]
            out = (b.draft_input_ids[step], next_features, b.scores[step], b.tree_info[step])
            tokens, features, scores, tree = ops.select_top_k_tokens(
                step, topk_p, topk_index, None if features is None else x, scores, k, out=out
            )
            trees.append(tree)
            if k > 1 or spec.sampling != "greedy":
                b.draft_positions.add_(1)
        score_list, token_list, parents_list = (list(part) for part in zip(*trees, strict=True))
        parent_list, selected_index, draft_tokens = ops.organize_draft_results(
            score_list, token_list, parents_list, d, out=(b.parent_list, b.selected_index, b.draft_tokens)
        )
        *_, flat_tokens = ops.build_tree_kernel_efficient(
            parent_list, selected_index, b.seq_lens, k, s, d, ops.QLEN_ONLY,
            tree_mask=b.tree_mask, positions=b.tree_positions, retrieve_index=b.retrieve_index,
            retrieve_next_token=b.retrieve_next_token, retrieve_next_sibling=b.retrieve_next_sibling,
            verified_id=b.verified_id, draft_tokens=draft_tokens,
        )  # fmt: skip
        assert flat_tokens is not None  # verified_id and draft_tokens were given
        b.candidates.copy_(flat_tokens.view(bs, d))

    def _target_forward(self, b: StepBuffers) -> tuple[Tensor, Tensor]:
        """Target (logits ``[bs*D, V]``, last hidden states ``[bs*D, H]``) of every tree node; KV of all
        layers into the verify slots, columns ``[seq_len, seq_len + D)`` of each request's row."""
        model, cache, d, bs = self.model, self.cache, self.spec.num_nodes, b.bs
        pool_len = cache.max_context
        self.ops.assign_extend_cache_locs_uniform(
            b.req_pool_indices, cache.req_to_token, b.seq_lens, d, out=b.out_cache_loc
        )
        # node (b, i) sees its request's committed columns, then the tree columns its mask allows
        kv_slots = cache.req_to_token[b.req_pool_indices].long()  # [bs, pool_len]
        column = torch.arange(pool_len, device=self.device)
        tree_column = column - b.seq_lens[:, None]  # [bs, pool_len]: node j at seq_len + j
        in_tree = (tree_column >= 0) & (tree_column < d)
        tree_mask = b.tree_mask.view(bs, d, d)
        node_sees = tree_mask.gather(2, tree_column.clamp(0, d - 1)[:, None, :].expand(bs, d, pool_len))
        visible = (tree_column < 0)[:, None, :] | (node_sees & in_tree[:, None, :])
        x = model.embed(b.candidates.flatten(), b.tree_positions)
        x = model.paged_layers(
            x, range(model.config.num_layers), b.out_cache_loc, kv_slots, visible, cache.k, cache.v
        )
        if model.has_recurrent:
            depth = b.tree_positions.view(bs, d) - b.seq_lens[:, None]
            previous = cache.ssm_states[0, b.req_pool_indices]
            states = model.recurrent_states(x.view(bs, d, -1), tree_mask, depth, previous)
            b.intermediate_ssm[0].copy_(states)  # committed after acceptance, never before
            x = model.add_recurrent(x, states.reshape(bs * d, -1))
        return model.logits(x), x

    def verify_phase(self, b: StepBuffers) -> None:
        spec, d, bs, ops = self.spec, self.spec.num_nodes, b.bs, self.ops
        logits, hidden = self._target_forward(b)
        logits = apply_token_bitmask(logits, b.bitmask)
        tree = (b.candidates, b.retrieve_index, b.retrieve_next_token, b.retrieve_next_sibling)
        b.predicts.zero_()
        b.accept_index.fill_(-1)
        if spec.sampling == "greedy" and spec.topk == 1:
            ops.target_verify_topk1_postprocess(
                logits, b.candidates, b.retrieve_index, b.retrieve_next_token, b.seq_lens,
                out=(b.predicts, b.num_correct_drafts, b.accept_lens, b.accept_index, b.bonus_tokens,
                     *b.topk1_rest),
            )  # fmt: skip
        elif spec.sampling == "greedy":
            target_predict = logits.argmax(-1).view(bs, d)
            ops.verify_tree_greedy(b.predicts, b.accept_index, b.num_correct_drafts, *tree, target_predict)
        else:
            target_probs = (logits.float() / spec.temperature).softmax(-1)
            if spec.top_k_top_p:
                self._renormalise(target_probs, b.top_k.repeat_interleave(d), b.top_p.repeat_interleave(d))
            target_probs = target_probs.view(bs, d, -1)
            coins, final_coins = self._coins(b)
            assert b.draft_probs is not None
            if spec.topk == 1:
                ops.chain_speculative_sampling(
                    b.predicts, b.accept_index, b.num_correct_drafts, b.candidates, b.retrieve_index,
                    coins, final_coins, target_probs, b.draft_probs,
                )  # fmt: skip
            else:
                b.draft_probs.zero_()  # target-only: the scratch collects rejected siblings' p
                ops.tree_speculative_sampling_target_only(
                    b.predicts, b.accept_index, b.num_correct_drafts, *tree, coins, final_coins,
                    target_probs, b.draft_probs,
                )  # fmt: skip
        if spec.simulate_acc_len is not None:  # benchmark mode: replace the verify result
            chain = spec.topk == 1
            simulated = ops.generate_simulated_accept_index(
                b.accept_index, b.predicts, b.num_correct_drafts, b.candidates,
                logits.argmax(-1).view(bs, d), spec.num_steps, spec.simulate_acc_len, "match-expected",
                "real-draft-token" if chain else "fixed", generator=self.host_generator,
                new_accept_index=b.simulated_accept_index,
            )  # fmt: skip
            b.accept_index.copy_(simulated)
        self._accept(b, hidden)

    def _coins(self, b: StepBuffers) -> tuple[Tensor, Tensor]:
        """The verify's uniforms: node i's accept coin and the final sample's coin of each request,
        keyed by (seed, seq_len) where ``spec.keyed``, else from torch's generator."""
        if not self.spec.keyed:
            return torch.rand(b.bs, self.spec.num_nodes, device=self.device), torch.rand(
                b.bs, device=self.device
            )
        ops = self.ops
        ops.keyed_uniform(b.seeds, b.seq_lens, 0, ops.ACCEPT_COIN, self.spec.num_nodes, out=b.coins)
        ops.keyed_uniform(b.seeds, b.seq_lens, 0, ops.FINAL_COIN, 1, out=b.final_coins.view(b.bs, 1))
        return b.coins, b.final_coins

    def _renormalise(self, probs: Tensor, top_k: Tensor, top_p: Tensor) -> None:
        """``probs [R, V]`` renormalised in place over each row's top-k, then its top-p (sglang's
        order): the target distribution that sampling with these filters draws from."""
        self.ops.top_k_renorm_prob(probs, top_k, out=probs)
        self.ops.top_p_renorm_prob(probs, top_p, out=probs)

    def _accept(self, b: StepBuffers, hidden: Tensor) -> None:
        cache, ops = self.cache, self.ops
        torch.add(b.num_correct_drafts, 1, out=b.accept_lens)
        # the token committed after accepted node j is predicts at its flat id (the last: the bonus)
        accepted = b.accept_index.long()
        committed = b.predicts.long()[accepted.clamp(min=0)]
        b.accept_tokens.copy_(torch.where(accepted >= 0, committed, -1))
        ops.fill_bonus_tokens(b.accept_tokens, b.accept_lens, bonus_tokens=b.bonus_tokens)
        ops.move_accept_tokens_to_target_kvcache(
            cache.kv, b.req_pool_indices, cache.req_to_token, b.seq_lens, b.num_correct_drafts,
            b.accept_index, b.out_cache_loc, tgt_loc=b.tgt_loc, src_loc=b.src_loc,
        )  # fmt: skip
        if self.model.config.reads_features:  # the hidden state before the next root: the last node's
            last_node = accepted.gather(1, b.num_correct_drafts.long()[:, None]).squeeze(1).clamp(min=0)
            cache.features.index_copy_(0, b.req_pool_indices, hidden.index_select(0, last_node))
        if self.model.has_recurrent:
            d = self.spec.num_nodes
            ops.verify_commit_step_indices(
                b.accept_index, b.accept_lens, d, last_correct_step_indices=b.last_correct_step
            )
            states = _RecurrentStates(cache.ssm_states, b.intermediate_ssm, b.req_pool_indices)
            ops.commit_mamba_states_after_verify(
                states, b.accept_index, b.accept_lens, d, last_correct_step_indices=b.last_correct_step
            )

    # ---- host side -----------------------------------------------------------------------------

    def _admission_columns(self, request: Request) -> int:
        """The columns ``request`` touches by its last iteration (``seq_len`` is then at most
        prompt + max_new_tokens - 2: its root, the last committed token, has no KV yet)."""
        return self._columns_needed(len(request.prompt) + request.max_new_tokens - 1)

    def _columns_needed(self, seq_len: int) -> int:
        """req_to_token columns one iteration touches (the verify window and the draft branches)."""
        k, s, ps = self.spec.topk, self.spec.num_steps, self.spec.page_size
        if ps > 1 and k > 1:  # assign_draft_cache_locs_contiguous' paged tree: whole pages a branch
            partial = seq_len % ps
            draft_end = seq_len - partial + k * -(-(partial + s) // ps) * ps
        else:
            draft_end = seq_len + k * s
        return max(draft_end, seq_len + self.spec.num_nodes)

    def buffers(self, bs: int) -> StepBuffers:
        if bs not in self._buffers:
            self._buffers[bs] = StepBuffers(self, bs)
        return self._buffers[bs]

    def _phases(self, b: StepBuffers) -> tuple:
        """(draft, verify) callables: graph replays where capture is supported, else the phases."""
        if not self.graphs:
            return (lambda: self.draft_phase(b), lambda: self.verify_phase(b))
        if b.bs not in self._replays:
            b.load_dummy()  # capture runs each phase once for real: let it write only dummy rows
            draft = runtime.capture_graph(lambda: self.draft_phase(b), self.device)
            # simulated acceptance draws its length on the host: that verify cannot be replayed
            verify = (
                (lambda: self.verify_phase(b))
                if self.spec.simulate_acc_len is not None
                else runtime.capture_graph(lambda: self.verify_phase(b), self.device)
            )
            self._replays[b.bs] = (draft, verify)
            self.stats.graphs += 1 if self.spec.simulate_acc_len is not None else 2
        return self._replays[b.bs]

    def prepare(self, batch_sizes: range) -> None:
        """Allocate (and capture) the step of each batch size ahead of the timed loop."""
        for bs in batch_sizes:
            self._phases(self.buffers(bs))
        runtime.synchronize(self.device)

    def prefill(self, requests: list[Request]) -> None:
        """Run the prompts (one padded forward), commit their KV, state and last hidden state, pick
        each first token."""
        model, cache = self.model, self.cache
        for request in requests:
            request.row = cache.new_request()
        # every column a request can touch before it finishes, reserved at admission: the timed
        # iterations then launch nothing outside their captured phases (their reserve finds the
        # columns backed already)
        cache.reserve([r.row for r in requests], [self._admission_columns(r) for r in requests])
        count, longest = len(requests), max(len(r.prompt) for r in requests)
        tokens = torch.zeros(count, longest, dtype=torch.long)
        for i, request in enumerate(requests):
            tokens[i, : len(request.prompt)] = torch.tensor(request.prompt)
        tokens = tokens.to(self.device)
        rows = torch.tensor([r.row for r in requests], device=self.device)
        lengths = torch.tensor([len(r.prompt) for r in requests], device=self.device)
        positions = torch.arange(longest, device=self.device)
        # padding positions map to spare slots of the request's last page or to dummy slot 0
        slots = cache.req_to_token[rows, :longest].long()
        causal = torch.ones(longest, longest, dtype=torch.bool, device=self.device).tril()
        x = model.embed(tokens, positions).view(count * longest, -1)
        x = model.paged_layers(
            x, range(model.config.num_layers), slots.flatten(), slots, causal.expand(count, -1, -1),
            cache.k, cache.v,
        ).view(count, longest, -1)  # fmt: skip
        last = lengths - 1
        batch = torch.arange(count, device=self.device)
        if model.has_recurrent:
            previous = x.new_zeros(count, model.config.state_size)
            states = model.recurrent_states(
                x, causal.expand(count, -1, -1), positions.expand(count, -1), previous
            )
            cache.ssm_states[0, rows] = states[batch, last]
            x = model.add_recurrent(x, states)
        if model.config.reads_features:
            cache.features[rows] = x[batch, last]
        logits = model.logits(x[batch, last])
        if requests[0].grammar is not None:
            logits = apply_token_bitmask(logits, self._grammar_masks(requests).to(self.device))
        if self.spec.sampling == "greedy":
            first = logits.argmax(-1)
        else:
            probs = (logits.float() / self.spec.temperature).softmax(-1)
            if self.spec.top_k_top_p:
                top_k = torch.tensor([r.top_k for r in requests], device=self.device)
                top_p = torch.tensor([r.top_p for r in requests], dtype=torch.float32, device=self.device)
                self._renormalise(probs, top_k, top_p)
            keys = {}
            if self.spec.keyed:  # the first token's draw: keyed by the position it takes
                keys = {
                    "seeds": torch.tensor([r.seed for r in requests], device=self.device),
                    "positions": lengths,
                }
            _, first = self.ops.fast_sample(probs, **keys)
        for request, token in zip(requests, first.flatten().tolist(), strict=True):
            request.seq_len = len(request.prompt)
            self._commit(request, [token])

    def _grammar_masks(self, requests: list[Request]) -> Tensor:
        vocab = self.model.config.vocab_size
        grammars = [request.grammar for request in requests]
        assert all(g is not None for g in grammars)  # grammar mode: every request has one
        mask = grammars[0].allocate_vocab_mask(vocab, len(requests), torch.device("cpu"))  # type: ignore[union-attr]
        for i, grammar in enumerate(grammars):
            grammar.fill_vocab_mask(mask, i)  # type: ignore[union-attr]
        return mask

    def _commit(self, request: Request, tokens: list[int]) -> None:
        for token in tokens:
            if request.finished:
                break
            request.output.append(token)
            if request.grammar is not None:
                request.grammar.accept_token(token)
        request.root = tokens[-1]

    def _iterate(self, batch: list[Request]) -> None:
        self.cache.reserve([r.row for r in batch], [self._columns_needed(r.seq_len) for r in batch])
        b = self.buffers(len(batch))
        draft, verify = self._phases(b)
        b.load(batch, self.spec.top_k_top_p, self.spec.keyed)
        draft()
        if batch[0].grammar is not None:  # the tree goes to the host and its mask comes back
            next_token, next_sibling, draft_tokens = (
                t.cpu() for t in (b.retrieve_next_token, b.retrieve_next_sibling, b.candidates)
            )
            bitmask, _ = self.ops.generate_token_bitmask(
                batch, next_token, next_sibling, draft_tokens, self.model.config.vocab_size
            )
            assert bitmask is not None and b.bitmask is not None  # a grammar request is in the batch
            b.bitmask.copy_(bitmask)
        verify()
        # one read per iteration: each row holds the committed tokens, then -1 (the last committed
        # token, the next root, is bonus_tokens' entry)
        for request, row in zip(batch, b.accept_tokens.tolist(), strict=True):
            tokens = [token for token in row if token >= 0]
            request.seq_len += len(tokens)
            self._commit(request, tokens)
            self.stats.committed += len(tokens)
        self.stats.verify_rows += len(batch)

    def advance(self, active: list[Request]) -> list[Request]:
        """Release the finished requests of ``active`` and run one iteration of the others; returns
        those (empty once every request is done)."""
        for request in active:
            if request.finished:
                self.cache.release(request.row)
        active = [r for r in active if not r.finished]
        if active:
            self._iterate(active)
        return active

    def generate(self, requests: list[Request]) -> list[Request]:
        """Decode every request to completion; each is released (KV and row) when it finishes."""
        self.prefill(requests)
        prefilled = len(requests)  # one token each, not counted as decode throughput
        runtime.synchronize(self.device)
        start = time.perf_counter()
        active = requests
        while active:
            active = self.advance(active)
        runtime.synchronize(self.device)
        self.stats.decode_seconds += time.perf_counter() - start
        self.stats.tokens += sum(len(r.output) for r in requests) - prefilled
        return requests


# --------------------------------------------------------------------------------------------------
# The speed baseline: plain greedy decoding of the same target through the same paged cache


class GreedyBuffers(_BatchInputs):
    """Every tensor one plain greedy step of a batch of ``bs`` reads or writes, allocated once."""

    def __init__(self, engine: GreedyDecoder, bs: int) -> None:
        super().__init__(bs, engine.device)
        words = math.ceil(engine.model.config.vocab_size / 32)
        self.out_cache_loc = torch.zeros(bs, dtype=torch.int64, device=engine.device)
        self.bitmask = torch.full((bs, words), -1, dtype=torch.int32, device=engine.device)
        self.next_tokens = torch.zeros(bs, dtype=torch.int64, device=engine.device)


class GreedyDecoder(SpecDecoder):
    """Plain greedy decoding, the fair speed baseline of the speculative loop: the same target, cache,
    prefill, host loop and release, but no draft: each step runs every request's root once (one
    target forward per new token, batched), with ``assign_extend_cache_locs_uniform`` (D = 1) for
    its slot. The step is captured once per batch size where the device supports it."""

    def __init__(
        self,
        model: TinyLM,
        *,
        page_size: int = 1,
        use_graphs: bool = True,
        max_requests: int,
        max_context: int,
        device: torch.device | str,
    ) -> None:
        # a one-step chain: the cache headroom SpecDecoder sizes for it covers the one-token window
        spec = SpecConfig(topk=1, num_steps=1, page_size=page_size, use_graphs=use_graphs)
        super().__init__(model, spec, max_requests=max_requests, max_context=max_context, device=device)

    def _columns_needed(self, seq_len: int) -> int:
        return seq_len + 1  # the root's column

    def step(self, b: GreedyBuffers) -> None:
        """KV of each root into column ``seq_len`` of its row, its recurrent state committed, and
        the argmax of the target's logits into ``next_tokens`` (device only, no host sync)."""
        model, cache = self.model, self.cache
        self.ops.assign_extend_cache_locs_uniform(
            b.req_pool_indices, cache.req_to_token, b.seq_lens, 1, out=b.out_cache_loc
        )
        kv_slots = cache.req_to_token[b.req_pool_indices].long()
        visible = torch.arange(cache.max_context, device=self.device) <= b.seq_lens[:, None]
        x = model.embed(b.verified_id, b.seq_lens)
        x = model.paged_layers(
            x, range(model.config.num_layers), b.out_cache_loc, kv_slots, visible[:, None, :],
            cache.k, cache.v,
        )  # fmt: skip
        if model.has_recurrent:
            previous = cache.ssm_states[0, b.req_pool_indices]
            itself = torch.ones(b.bs, 1, 1, dtype=torch.bool, device=self.device)
            depth = torch.zeros(b.bs, 1, dtype=torch.int64, device=self.device)
            states = model.recurrent_states(x[:, None], itself, depth, previous)[:, 0]
            cache.ssm_states[0].index_copy_(0, b.req_pool_indices, states)
            x = model.add_recurrent(x, states)
        logits = apply_token_bitmask(model.logits(x), b.bitmask)
        torch.argmax(logits, -1, out=b.next_tokens)

    def buffers(self, bs: int) -> GreedyBuffers:  # type: ignore[override]
        if bs not in self._buffers:
            self._buffers[bs] = GreedyBuffers(self, bs)  # type: ignore[assignment]
        return self._buffers[bs]  # type: ignore[return-value]

    def _phases(self, b: GreedyBuffers) -> tuple:  # type: ignore[override]
        """(step,): a graph replay where capture is supported, else the step itself."""
        if not self.graphs:
            return (lambda: self.step(b),)
        if b.bs not in self._replays:
            b.load_dummy()
            self._replays[b.bs] = (runtime.capture_graph(lambda: self.step(b), self.device),)
            self.stats.graphs += 1
        return self._replays[b.bs]

    def _iterate(self, batch: list[Request]) -> None:
        self.cache.reserve([r.row for r in batch], [self._columns_needed(r.seq_len) for r in batch])
        b = self.buffers(len(batch))
        (step,) = self._phases(b)
        b.load(batch)
        if batch[0].grammar is not None:
            b.bitmask.copy_(self._grammar_masks(batch))
        step()
        for request, token in zip(batch, b.next_tokens.tolist(), strict=True):
            request.seq_len += 1
            self._commit(request, [token])
        self.stats.verify_rows += len(batch)
        self.stats.committed += len(batch)
