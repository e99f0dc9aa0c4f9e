"""Builders of family A's conformance arguments: seeded draws and one builder per op (``BUILDERS``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ... import grid
from ...case import benched

Kwargs = dict[str, Any]

#: Slack past the written total of every ragged output (entries the op must leave poisoned).
TAIL = 3
_SLOT_IDS = 1 << 24


def draft_token_num(topk: int, num_steps: int) -> int:
    """D used by the builders: a chain (S + 1) for topk 1, else a tree of K*S drafts plus the root."""
    return num_steps * topk + 1


class _Draw:
    """Seeded host-side draws, moved to ``device`` with the case's index dtype."""

    def __init__(self, device: torch.device, idx_dtype: torch.dtype, seed: int) -> None:
        self.device = torch.device(device)
        self.idx_dtype = idx_dtype
        self.seed = seed
        self.gen = torch.Generator().manual_seed(seed)

    def ints(self, low: int, high: int, *shape: int) -> torch.Tensor:
        """Uniform int64 in [low, high) on the host."""
        return torch.randint(low, high, shape, generator=self.gen, dtype=torch.int64)

    def perm(self, n: int) -> torch.Tensor:
        return torch.randperm(n, generator=self.gen)

    def idx(self, values: torch.Tensor | list, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.as_tensor(values, dtype=torch.int64).to(dtype or self.idx_dtype).to(self.device)

    def rows(self, bs: int, num_rows: int) -> torch.Tensor:
        """Distinct req_to_token rows for ``bs`` requests."""
        dtype = torch.int64 if self.seed % 2 else self.idx_dtype
        return self.idx(self.perm(num_rows)[:bs], dtype)

    def table(self, num_rows: int, width: int) -> torch.Tensor:
        return self.ints(0, _SLOT_IDS, num_rows, width).to(torch.int32).to(self.device)

    def slots(self, *shape: int) -> torch.Tensor:
        return self.idx(self.ints(0, _SLOT_IDS, *shape))

    def poison(self, *shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.full(shape, grid.POISON_INT, dtype=dtype, device=self.device)


def _windows(draw: _Draw, bs: int, width: int, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Column windows [start, end) inside a row of ``width`` columns, lengths in [0, max_len]."""
    lens = draw.ints(0, max_len + 1, bs)
    start = (draw.ints(0, 1 << 30, bs) % (width - lens + 1)) if bs else lens
    return start, start + lens


def build_assign_extend_cache_locs(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    d = draft_token_num(topk, num_steps)
    width = 4 * d + 16
    start, end = _windows(draw, bs, width, d)
    return {
        "req_pool_indices": draw.rows(bs, bs + 3),
        "req_to_token": draw.table(bs + 3, width),
        "start": draw.idx(start),
        "end": draw.idx(end),
        "out": draw.poison(int((end - start).sum()) + TAIL),
    }


def build_assign_extend_cache_locs_uniform(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    d = draft_token_num(topk, num_steps)
    width = 4 * d + 16
    return {
        "req_pool_indices": draw.rows(bs, bs + 3),
        "req_to_token": draw.table(bs + 3, width),
        "start": draw.idx(draw.ints(0, width - d + 1, bs)),
        "draft_token_num": d,
        "out": draw.poison(bs * d),
    }


def build_assign_req_to_token_pool(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    d = draft_token_num(topk, num_steps)
    width = 4 * d + 16
    start, end = _windows(draw, bs, width, 2 * d)
    return {
        "req_pool_indices": draw.rows(bs, bs + 3),
        "req_to_token": draw.table(bs + 3, width),
        "start": draw.idx(start),
        "end": draw.idx(end),
        "out_cache_loc": draw.slots(int((end - start).sum()) + TAIL),
    }


def _draft_pool_width(max_seq_len: int, topk: int, num_steps: int, page_size: int) -> int:
    # The paged tree layout reaches at most topk * (num_steps + 2*page_size) columns past the prefix.
    return max_seq_len + topk * (num_steps + 2 * page_size)


def build_assign_draft_cache_locs_contiguous(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    max_seq = 40
    return {
        "req_pool_indices": draw.rows(bs, bs + 3),
        "req_to_token": draw.table(bs + 3, _draft_pool_width(max_seq, topk, num_steps, page_size)),
        "seq_lens": draw.idx(draw.ints(0, max_seq + 1, bs)),
        "topk": topk,
        "num_steps": num_steps,
        "page_size": page_size,
        "out": draw.poison(bs * topk * num_steps),
    }


# draft KV indices at 32k context (bs 64, K 4, S 3 is typical)
@benched(large_sizes=({"bs": 64, "max_seq": 32768},))
def build_generate_draft_decode_kv_indices(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0, max_seq=24
):
    """``max_seq``: the longest prefix (the benchmarks use 32k contexts)."""
    draw = _Draw(device, idx_dtype, seed)
    seq_lens = draw.ints(0, max_seq + 1, bs)
    used = topk * int(seq_lens.sum()) + bs * topk * num_steps
    return {
        "req_pool_indices": draw.rows(bs, bs + 3),
        "req_to_token": draw.table(bs + 3, _draft_pool_width(max_seq, topk, num_steps, page_size)),
        "seq_lens": draw.idx(seq_lens),
        "positions": draw.idx(seq_lens.repeat_interleave(topk)),
        "page_size": page_size,
        "topk": topk,
        "num_steps": num_steps,
        "kv_indices": draw.poison(num_steps, used + TAIL, dtype=torch.int32),
        "kv_indptr": draw.poison(num_steps, bs * topk + 1 + TAIL, dtype=torch.int32),
    }


def _accepted_path(draw: _Draw, b: int, d: int, count: int) -> torch.Tensor:
    """``count`` distinct flat ids of request b's tree (``b*D + node``), the root first."""
    nodes = torch.cat([torch.zeros(1, dtype=torch.int64), 1 + draw.perm(d - 1)])[:count]
    return b * d + nodes


def _accept_index(draw: _Draw, bs: int, width: int, d: int) -> torch.Tensor:
    """[bs, width] accepted paths of random lengths (0 included: padding rows), -1 padded."""
    accept = torch.full((bs, width), -1, dtype=torch.int64)
    for b in range(bs):
        path = _accepted_path(draw, b, d, int(draw.ints(0, width + 1, 1)))
        accept[b, : path.numel()] = path
    return accept


def build_fill_accept_out_cache_loc(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    d = draft_token_num(topk, num_steps)
    width = num_steps + 1
    accept = _accept_index(draw, bs, width, d)
    size = None if seed % 3 == 0 else int(draw.ints(0, bs * width + 1, 1))
    return {
        "accept_index": draw.idx(accept),
        "out_cache_loc": draw.slots(bs * d),
        "accept_out_cache_loc": draw.poison((bs * width if size is None else size) + TAIL),
        "size": size,
    }


def _correct_drafts(draw: _Draw, bs: int, num_steps: int, d: int) -> torch.Tensor:
    return draw.ints(0, min(num_steps, d - 1) + 1, bs)


def _to_free_num_slots(seq_lens: torch.Tensor, ncd: torch.Tensor, d: int, page_size: int) -> torch.Tensor:
    extended = seq_lens + d
    keep = torch.minimum((seq_lens + ncd + page_size) // page_size * page_size, extended)
    return extended - keep


def build_get_src_tgt_cache_loc(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    d = draft_token_num(topk, num_steps)
    ncd = _correct_drafts(draw, bs, num_steps, d)
    paths = [_accepted_path(draw, b, d, int(ncd[b]) + 1) for b in range(bs)]
    compacted = torch.cat(paths) if bs else torch.zeros(0, dtype=torch.int64)
    return {
        "seq_lens": draw.idx(draw.ints(0, 50, bs)),
        "out_cache_loc": draw.slots(bs * d),
        "accept_index": draw.idx(compacted),
        "num_correct_drafts": draw.idx(ncd),
        "draft_token_num": d,
        "page_size": page_size,
        "src_cache_loc": draw.poison(compacted.numel()),
        "tgt_cache_loc": draw.poison(compacted.numel()),
        "to_free_num_slots": draw.poison(bs),
    }


def build_get_target_cache_loc(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    d = draft_token_num(topk, num_steps)
    ncd = _correct_drafts(draw, bs, num_steps, d)
    to_free = _to_free_num_slots(draw.ints(0, 50, bs), ncd, d, page_size)
    return {
        "tgt_cache_loc": draw.poison(int((ncd + 1).sum()) + TAIL),
        "to_free_slots": draw.poison(int(to_free.sum()) + TAIL),
        "num_correct_drafts": draw.idx(ncd),
        "to_free_num_slots": draw.idx(to_free),
        "out_cache_loc": draw.slots(bs * d),
        "draft_token_num": d,
    }


def build_create_num_accept_tokens_filter(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    d = draft_token_num(topk, num_steps)
    unfinished = draw.perm(bs)[: int(draw.ints(0, bs + 1, 1))].sort().values
    return {
        "num_correct_drafts": draw.idx(_correct_drafts(draw, bs, num_steps, d)),
        "unfinished_index": draw.idx(unfinished),
        "seq_lens": draw.idx(draw.ints(0, 1000, bs)),
        "num_accept_tokens_filter": draw.poison(bs, dtype=torch.int32),
    }


def build_filter_finished_cache_loc(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    d = draft_token_num(topk, num_steps)
    ncd = _correct_drafts(draw, bs, num_steps, d)
    keep = torch.where(draw.ints(0, 3, bs) > 0, ncd + 1, 0)  # about a third of the requests finished
    return {
        "out_cache_loc": draw.poison(int(keep.sum()) + TAIL),
        "tgt_cache_loc": draw.slots(int((ncd + 1).sum())),
        "num_correct_drafts": draw.idx(ncd),
        "num_accept_tokens_filter": draw.idx(keep),
    }


def build_align_evict_mask_to_page_size(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    d = num_steps + 1  # a chain: this op serves topk == 1
    kept = draw.ints(0, d + 1, bs)
    mask = torch.arange(d)[None, :] >= kept[:, None]  # kept tokens first, the rest freed
    scrambled = draw.ints(0, 4, bs) == 0  # a quarter of the rows: any pattern (only the count matters)
    mask = torch.where(scrambled[:, None], draw.ints(0, 2, bs, d).bool(), mask)
    return {
        "seq_lens": draw.idx(draw.ints(0, 40, bs)),
        "evict_mask": mask.reshape(-1).to(draw.device),
        "page_size": page_size,
        "draft_token_num": d,
    }


def build_rebuild_compact_draft_req_to_token(
    device, *, bs, topk=1, num_steps=1, page_size=1, idx_dtype=torch.int64, seed=0
):
    draw = _Draw(device, idx_dtype, seed)
    block = draft_token_num(topk, num_steps)
    draft_width, target_width = block + 24, 64
    prefix = draw.ints(0, draft_width - block + 1, bs)
    suffix_start = draw.ints(0, 1 << 30, bs) % (target_width - prefix + 1) if bs else prefix
    return {
        "draft_req_to_token": draw.table(bs + 3, draft_width),
        "target_req_to_token": draw.table(bs + 3, target_width),
        "req_pool_indices": draw.rows(bs, bs + 3),
        "suffix_start": draw.idx(suffix_start),
        "draft_prefix_lens": draw.idx(prefix),
        "verify_out_cache_loc": draw.slots(bs, block),
    }


BUILDERS: dict[str, Callable[..., Kwargs]] = {
    "assign_extend_cache_locs": build_assign_extend_cache_locs,
    "assign_extend_cache_locs_uniform": build_assign_extend_cache_locs_uniform,
    "assign_req_to_token_pool": build_assign_req_to_token_pool,
    "assign_draft_cache_locs_contiguous": build_assign_draft_cache_locs_contiguous,
    "generate_draft_decode_kv_indices": build_generate_draft_decode_kv_indices,
    "fill_accept_out_cache_loc": build_fill_accept_out_cache_loc,
    "get_src_tgt_cache_loc": build_get_src_tgt_cache_loc,
    "get_target_cache_loc": build_get_target_cache_loc,
    "create_num_accept_tokens_filter": build_create_num_accept_tokens_filter,
    "filter_finished_cache_loc": build_filter_finished_cache_loc,
    "align_evict_mask_to_page_size": build_align_evict_mask_to_page_size,
    "rebuild_compact_draft_req_to_token": build_rebuild_compact_draft_req_to_token,
}
