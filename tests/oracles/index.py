"""Loop oracles of family A (index plumbing), written from the op contracts, one request at a time.

Each oracle takes the op's keyword arguments as CPU tensors (every output given), writes the
outputs in place with plain Python loops over lists, and returns nothing. They share no code with
``spec_hal.ops.index`` on purpose.
"""

from __future__ import annotations

import torch


def _write(dest: torch.Tensor, values: list) -> None:
    dest.copy_(torch.tensor(values, dtype=dest.dtype).view(dest.shape))


def assign_extend_cache_locs(req_pool_indices, req_to_token, start, end, out):
    table = req_to_token.tolist()
    result = out.tolist()
    offset = 0
    for b, row in enumerate(req_pool_indices.tolist()):
        for column in range(int(start[b]), int(end[b])):
            result[offset] = table[row][column]
            offset += 1
    _write(out, result)


def assign_extend_cache_locs_uniform(req_pool_indices, req_to_token, start, draft_token_num, out):
    table = req_to_token.tolist()
    result = out.tolist()
    for b, row in enumerate(req_pool_indices.tolist()):
        for i in range(draft_token_num):
            result[b * draft_token_num + i] = table[row][int(start[b]) + i]
    _write(out, result)


def assign_req_to_token_pool(req_pool_indices, req_to_token, start, end, out_cache_loc):
    table = req_to_token.tolist()
    slots = out_cache_loc.tolist()
    offset = 0
    for b, row in enumerate(req_pool_indices.tolist()):
        for column in range(int(start[b]), int(end[b])):
            table[row][column] = slots[offset]
            offset += 1
    _write(req_to_token, table)


def draft_column(seq_len, t, s, topk, num_steps, page_size):
    """§A3: the req_to_token column of draft step s of branch t."""
    if page_size == 1 or topk == 1:
        return seq_len + t * num_steps + s
    partial = seq_len % page_size
    base = seq_len - partial
    pages_per_branch = -(-(partial + num_steps) // page_size)
    return base + t * pages_per_branch * page_size + partial + s


def assign_draft_cache_locs_contiguous(
    req_pool_indices, req_to_token, seq_lens, topk, num_steps, page_size, out
):
    table = req_to_token.tolist()
    result = out.tolist()
    for b, row in enumerate(req_pool_indices.tolist()):
        for t in range(topk):
            for s in range(num_steps):
                column = draft_column(int(seq_lens[b]), t, s, topk, num_steps, page_size)
                result[b * topk * num_steps + t * num_steps + s] = table[row][column]
    _write(out, result)


def generate_draft_decode_kv_indices(
    req_pool_indices, req_to_token, seq_lens, positions, page_size, topk, num_steps, kv_indices, kv_indptr
):
    table = req_to_token.tolist()
    lens = seq_lens.tolist()
    pos = positions.tolist()
    indices = kv_indices.tolist()
    indptr = kv_indptr.tolist()
    bs = len(lens)
    for s in range(num_steps):
        n = s + 1
        for b, row in enumerate(req_pool_indices.tolist()):
            cum = sum(lens[:b])
            length = lens[b]
            for t in range(topk):
                o = cum * topk + b * n * topk + t * (length + n)
                for i in range(length):
                    indices[s][o + i] = table[row][i]
                for i in range(n):
                    indices[s][o + length + i] = table[row][
                        draft_column(length, t, i, topk, num_steps, page_size)
                    ]
                z = b * topk + t
                z = z if z > 0 else bs * topk
                indptr[s][z] = sum(pos[:z]) + z * n
    _write(kv_indices, indices)
    _write(kv_indptr, indptr)


def fill_accept_out_cache_loc(accept_index, out_cache_loc, accept_out_cache_loc, size=None):
    flat = accept_index.flatten().tolist()
    if size is None:
        size = len(flat)
    slots = out_cache_loc.tolist()
    result = accept_out_cache_loc.tolist()
    rank = 0
    for p in range(size):
        if flat[p] != -1:
            result[rank] = slots[flat[p]]
            rank += 1
    _write(accept_out_cache_loc, result)


def get_src_tgt_cache_loc(
    seq_lens,
    out_cache_loc,
    accept_index,
    num_correct_drafts,
    draft_token_num,
    page_size,
    src_cache_loc,
    tgt_cache_loc,
    to_free_num_slots,
):
    slots = out_cache_loc.tolist()
    _write(src_cache_loc, [slots[i] for i in accept_index.tolist()])
    _write(tgt_cache_loc, [0] * tgt_cache_loc.numel())
    to_free = []
    for seq_len, ncd in zip(seq_lens.tolist(), num_correct_drafts.tolist(), strict=True):
        extended = seq_len + draft_token_num
        keep = min(-(-(seq_len + ncd + 1) // page_size) * page_size, extended)
        to_free.append(extended - keep)
    _write(to_free_num_slots, to_free)


def get_target_cache_loc(
    tgt_cache_loc, to_free_slots, num_correct_drafts, to_free_num_slots, out_cache_loc, draft_token_num
):
    slots = out_cache_loc.tolist()
    target = tgt_cache_loc.tolist()
    freed = to_free_slots.tolist()
    ncd = num_correct_drafts.tolist()
    free_num = to_free_num_slots.tolist()
    for b in range(len(ncd)):
        target_start = sum(n + 1 for n in ncd[:b])
        for i in range(ncd[b] + 1):
            target[target_start + i] = slots[b * draft_token_num + i]
        free_start = sum(free_num[:b])
        for i in range(free_num[b]):
            freed[free_start + i] = slots[b * draft_token_num + draft_token_num - free_num[b] + i]
    _write(tgt_cache_loc, target)
    _write(to_free_slots, freed)


def create_num_accept_tokens_filter(num_correct_drafts, unfinished_index, seq_lens, num_accept_tokens_filter):
    ncd = num_correct_drafts.tolist()
    result = [0] * len(ncd)
    for b in unfinished_index.tolist():
        result[b] = ncd[b] + 1
    _write(num_accept_tokens_filter, result)
    _write(seq_lens, [length + n + 1 for length, n in zip(seq_lens.tolist(), ncd, strict=True)])


def filter_finished_cache_loc(out_cache_loc, tgt_cache_loc, num_correct_drafts, num_accept_tokens_filter):
    target = tgt_cache_loc.tolist()
    result = out_cache_loc.tolist()
    ncd = num_correct_drafts.tolist()
    keep = num_accept_tokens_filter.tolist()
    for b in range(len(ncd)):
        source = sum(n + 1 for n in ncd[:b])
        dest = sum(keep[:b])
        for i in range(keep[b]):
            result[dest + i] = target[source + i]
    _write(out_cache_loc, result)


def align_evict_mask_to_page_size(seq_lens, evict_mask, page_size, draft_token_num):
    mask = evict_mask.tolist()
    for b, seq_len in enumerate(seq_lens.tolist()):
        row = mask[b * draft_token_num : (b + 1) * draft_token_num]
        kept = draft_token_num - sum(row)
        start = ((seq_len + kept - 1) // page_size) * page_size - seq_len
        for i in range(max(start, 0), min(start + page_size, draft_token_num)):
            mask[b * draft_token_num + i] = False
    _write(evict_mask, mask)


def rebuild_compact_draft_req_to_token(
    draft_req_to_token,
    target_req_to_token,
    req_pool_indices,
    suffix_start,
    draft_prefix_lens,
    verify_out_cache_loc,
):
    draft = draft_req_to_token.tolist()
    target = target_req_to_token.tolist()
    verify = verify_out_cache_loc.tolist()
    for b, row in enumerate(req_pool_indices.tolist()):
        prefix = int(draft_prefix_lens[b])
        for i in range(prefix):
            draft[row][i] = target[row][int(suffix_start[b]) + i]
        for j, slot in enumerate(verify[b]):
            draft[row][prefix + j] = slot
    _write(draft_req_to_token, draft)
