"""Loop oracles for family C (tree build / verify / accept), written from the op contracts.

One request at a time, on Python lists, following the spec's pseudo-code line by line. They
mutate the tensors they are given (as the ops' in-out and out arguments) and never share code with
``spec_hal.ops.tree``.
"""

from __future__ import annotations

import math

import torch


def organize_draft_results(score_list, token_list, parents_list, draft_token_num):
    bs = score_list[0].shape[0]
    parents, selected, tokens = [], [], []
    for b in range(bs):
        scores = [float(x) for s in score_list for x in s[b].flatten().tolist()]
        toks = [int(x) for t in token_list for x in t[b].tolist()]
        # Largest first; NaN counts as largest; ties: the lower flat index first.
        order = sorted(range(len(scores)), key=lambda i: (0 if math.isnan(scores[i]) else 1, -scores[i], i))
        chosen = sorted(order[: draft_token_num - 1])
        selected.append(chosen)
        tokens.append([toks[i] for i in chosen])
        parents.append([int(x) for p in parents_list[:-1] for x in p[b].tolist()])
    width = sum(p.shape[1] for p in parents_list[:-1])
    return (
        torch.tensor(parents, dtype=torch.int64).reshape(bs, width),
        torch.tensor(selected, dtype=torch.int64).reshape(bs, draft_token_num - 1),
        torch.tensor(tokens, dtype=torch.int64).reshape(bs, draft_token_num - 1),
    )


INVALID = -2


def tree_parents(parent_row, selected_row, topk, num_nodes):
    """parent[i] per the spec: 0 root, p+1 on a match among the D-1 selected, INVALID otherwise."""
    parents = [-1]
    for i in range(1, num_nodes):
        q = selected_row[i - 1] // topk
        if q == 0:
            parents.append(0)
            continue
        found = INVALID
        if 0 <= q < len(parent_row):
            for p in range(num_nodes - 1):
                if selected_row[p] == parent_row[q]:
                    found = p + 1
                    break
        parents.append(found)
    return parents


def build_tree(parent_list, selected_index, seq_lens, topk, num_steps, num_nodes, mode, tree_mask):
    """Returns (tree_mask, positions, retrieve_index, next_token, next_sibling) with tree_mask updated
    in place of a copy of the given one."""
    bs = seq_lens.shape[0]
    tree_mask = tree_mask.clone()
    positions = torch.zeros(bs * num_nodes, dtype=torch.int64)
    ri = torch.zeros(bs, num_nodes, dtype=torch.int64)
    nt = torch.full((bs, num_nodes), -1, dtype=torch.int64)
    ns = torch.full((bs, num_nodes), -1, dtype=torch.int64)
    seqs = seq_lens.tolist()
    offset = 0
    for b in range(bs):
        parents = tree_parents(parent_list[b].tolist(), selected_index[b].tolist(), topk, num_nodes)
        for i in range(num_nodes):
            ri[b, i] = b * num_nodes + i
        for i in range(num_nodes - 1, 0, -1):
            p = parents[i]
            if p == INVALID:
                continue
            ns[b, i] = nt[b, p]
            nt[b, p] = i
        for i in range(num_nodes):
            row = [False] * num_nodes
            row[0] = True
            depth = 0
            if i > 0:
                cur = i
                for _ in range(num_steps):
                    row[cur] = True
                    depth += 1
                    p = parents[cur]
                    if p == 0 or p == INVALID:
                        break
                    cur = p
            positions[b * num_nodes + i] = seqs[b] + depth
            if mode == 0:
                start = offset + i * (seqs[b] + num_nodes) + seqs[b]
                for j in range(num_nodes):
                    tree_mask[start + j] = row[j]
            elif mode == 1:
                for j in range(num_nodes):
                    tree_mask[(b * num_nodes + i) * num_nodes + j] = row[j]
            else:
                item = int(tree_mask[b * num_nodes + i])
                for j in range(num_nodes):
                    if row[j]:
                        item |= 1 << j
                tree_mask[b * num_nodes + i] = torch.tensor(item).to(tree_mask.dtype)
        offset += seqs[b] * num_nodes + num_nodes * num_nodes
    return tree_mask, positions, ri, nt, ns


def _walk(b, num_nodes, width, next_token, next_sibling, accept):
    """The §C3 walk of request b; ``accept(step, cur_node, child)`` tests one sibling (side effects
    allowed). Returns the accepted local path, root first."""
    path = [0]
    cur = 0
    for step in range(width - 1):
        cur = next_token[b][cur]
        scanned = 0
        while cur != -1 and scanned < num_nodes - 1:  # a sibling list is at most D-1 long
            scanned += 1
            if accept(step, path[-1], cur):
                path.append(cur)
                break
            cur = next_sibling[b][cur]
        else:
            cur = -1
        if cur == -1:
            break
    return path


def verify_tree_greedy(predicts, accept_index, num_correct, candidates, ri, nt, ns, target_predict):
    bs, num_nodes = candidates.shape
    width = accept_index.shape[1]
    cand, ri_l, nt_l, ns_l = candidates.tolist(), ri.tolist(), nt.tolist(), ns.tolist()
    target_flat = target_predict.flatten().tolist()
    for b in range(bs):

        def accept(step, node, child, b=b):
            return cand[b][child] == target_flat[ri_l[b][node]]

        path = _walk(b, num_nodes, width, nt_l, ns_l, accept)
        for k, node in enumerate(path):
            accept_index[b, k] = ri_l[b][node]
            predicts[ri_l[b][node]] = target_flat[ri_l[b][node]]
        num_correct[b] = len(path) - 1


def _sample(weights, coin, fallback_last_positive):
    total = 0.0
    for w in weights:
        total += w
    threshold = coin * total
    running = 0.0
    for j, w in enumerate(weights):
        running += w
        if running > threshold:
            return j
    if fallback_last_positive:
        for j in range(len(weights) - 1, -1, -1):
            if weights[j] > 0:
                return j
    return len(weights) - 1


def tree_sampling(
    predicts,
    accept_index,
    num_correct,
    candidates,
    ri,
    nt,
    ns,
    u,
    u_final,
    target_probs,
    draft_probs,
    t_single,
    t_acc,
):
    bs, num_nodes = candidates.shape
    width = accept_index.shape[1]
    t_acc = max(t_acc, 1e-9)  # only threshold_acc is clamped (it divides), as sglang
    cand, ri_l, nt_l, ns_l = candidates.tolist(), ri.tolist(), nt.tolist(), ns.tolist()
    for b in range(bs):
        state = {"acc": 0.0, "step": None}

        def accept(step, node, child, b=b, state=state):
            if state["step"] != step:  # a new step: fresh running sum
                state["step"], state["acc"] = step, 0.0
            t = cand[b][child]
            p = float(target_probs[b, node, t])
            state["acc"] += p
            if float(u[b, node]) <= state["acc"] / t_acc or p >= t_single:
                return True
            draft_probs[b, node, t] = p
            return False

        path = _walk(b, num_nodes, width, nt_l, ns_l, accept)
        n = len(path) - 1
        for k in range(n):
            accept_index[b, k] = ri_l[b][path[k]]
            predicts[ri_l[b][path[k]]] = cand[b][path[k + 1]]
        last = path[-1]
        target_row = target_probs[b, last].tolist()
        if n == width - 1:
            residual = target_row
        else:
            draft_row = draft_probs[b, last].tolist()
            residual = [max(p - q, 0.0) for p, q in zip(target_row, draft_row, strict=True)]
        accept_index[b, n] = ri_l[b][last]
        predicts[ri_l[b][last]] = _sample(residual, float(u_final[b]), True)
        num_correct[b] = n


def chain_sampling(
    predicts, accept_index, num_correct, candidates, ri, u, u_final, target_probs, draft_probs
):
    bs, num_nodes = candidates.shape
    for b in range(bs):
        n = 0
        for c in range(1, num_nodes):
            x = int(candidates[b, c])
            p = float(target_probs[b, c - 1, x])
            q = float(draft_probs[b, c - 1, x])
            if math.isnan(q):
                q = 0.0
            if float(u[b, c - 1]) * q < p:
                n += 1
            else:
                break
        for k in range(n + 1):
            accept_index[b, k] = int(ri[b, k])
        for k in range(n):
            predicts[int(ri[b, k])] = int(candidates[b, k + 1])
        target_row = target_probs[b, n].tolist()
        if n == num_nodes - 1:
            residual = target_row
        else:
            draft_row = [0.0 if math.isnan(q) else q for q in draft_probs[b, n].tolist()]
            residual = [max(p - q, 0.0) for p, q in zip(target_row, draft_row, strict=True)]
        predicts[int(ri[b, n])] = _sample(residual, float(u_final[b]), False)
        num_correct[b] = n


def fill_bonus_tokens(accept_tokens, accept_lens, bonus):
    for b in range(accept_tokens.shape[0]):
        bonus[b] = int(accept_tokens[b, int(accept_lens[b]) - 1])


def pack_ngram_full_mask(draft_tree_mask, seq_lens, num_nodes, full_mask):
    offset = 0
    for b, seq in enumerate(seq_lens.tolist()):
        for i in range(num_nodes):
            start = offset + i * (seq + num_nodes)
            for j in range(seq):
                full_mask[start + j] = True
            for j in range(num_nodes):
                full_mask[start + seq + j] = bool(draft_tree_mask[(b * num_nodes + i) * num_nodes + j])
        offset += seq * num_nodes + num_nodes * num_nodes


def reconstruct_indices(tree_mask, seq_lens, num_nodes):
    bs = seq_lens.shape[0]
    mask = tree_mask.view(bs, num_nodes, num_nodes).tolist()
    positions = torch.zeros(bs * num_nodes, dtype=torch.int64)
    ri = torch.zeros(bs, num_nodes, dtype=torch.int64)
    nt = torch.full((bs, num_nodes), -1, dtype=torch.int64)
    ns = torch.full((bs, num_nodes), -1, dtype=torch.int64)
    for b in range(bs):
        m = mask[b]

        def parent_of(i, m=m):
            for j in range(i - 1, -1, -1):
                if m[i][j]:
                    return j
            return -1

        for i in range(num_nodes):
            depth = sum(1 for j in range(i) if m[i][j])
            positions[b * num_nodes + i] = int(seq_lens[b]) + depth
            ri[b, i] = b * num_nodes + i
            for later in range(i + 1, num_nodes):
                if m[later][i]:
                    nt[b, i] = later
                    break
            parent = parent_of(i)
            if parent != -1:
                for later in range(i + 1, num_nodes):
                    if parent_of(later) == parent:
                        ns[b, i] = later
                        break
    return positions, ri, nt, ns
