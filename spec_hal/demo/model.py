"""A tiny decoder-only transformer in plain torch: the target of the demo, and its draft.

Random weights from a fixed seed, so nothing is downloaded. The target is ``num_layers`` attention
blocks, then (optionally) one diagonal linear-recurrent block, the smallest layer whose per-request
state must be committed after verify like a mamba layer's. The draft is self-speculative: the first
``draft_layers`` attention blocks of the same weights, then the target's final norm and head. Later
blocks only add to the residual stream (scaled by ``later_layer_scale``), so the draft's argmax agrees
with the target's often but not always: acceptance is meaningful.

The engine (``loop.py``) reads keys and values from a paged cache through per-row slot tables;
:meth:`TinyLM.dense_logits` recomputes a whole sequence without any cache and is the independent
reference the speculative output is compared with.
"""

from __future__ import annotations

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
    draft_layers: int = 2  # the draft is the target's first layers (self-speculative)
    state_size: int = 8  # the recurrent block's state per request; 0 = no recurrent block
    max_positions: int = 1024
    later_layer_scale: float = 0.2  # residual weight of blocks the draft skips
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads


@dataclass
class _Block:
    qkv: Tensor  # [H, 3H]
    out: Tensor  # [H, H]
    up: Tensor  # [H, 2H]
    down: Tensor  # [2H, H]


def _rms_norm(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def attention(q: Tensor, k: Tensor, v: Tensor, visible: Tensor) -> Tensor:
    """``q [rows, h, d]`` against ``k, v [rows, L, h, d]``; ``visible [rows, L]`` (>= 1 per row)."""
    scores = torch.einsum("rhd,rlhd->rhl", q, k) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
    return torch.einsum("rhl,rlhd->rhd", scores.softmax(-1), v)


class TinyLM:
    def __init__(self, config: ModelConfig, device: torch.device | str, dtype: torch.dtype) -> None:
        if config.hidden % config.num_heads:
            raise ValueError("hidden must be a multiple of num_heads")
        if not 1 <= config.draft_layers <= config.num_layers:
            raise ValueError("draft_layers must lie in [1, num_layers]")
        self.config = config
        generator = torch.Generator().manual_seed(config.seed)
        hidden = config.hidden

        def weight(*shape: int, std: float) -> Tensor:
            return (torch.randn(*shape, generator=generator, dtype=torch.float64) * std).to(device, dtype)

        self.embedding = weight(config.vocab_size, hidden, std=1.0)
        self.position_embedding = weight(config.max_positions, hidden, std=0.5)
        self.blocks = []
        for index in range(config.num_layers):
            scale = 1.0 if index < config.draft_layers else config.later_layer_scale
            self.blocks.append(
                _Block(
                    qkv=weight(hidden, 3 * hidden, std=hidden**-0.5),
                    out=weight(hidden, hidden, std=scale * hidden**-0.5),
                    up=weight(hidden, 2 * hidden, std=hidden**-0.5),
                    down=weight(2 * hidden, hidden, std=scale * (2 * hidden) ** -0.5),
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

    @property
    def has_recurrent(self) -> bool:
        return self.config.state_size > 0

    # ---- pieces the engine composes ---------------------------------------------------------

    def embed(self, tokens: Tensor, positions: Tensor) -> Tensor:
        return self.embedding[tokens] + self.position_embedding[positions]

    def qkv(self, layer: int, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        rows, heads = x.shape[0], self.config.num_heads
        q, k, v = (_rms_norm(x) @ self.blocks[layer].qkv).view(rows, 3, heads, -1).unbind(1)
        return q, k, v

    def finish_block(self, layer: int, x: Tensor, attended: Tensor) -> Tensor:
        block = self.blocks[layer]
        x = x + attended.reshape(x.shape) @ block.out
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
        """Run attention blocks over rows ``x``: each row's K/V goes to ``write_slots`` first, then
        row r attends to the cache slots ``kv_slots[r]`` where ``visible[r]``."""
        for layer in layers:
            q, k, v = self.qkv(layer, x)
            k_cache[layer].index_copy_(0, write_slots, k)
            v_cache[layer].index_copy_(0, write_slots, v)
            attended = attention(q, k_cache[layer][kv_slots], v_cache[layer][kv_slots], visible)
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

    def dense_logits(self, tokens: Tensor) -> Tensor:
        """Target logits at every position of ``tokens [B, T]`` (causal; right padding is harmless)."""
        batch, length = tokens.shape
        positions = torch.arange(length, device=tokens.device)
        x = self.embed(tokens, positions.expand(batch, length)).reshape(batch * length, -1)
        causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()
        heads = self.config.num_heads
        for layer in range(self.config.num_layers):
            q, k, v = (t.reshape(batch, length, heads, -1) for t in self.qkv(layer, x))
            scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
            scores = scores.masked_fill(~causal, float("-inf"))
            attended = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)
            x = self.finish_block(layer, x, attended.reshape(batch * length, -1))
        if self.has_recurrent:
            x = x.view(batch, length, -1)
            previous = x.new_zeros(batch, self.config.state_size)
            states = self.recurrent_states(
                x, causal.expand(batch, -1, -1), positions.expand(batch, -1), previous
            )
            x = self.add_recurrent(x, states).reshape(batch * length, -1)
        return self.logits(x).view(batch, length, -1)


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
            mask = grammars[active[0]].allocate_vocab_mask(vocab, len(active), "cpu")
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
