"""Loop oracles for family E, written from the spec.

The random draws come in as arguments: the standard normal ``z`` or uniform ``u`` of E1, the
length ``L`` of E2.
"""

from __future__ import annotations

import math

import torch

SIMULATED_TOKEN = 100


def sample_simulated_acc_len(mean: float, method: str, max_len: int, z: float, u: float) -> int:
    """E1 from one standard normal ``z`` ("multinomial") or one uniform ``u`` ("match-expected")."""
    if method == "multinomial":
        value = mean + z
        value = max(1.0, min(float(max_len), value))
        return round(value)  # half to even, as torch.round
    m = max(1.0, min(float(max_len), mean))
    lo = math.floor(m)
    hi = lo + 1 if lo < max_len else lo
    return hi if u < m - lo else lo


def generate_simulated_accept_index(
    accept_index, predicts, candidates, target_predict, num_steps, token_mode, accept_len, new_accept_index
):
    """E2 with the drawn length ``accept_len``: returns (new_accept_index, predicts, num_correct_drafts).

    ``new_accept_index`` is the output as passed: rows whose root is -1 (padding) keep it.
    """
    bs, D = candidates.shape
    L = accept_len
    width = num_steps + 1
    roots = accept_index[:, 0].tolist()
    new_rows = new_accept_index.tolist()
    new_predicts = predicts.tolist()
    for b in range(bs):
        if roots[b] == -1:
            continue
        new_rows[b] = [-1] * width
        for k in range(L):
            new_rows[b][k] = roots[b] + k
    if token_mode == "fixed":
        new_predicts = [SIMULATED_TOKEN] * len(new_predicts)
    else:
        cand, target = candidates.tolist(), target_predict.tolist()
        for b in range(bs):
            for k in range(L - 1):
                new_predicts[b * D + k] = cand[b][k + 1]
            new_predicts[b * D + L - 1] = target[b][L - 1]
    return (
        torch.tensor(new_rows, dtype=torch.int32).reshape(bs, width),
        torch.tensor(new_predicts, dtype=torch.int32),
        torch.full((bs,), L - 1, dtype=torch.int32),
    )
