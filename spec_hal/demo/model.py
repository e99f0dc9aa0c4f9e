"""A decoder-only transformer in plain torch: the target of the demo, and its EAGLE-style draft.

Synthetic weights from a fixed seed, generated on the model's device, so nothing is downloaded. The
target is ``num_layers`` attention blocks (grouped-query attention when ``num_kv_heads`` is below
``num_heads``), then (optionally) one diagonal linear-recurrent block, the smallest layer whose
per-request state must be committed after verify like a mamba layer's.

The draft shares the target's embedding, final norm and LM head. Its ``draft_layers`` blocks are the
target's first blocks (the same weights, so the target's verify already wrote the draft's KV at
committed positions). With ``draft_feature_scale > 0`` it is EAGLE-shaped: an ``fc`` over
``[token embedding, hidden state]`` feeds its first block, where the hidden state is the target's
last hidden state (pre-norm) for the root and the draft's own for the nodes after it. The fc passes
the embedding through and adds the hidden state at that small random scale: synthetic weights cannot
learn what a trained EAGLE head gets from it, so it carries the read's cost and data flow, not its
benefit. Later target blocks only add to the residual stream (scaled by ``later_layer_scale``), so
the draft's argmax agrees with the target's often but not always: acceptance is meaningful.

The engine (``loop.py``) reads keys and values from a paged cache through per-group slot tables;
:meth:`TinyLM.dense_logits` recomputes a whole sequence without any cache and is the independent
reference the decoded output is compared with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 64
    hidden: int = 32
    num_heads: int = 2
    num_layers: int = 3
    draft_layers: int = 2  # the draft's blocks are the target's first blocks
    state_size: int = 8  # the recurrent block's state per request; 0 = no recurrent block
    max_positions: int = 1024
    later_layer_scale: float = 0.2  # residual weight of blocks the draft skips
    num_kv_heads: int | None = None  # grouped-query attention; None = num_heads
    mlp_hidden: int | None = None  # None = 2 * hidden
    draft_feature_scale: float = 0.0  # weight of the hidden state in the draft's fc; 0 = no fc
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def mlp(self) -> int:
        return 2 * self.hidden if self.mlp_hidden is None else self.mlp_hidden

    @property
    def reads_features(self) -> bool:
        """Whether the draft reads a hidden state (EAGLE-style) besides its input token."""
        return self.draft_feature_scale > 0

    def parameters(self) -> int:
        """Weights of the target (the draft's fc included)."""
        h, q, kv = self.hidden, self.num_heads * self.head_dim, 2 * self.kv_heads * self.head_dim
        block = h * (q + kv) + q * h + 2 * h * self.mlp
        extra = 2 * self.state_size * h + (2 * h * h if self.reads_features else 0)
        return 2 * self.vocab_size * h + self.max_positions * h + self.num_layers * block + extra


@dataclass
class _Block:
    qkv: Tensor  # [H, (heads + 2 kv_heads) * head_dim]
    out: Tensor  # [heads * head_dim, H]
    up: Tensor  # [H, M]
    down: Tensor  # [M, H]


def _rms_norm(x: Tensor) -> Tensor:
    return F.rms_norm(x, (x.shape[-1],), eps=1e-6)


def attention(q: Tensor, k: Tensor, v: Tensor, visible: Tensor) -> Tensor:
    """``q [G, Q, h, d]`` against ``k, v [G, L, kv_h, d]`` (``h`` a multiple of ``kv_h``: grouped-query
    attention): query ``(g, i)`` sees key ``(g, l)`` where ``visible[g, i, l]`` (``>= 1`` per query)."""
    return _attention(q, k, v, ~visible[:, None, None])


def _attention(q: Tensor, k: Tensor, v: Tensor, hidden: Tensor) -> Tensor:
    """:func:`attention` given ``hidden = ~visible[:, None, None]`` (made once for every layer)."""
    groups, queries, heads, dim = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(groups, queries, kv_heads, heads // kv_heads, dim)
    scores = torch.einsum("gqkhd,glkd->gkhql", q, k) * dim**-0.5
    scores = scores.masked_fill(hidden, float("-inf"))
    out = torch.einsum("gkhql,glkd->gqkhd", scores.softmax(-1), v)
    return out.reshape(groups, queries, heads, dim)


class TinyLM:
    def __init__(self, config: ModelConfig, device: torch.device | str, dtype: torch.dtype) -> None:
        if config.hidden % config.num_heads:
            raise ValueError("hidden must be a multiple of num_heads")
        if config.num_heads % config.kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if not 1 <= config.draft_layers <= config.num_layers:
            raise ValueError("draft_layers must lie in [1, num_layers]")
        self.config = config
        hidden, head_dim = config.hidden, config.head_dim
        weight = _weight_source(config.seed, torch.device(device), dtype)
        self.embedding = weight(config.vocab_size, hidden, std=1.0)
        self.position_embedding = weight(config.max_positions, hidden, std=0.5)
        self.blocks = []
        q_width = config.num_heads * head_dim
        qkv_width = q_width + 2 * config.kv_heads * head_dim
        for index in range(config.num_layers):
            scale = 1.0 if index < config.draft_layers else config.later_layer_scale
            self.blocks.append(
                _Block(
                    qkv=weight(hidden, qkv_width, std=hidden**-0.5),
                    out=weight(q_width, hidden, std=scale * q_width**-0.5),
                    up=weight(hidden, config.mlp, std=hidden**-0.5),
                    down=weight(config.mlp, hidden, std=scale * config.mlp**-0.5),
                )
            )
        if config.state_size:
            self.state_in = weight(hidden, config.state_size, std=hidden**-0.5)
            # states sum up to 1 / (1 - 0.95) = 20 inputs: keep the block as small as the skipped layers
            self.state_out = weight(
                config.state_size, hidden, std=config.later_layer_scale / (20 * config.state_size**0.5)
            )
            # per-channel decay in (0, 1), kept as its log: states are sums of decay**distance
            decay = torch.linspace(0.5, 0.95, config.state_size, dtype=torch.float64)
            self.log_decay = decay.log().to(device, dtype)
        self.head = weight(hidden, config.vocab_size, std=3.0 * hidden**-0.5)
        self.fc: Tensor | None = None
        if config.reads_features:
            # [embedding; hidden state] -> the first draft block's input: the embedding passes through
            feature = weight(hidden, hidden, std=config.draft_feature_scale * hidden**-0.5)
            identity = torch.eye(hidden, device=feature.device, dtype=dtype)
            self.fc = torch.cat([identity, feature])

    @property
    def has_recurrent(self) -> bool:
        return self.config.state_size > 0

    # ---- pieces the engine composes ---------------------------------------------------------

    def embed(self, tokens: Tensor, positions: Tensor) -> Tensor:
        return self.embedding[tokens] + self.position_embedding[positions]

    def draft_embed(self, tokens: Tensor, positions: Tensor, features: Tensor | None) -> Tensor:
        """The draft's input rows: the token embedding, through the fc with ``features`` (the
        hidden state each row reads) when the draft is EAGLE-shaped."""
        x = self.embed(tokens, positions)
        if self.fc is None:
            return x
        assert features is not None  # the engine passes them whenever the model reads them
        return torch.cat([x, features], -1) @ self.fc

    def qkv(self, layer: int, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        rows, config = x.shape[0], self.config
        q_width = config.num_heads * config.head_dim
        kv_width = config.kv_heads * config.head_dim
        q, k, v = (_rms_norm(x) @ self.blocks[layer].qkv).split([q_width, kv_width, kv_width], -1)
        return (
            q.reshape(rows, config.num_heads, -1),
            k.reshape(rows, config.kv_heads, -1),
            v.reshape(rows, config.kv_heads, -1),
        )

    def finish_block(self, layer: int, x: Tensor, attended: Tensor) -> Tensor:
        block = self.blocks[layer]
        x = x + attended.reshape(x.shape[0], -1) @ block.out
        return x + F.gelu(_rms_norm(x) @ block.up) @ block.down

    def paged_layers(
        self,
        x: Tensor,
        layers: range,
        write_slots: Tensor,
        kv_slots: Tensor,
        visible: Tensor,
        k_cache: list[Tensor],
        v_cache: list[Tensor],
    ) -> Tensor:
        """Run attention blocks over rows ``x [G*Q, H]``, ``Q`` consecutive rows per group: each row's
        K/V goes to ``write_slots`` first, then query ``i`` of group ``g`` attends to the cache slots
        ``kv_slots[g] ([G, L])`` where ``visible[g, i] ([G, Q, L])``."""
        groups, queries = visible.shape[0], visible.shape[1]
        hidden = ~visible[:, None, None]
        for layer in layers:
            q, k, v = self.qkv(layer, x)
            k_cache[layer].index_copy_(0, write_slots, k)
            v_cache[layer].index_copy_(0, write_slots, v)
            q = q.view(groups, queries, *q.shape[1:])
            attended = _attention(q, k_cache[layer][kv_slots], v_cache[layer][kv_slots], hidden)
            x = self.finish_block(layer, x, attended)
        return x

    def recurrent_states(self, x: Tensor, ancestors: Tensor, depth: Tensor, previous: Tensor) -> Tensor:
        """States after each of T tokens per sequence: ``x [B, T, H]``, ``ancestors [B, T, T]`` (token i
        sees j, itself included), ``depth [B, T]`` (0 = first token), ``previous [B, N]`` (the state
        before the first token). ``state_i = decay**(depth_i+1) * previous + sum_j decay**(depth_i -
        depth_j) * u_j`` over j in ancestors: the closed form of ``s = decay * s + u``, for chains and
        for draft trees alike."""
        inputs = _rms_norm(x) @ self.state_in  # [B, T, N]
        distance = (depth[:, :, None] - depth[:, None, :]).clamp(min=0)
        weights = torch.exp(distance[..., None] * self.log_decay) * ancestors[..., None]
        carried = torch.exp((depth[..., None] + 1) * self.log_decay) * previous[:, None, :]
        return torch.einsum("bijn,bjn->bin", weights, inputs) + carried

    def add_recurrent(self, x: Tensor, states: Tensor) -> Tensor:
        return x + states @ self.state_out

    def logits(self, x: Tensor) -> Tensor:
        return _rms_norm(x) @ self.head

    # ---- the reference: no cache, no speculation ---------------------------------------------

    def dense_hidden(self, tokens: Tensor) -> Tensor:
        """The target's last hidden state (pre-norm) at every position of ``tokens [B, T]`` (causal;
        right padding is harmless): what the EAGLE-style draft reads."""
        batch, length = tokens.shape
        positions = torch.arange(length, device=tokens.device)
        x = self.embed(tokens, positions.expand(batch, length)).reshape(batch * length, -1)
        causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()
        hidden = ~causal.expand(batch, 1, 1, -1, -1)
        for layer in range(self.config.num_layers):
            q, k, v = (t.reshape(batch, length, *t.shape[1:]) for t in self.qkv(layer, x))
            x = self.finish_block(layer, x, _attention(q, k, v, hidden))
        x = x.view(batch, length, -1)
        if self.has_recurrent:
            previous = x.new_zeros(batch, self.config.state_size)
            states = self.recurrent_states(
                x, causal.expand(batch, -1, -1), positions.expand(batch, -1), previous
            )
            x = self.add_recurrent(x, states)
        return x

    def dense_logits(self, tokens: Tensor) -> Tensor:
        """Target logits at every position of ``tokens [B, T]`` (causal; right padding is harmless)."""
        return self.logits(self.dense_hidden(tokens))


def _weight_source(seed: int, device: torch.device, dtype: torch.dtype) -> Callable[..., Tensor]:
    """``weight(*shape, std)``: normal weights from one generator on ``device`` (no host-to-device
    copy of a large model), drawn in float64 and then cast, so every dtype rounds the same draws."""
    if device.type == "meta":
        return lambda *shape, std: torch.empty(shape, device=device, dtype=dtype)
    try:
        generator = torch.Generator(device=device).manual_seed(seed)
        where = device
    except RuntimeError:  # a device without its own generator: draw on the host
        generator, where = torch.Generator().manual_seed(seed), torch.device("cpu")

    def weight(*shape: int, std: float) -> Tensor:
        draw = torch.randn(*shape, generator=generator, device=where, dtype=torch.float64)
        return (draw * std).to(device, dtype)

    return weight


def apply_token_bitmask(logits: Tensor, bitmask: Tensor) -> Tensor:
    """``logits [rows, V]`` with tokens whose bit is 0 in ``bitmask [rows, ceil(V/32)]`` set to -inf
    (bit t % 32 of word t // 32, LSB first: the layout of spec_hal's grammar ops)."""
    vocab = logits.shape[1]
    token = torch.arange(vocab, device=logits.device)
    words = bitmask[:, token // 32]
    allowed = ((words >> (token % 32).to(words.dtype)) & 1).bool()
    return logits.masked_fill(~allowed, float("-inf"))


def greedy_reference(
    model: TinyLM, prompts: list[list[int]], max_new_tokens: int, grammars: list | None = None
) -> list[list[int]]:
    """Plain greedy decoding of the target: a full causal forward per new token, no cache.

    ``grammars`` (optional, one per prompt): objects with ``fill_vocab_mask``, ``accept_token``,
    ``is_terminated`` and ``allocate_vocab_mask`` (spec_hal's Grammar protocol); a request ends
    when its grammar terminates."""
    device = model.embedding.device
    sequences = [list(p) for p in prompts]
    outputs: list[list[int]] = [[] for _ in prompts]
    active = list(range(len(prompts)))
    vocab = model.config.vocab_size
    while active:
        longest = max(len(sequences[r]) for r in active)
        padded = torch.zeros(len(active), longest, dtype=torch.long, device=device)
        for row, r in enumerate(active):
            padded[row, : len(sequences[r])] = torch.tensor(sequences[r])
        last = torch.tensor([len(sequences[r]) - 1 for r in active], device=device)
        logits = model.dense_logits(padded)[torch.arange(len(active), device=device), last]
        if grammars is not None:
            mask = grammars[active[0]].allocate_vocab_mask(vocab, len(active), torch.device("cpu"))
            for row, r in enumerate(active):
                grammars[r].fill_vocab_mask(mask, row)
            logits = apply_token_bitmask(logits, mask.to(device))
        chosen = logits.argmax(-1).tolist()
        still = []
        for r, token in zip(active, chosen, strict=True):
            sequences[r].append(token)
            outputs[r].append(token)
            if grammars is not None:
                grammars[r].accept_token(token)
            done = grammars is not None and grammars[r].is_terminated()
            if len(outputs[r]) < max_new_tokens and not done:
                still.append(r)
        active = still
    return outputs
