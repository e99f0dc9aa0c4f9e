"""Loop oracles for family D, written from the spec, one row at a time.

Each takes CPU tensors and returns new CPU tensors; random draws come in as tensors (the Exp(1)
noise of the exponential race), as in the contract. Float32 arithmetic is reproduced exactly by
rounding each double result to float32 (a product or quotient of two float32 values rounds
identically that way).
"""

from __future__ import annotations

import math
import struct

import torch

FLOAT32_TINY = torch.finfo(torch.float32).tiny
NAN_LOGIT = -1e30
SIMULATED_TOKEN = 100


def f32(x: float) -> float:
    """``x`` rounded to float32."""
    if math.isnan(x) or math.isinf(x):
        return x
    return struct.unpack("f", struct.pack("f", x))[0]


def _first_max(row: list[float]) -> int:
    best = 0
    for j, value in enumerate(row):
        if value > row[best]:
            best = j
    return best


# D1 -------------------------------------------------------------------------------------------------


def fast_topk(values: torch.Tensor, k: int, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    moved = values.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1]).tolist()
    top_values, top_indices = [], []
    for row in rows:
        order = sorted(range(len(row)), key=lambda j: -row[j])[:k]
        top_values.append([row[j] for j in order])
        top_indices.append(order)
    shape = (*moved.shape[:-1], k)
    out_values = torch.tensor(top_values, dtype=values.dtype).reshape(shape).movedim(-1, dim)
    out_indices = torch.tensor(top_indices, dtype=torch.int64).reshape(shape).movedim(-1, dim)
    return out_values, out_indices


# D2 -------------------------------------------------------------------------------------------------


def exponential_race(probs_row: list[float], noise_row: list[float], num_samples: int) -> list[int]:
    """Ids of the ``num_samples`` largest fp32 ``p / max(E, tiny)``, largest first (ties: lowest id)."""
    scores = [f32(f32(p) / max(e, FLOAT32_TINY)) for p, e in zip(probs_row, noise_row, strict=True)]
    return sorted(range(len(scores)), key=lambda j: -scores[j])[:num_samples]


def fast_sample(
    probs: torch.Tensor, noise: torch.Tensor, num_samples: int
) -> tuple[torch.Tensor, torch.Tensor]:
    probs_rows, noise_rows = probs.tolist(), noise.tolist()
    picked = [exponential_race(p, e, num_samples) for p, e in zip(probs_rows, noise_rows, strict=True)]
    values = [[probs_rows[b][j] for j in ids] for b, ids in enumerate(picked)]
    shape = (probs.shape[0], num_samples)
    return torch.tensor(values, dtype=probs.dtype).reshape(shape), torch.tensor(
        picked, dtype=torch.int64
    ).reshape(shape)


# D3 / D4 --------------------------------------------------------------------------------------------


def softmax_row(logits_row: list[float], temperature: float | None) -> list[float]:
    scaled = [x if temperature is None else f32(x / temperature) for x in logits_row]
    top = max(scaled)
    exps = [math.exp(x - top) for x in scaled]
    total = sum(exps)
    return [e / total for e in exps]


def renorm_draft_probs(
    logits: torch.Tensor, temperatures: torch.Tensor | None, use_rejection_sampling: bool
) -> torch.Tensor:
    rows = logits.float().tolist()
    temps = temperatures.flatten().tolist() if use_rejection_sampling else [None] * len(rows)
    probs = [softmax_row(row, t) for row, t in zip(rows, temps, strict=True)]
    return torch.tensor(probs, dtype=torch.float32).reshape(logits.shape)


def sample_draft_proposal(
    logits: torch.Tensor, temperatures: torch.Tensor, top_ks: torch.Tensor | None, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = renorm_draft_probs(logits, temperatures, True)
    q_rows, noise_rows = q.tolist(), noise.tolist()
    tokens = []
    for b, row in enumerate(q_rows):
        if top_ks is not None and int(top_ks[b]) <= 1:
            tokens.append(_first_max(row))
        else:
            tokens.append(exponential_race(row, noise_rows[b], 1)[0])
    q_x = [[q_rows[b][x]] for b, x in enumerate(tokens)]
    batch = logits.shape[0]
    return (
        q,
        torch.tensor(q_x, dtype=torch.float32).reshape(batch, 1),
        torch.tensor(tokens, dtype=torch.int64).reshape(batch, 1),
    )


# D5 -------------------------------------------------------------------------------------------------


def select_top_k_tokens(i, topk_p, topk_index, hidden_states, scores, topk):
    K = topk
    p, tok = topk_p.tolist(), topk_index.tolist()
    if i == 0:
        b = len(p)
        input_ids = [tok[r][c] for r in range(b) for c in range(K)]
        hidden = None if hidden_states is None else hidden_states[[r for r in range(b) for _ in range(K)]]
        new_scores = p
        tree = (
            torch.tensor(p, dtype=torch.float32).reshape(b, 1, K),
            torch.tensor(tok, dtype=torch.int64).reshape(b, K),
            torch.tensor([list(range(-1, K)) for _ in range(b)], dtype=torch.int64).reshape(b, K + 1),
        )
    else:
        b = len(p) // K
        s = scores.tolist()
        expanded, flat_tokens, parents, input_ids, new_scores, rows = [], [], [], [], [], []
        for r in range(b):
            path = [[f32(s[r][a] * p[r * K + a][c]) for c in range(K)] for a in range(K)]
            flat = [path[a][c] for a in range(K) for c in range(K)]
            tokens = [tok[r * K + a][c] for a in range(K) for c in range(K)]
            chosen = sorted(range(K * K), key=lambda j, flat=flat: -flat[j])[:K]
            expanded.append(path)
            flat_tokens.append(tokens)
            new_scores.append([flat[j] for j in chosen])
            input_ids += [tokens[j] for j in chosen]
            parents.append([j + K * K * (i - 1) + K for j in chosen])
            rows += [r * K + j // K for j in chosen]
        hidden = None if hidden_states is None else hidden_states[rows]
        tree = (
            torch.tensor(expanded, dtype=torch.float32).reshape(b, K, K),
            torch.tensor(flat_tokens, dtype=torch.int64).reshape(b, K * K),
            torch.tensor(parents, dtype=torch.int64).reshape(b, K),
        )
    return (
        torch.tensor(input_ids, dtype=torch.int64),
        hidden,
        torch.tensor(new_scores, dtype=torch.float32).reshape(b, K),
        tree,
    )


# D6 -------------------------------------------------------------------------------------------------


def argmax_nan_low(row: list[float]) -> int:
    """The fp32 argmax with NaN as -1e30 and ties to the lowest id."""
    return _first_max([f32(NAN_LOGIT) if math.isnan(x) else f32(x) for x in row])


def draft_topk1_postprocess(logits, positions, draft_tokens, draft_token_column):
    tokens = [argmax_nan_low(row) for row in logits.double().tolist()]
    batch = len(tokens)
    new_positions = positions.clone()
    new_draft_tokens = None if draft_tokens is None else draft_tokens.clone()
    for b in range(batch):
        new_positions[b] += 1
        if new_draft_tokens is not None:
            new_draft_tokens[b, draft_token_column] = tokens[b]
    topk_p = torch.ones(batch, 1, dtype=torch.float32)
    topk_index = torch.tensor(tokens, dtype=torch.int64).reshape(batch, 1)
    return (topk_p, topk_index), new_positions, new_draft_tokens


def target_verify_topk1_postprocess(
    logits,
    candidates,
    retrieve_index,
    retrieve_next_token,
    seq_lens,
    num_simulated_accept_tokens,
    use_real_draft_tokens,
):
    bs, D = candidates.shape
    rows = logits.double().tolist()
    cand, ri, rnt = candidates.tolist(), retrieve_index.tolist(), retrieve_next_token.tolist()
    predicts = [0] * (bs * D)
    accept_index = [[-1] * D for _ in range(bs)]
    ncd, bonus = [0] * bs, [0] * bs
    n_sim = num_simulated_accept_tokens
    for b in range(bs):
        if n_sim > 0:
            for k in range(n_sim):
                accept_index[b][k] = b * D + k
            ncd[b] = n_sim - 1
            if use_real_draft_tokens:
                for k in range(n_sim - 1):
                    predicts[b * D + k] = cand[b][k + 1]
                bonus[b] = argmax_nan_low(rows[b * D + n_sim - 1])
                predicts[b * D + n_sim - 1] = bonus[b]
            continue
        last = ri[b][0]
        accept_index[b][0] = last
        n, cur = 0, 0
        for _ in range(D - 1):
            cur = rnt[b][cur]
            if cur == -1:
                break
            target = argmax_nan_low(rows[last])
            if cand[b][cur] != target:
                break
            predicts[last] = target
            n += 1
            accept_index[b][n] = ri[b][cur]
            last = ri[b][cur]
        ncd[b] = n
        bonus[b] = argmax_nan_low(rows[last])
        predicts[last] = bonus[b]
    if n_sim > 0 and not use_real_draft_tokens:
        predicts = [SIMULATED_TOKEN] * (bs * D)
        bonus = [SIMULATED_TOKEN] * bs
    seq = seq_lens.tolist()
    return (
        torch.tensor(predicts, dtype=torch.int32),
        torch.tensor(ncd, dtype=torch.int32),
        torch.tensor([n + 1 for n in ncd], dtype=torch.int32),
        torch.tensor(accept_index, dtype=torch.int32).reshape(bs, D),
        torch.tensor(bonus, dtype=torch.int32),
        torch.tensor([seq[b] + ncd[b] + 1 for b in range(bs)], dtype=torch.int64),
        torch.tensor([b * D + ncd[b] for b in range(bs)], dtype=torch.int64),
        torch.tensor(predicts, dtype=torch.int64),
    )


def draft_extend_topk1_postprocess(logits, row_indices, hidden_states, dsa_topk_indices):
    rows = logits.double().tolist()
    picked = row_indices.tolist()
    batch = len(picked)
    topk_index = torch.tensor([argmax_nan_low(rows[r]) for r in picked], dtype=torch.int64).reshape(batch, 1)
    hidden = None if hidden_states is None else hidden_states[picked]
    dsa = None if dsa_topk_indices is None else dsa_topk_indices[picked]
    return torch.ones(batch, 1, dtype=torch.float32), topk_index, hidden, dsa
