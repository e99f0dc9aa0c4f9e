"""Conformance cases of family A, index plumbing (docs/ops/index.md).

Every builder takes the same keyword sizes (``bs``, ``topk``, ``num_steps``, ``page_size``,
``idx_dtype``, ``seed``; an op ignores the ones it has no use for) and returns the op's keyword
arguments on ``device``, realistic for the speculative-decoding loop, outputs poisoned with
``grid.POISON_INT`` and sized a few entries past what the op writes so that a write past the total
shows. ``req_pool_indices`` is int64 on odd seeds whatever ``idx_dtype`` is (the real mixed pattern).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .. import grid
from ..case import BadCase, Case, bad_case, with_entry

Kwargs = dict[str, Any]

#: Slack past the written total of every ragged output (entries the op must leave poisoned).
_TAIL = 3
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


# --------------------------------------------------------------------------------------------------
# Builders


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
        "out": draw.poison(int((end - start).sum()) + _TAIL),
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
        "out_cache_loc": draw.slots(int((end - start).sum()) + _TAIL),
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
        "kv_indices": draw.poison(num_steps, used + _TAIL, dtype=torch.int32),
        "kv_indptr": draw.poison(num_steps, bs * topk + 1 + _TAIL, dtype=torch.int32),
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
        "accept_out_cache_loc": draw.poison((bs * width if size is None else size) + _TAIL),
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
        "tgt_cache_loc": draw.poison(int((ncd + 1).sum()) + _TAIL),
        "to_free_slots": draw.poison(int(to_free.sum()) + _TAIL),
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
        "out_cache_loc": draw.poison(int(keep.sum()) + _TAIL),
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


# --------------------------------------------------------------------------------------------------
# Cases

#: Random grid points per op: every value of every grid axis appears, not the full product.
_POINTS_PER_OP = 12


def grid_points(count: int = _POINTS_PER_OP) -> list[Kwargs]:
    """``count`` grid points cycling each axis with a different stride (bs 0 included)."""
    return [
        {
            "bs": grid.BATCH_SIZES[i % len(grid.BATCH_SIZES)],
            "topk": grid.TOPKS[(i + i // 5) % len(grid.TOPKS)],
            "num_steps": grid.STEPS[(3 * i + i // 5) % len(grid.STEPS)],
            "page_size": grid.PAGE_SIZES[(i + i // 5) % len(grid.PAGE_SIZES)],
            "idx_dtype": grid.INDEX_DTYPES[(i // 2) % len(grid.INDEX_DTYPES)],
            "seed": i,
        }
        for i in range(count)
    ]


def _point_name(point: Kwargs) -> str:
    dtype = str(point["idx_dtype"]).replace("torch.", "")
    return f"bs{point['bs']}-k{point['topk']}-s{point['num_steps']}-ps{point['page_size']}-{dtype}-seed{point['seed']}"


def _sized(op: str, **sizes: Any) -> Callable[[torch.device], Kwargs]:
    return lambda device: BUILDERS[op](device, **sizes)


def _fixed(**kwargs: Any) -> Callable[[torch.device], Kwargs]:
    """A hand-written case: host tensors (lists) moved to the device at build time."""

    def build(device: torch.device) -> Kwargs:
        # copy=True: every build must return fresh tensors (a run mutates them)
        return {k: v.to(device, copy=True) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}

    return build


def _t(values: list, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def _poison(n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.full((n,), grid.POISON_INT, dtype=dtype)


_P = grid.POISON_INT


def _golden_cases() -> list[Case]:
    table = torch.arange(64, dtype=torch.int32).view(4, 16)  # slot id = 16*row + column
    return [
        Case(
            "align_evict_mask_to_page_size",
            "spec-example",
            "golden",
            _fixed(
                seq_lens=_t([5, 8]),
                evict_mask=torch.tensor([True, False, True, True] * 2),
                page_size=4,
                draft_token_num=4,
            ),
            expected=lambda: {"evict_mask": torch.tensor([False, False, False, True] + [False] * 4)},
            small=True,
        ),
        Case(
            "assign_extend_cache_locs",
            "two-windows",
            "golden",
            _fixed(
                req_pool_indices=_t([2, 0]),
                req_to_token=table,
                start=_t([1, 4], torch.int32),
                end=_t([3, 6], torch.int32),
                out=_poison(6),
            ),
            expected=lambda: {"out": _t([33, 34, 4, 5, _P, _P])},
            small=True,
        ),
        Case(
            "assign_draft_cache_locs_contiguous",
            "paged-tree",
            "golden",
            # seq 5, ps 4: partial page of 1; each branch owns ceil((1+2)/4) = 1 page from column 4.
            _fixed(
                req_pool_indices=_t([1]),
                req_to_token=table,
                seq_lens=_t([5]),
                topk=2,
                num_steps=2,
                page_size=4,
                out=_poison(4),
            ),
            expected=lambda: {"out": _t([21, 22, 25, 26])},
            small=True,
        ),
        Case(
            "generate_draft_decode_kv_indices",
            "two-requests-two-branches",
            "golden",
            _fixed(
                req_pool_indices=_t([1, 2]),
                req_to_token=table,
                seq_lens=_t([2, 3]),
                positions=_t([2, 2, 3, 3]),
                page_size=1,
                topk=2,
                num_steps=2,
                kv_indices=torch.full((2, 20), _P, dtype=torch.int32),
                kv_indptr=torch.full((2, 6), _P, dtype=torch.int32),
            ),
            expected=lambda: {
                "kv_indices": torch.tensor(
                    [
                        [16, 17, 18, 16, 17, 20, 32, 33, 34, 35, 32, 33, 34, 37] + [_P] * 6,
                        [16, 17, 18, 19, 16, 17, 20, 21, 32, 33, 34, 35, 36, 32, 33, 34, 37, 38, _P, _P],
                    ],
                    dtype=torch.int32,
                ),
                "kv_indptr": torch.tensor(
                    [[_P, 3, 6, 10, 14, _P], [_P, 4, 8, 13, 18, _P]], dtype=torch.int32
                ),
            },
            small=True,
        ),
        Case(
            "fill_accept_out_cache_loc",
            "compaction",
            "golden",
            _fixed(
                accept_index=_t([[0, 2, -1], [3, -1, -1]]),
                out_cache_loc=_t([100, 101, 102, 103, 104, 105]),
                accept_out_cache_loc=_poison(6),
            ),
            expected=lambda: {"accept_out_cache_loc": _t([100, 102, 103, _P, _P, _P])},
            small=True,
        ),
        Case(
            "get_src_tgt_cache_loc",
            "partial-page",
            "golden",
            # ext = 9, keep = min(roundup(5+1+1, 4), 9) = 8: one verify slot freed.
            _fixed(
                seq_lens=_t([5]),
                out_cache_loc=_t([10, 11, 12, 13]),
                accept_index=_t([0, 1]),
                num_correct_drafts=_t([1]),
                draft_token_num=4,
                page_size=4,
                src_cache_loc=_poison(2),
                tgt_cache_loc=_poison(2),
                to_free_num_slots=_poison(1),
            ),
            expected=lambda: {
                "src_cache_loc": _t([10, 11]),
                "tgt_cache_loc": _t([0, 0]),
                "to_free_num_slots": _t([1]),
            },
            small=True,
        ),
        Case(
            "get_target_cache_loc",
            "two-requests",
            "golden",
            _fixed(
                tgt_cache_loc=_poison(5),
                to_free_slots=_poison(4),
                num_correct_drafts=_t([1, 0]),
                to_free_num_slots=_t([2, 1]),
                out_cache_loc=_t([10, 11, 12, 13, 20, 21, 22, 23]),
                draft_token_num=4,
            ),
            expected=lambda: {
                "tgt_cache_loc": _t([10, 11, 20, _P, _P]),
                "to_free_slots": _t([12, 13, 23, _P]),
            },
            small=True,
        ),
        Case(
            "create_num_accept_tokens_filter",
            "one-finished",
            "golden",
            _fixed(
                num_correct_drafts=_t([2, 0, 1]),
                unfinished_index=_t([0, 2]),
                seq_lens=_t([10, 20, 30], torch.int32),
                num_accept_tokens_filter=_poison(3, torch.int32),
            ),
            expected=lambda: {
                "num_accept_tokens_filter": _t([3, 0, 2], torch.int32),
                "seq_lens": _t([13, 21, 32], torch.int32),
                "result": _t([3, 0, 2], torch.int32),
            },
            small=True,
        ),
        Case(
            "filter_finished_cache_loc",
            "drop-middle",
            "golden",
            _fixed(
                out_cache_loc=_poison(5),
                tgt_cache_loc=_t([1, 2, 3, 4, 5, 6]),
                num_correct_drafts=_t([2, 0, 1]),
                num_accept_tokens_filter=_t([3, 0, 2]),
            ),
            expected=lambda: {"out_cache_loc": _t([1, 2, 3, 5, 6])},
            small=True,
        ),
    ]


def _edge_cases() -> list[Case]:
    edges = [
        Case(op, "bs0", "edge", _sized(op, bs=0, topk=2, num_steps=3, page_size=4, seed=1), small=True)
        for op in BUILDERS
    ]
    table = torch.arange(64, dtype=torch.int32).view(4, 16)
    edges += [
        Case(
            "assign_extend_cache_locs",
            "empty-rows-and-row-end",
            "edge",
            _fixed(
                req_pool_indices=_t([3, 1, 0], torch.int32),
                req_to_token=table,
                start=_t([16, 0, 12]),
                end=_t([16, 0, 16]),
                out=_poison(6),
            ),
            small=True,
        ),
        Case(
            "assign_req_to_token_pool",
            "empty-rows",
            "edge",
            _fixed(
                req_pool_indices=_t([2, 1]),
                req_to_token=table.clone(),
                start=_t([3, 16]),
                end=_t([3, 16]),
                out_cache_loc=_t([], torch.int32),
            ),
            small=True,
        ),
        Case(
            "fill_accept_out_cache_loc",
            "all-rejected",
            "edge",
            _fixed(
                accept_index=torch.full((3, 4), -1),
                out_cache_loc=_t(list(range(9))),
                accept_out_cache_loc=_poison(12),
            ),
            small=True,
        ),
        Case(
            "fill_accept_out_cache_loc",
            "size-zero",
            "edge",
            _fixed(
                accept_index=_t([[0, 1], [2, -1]]),
                out_cache_loc=_t([5, 6, 7, 8]),
                accept_out_cache_loc=_poison(1),
                size=0,
            ),
            small=True,
        ),
        Case(
            "align_evict_mask_to_page_size",
            "nothing-kept-and-empty-prefix",
            "edge",
            _fixed(
                seq_lens=_t([0, 4, 3]),
                evict_mask=torch.tensor([True] * 4 + [True] * 4 + [False] * 4),
                page_size=4,
                draft_token_num=4,
            ),
            small=True,
        ),
    ]
    # Page boundaries of the paged tree layout: prefixes ending on, just before and just after a page.
    for page_size in (4, 16):
        seq_lens = [0, page_size - 1, page_size, page_size + 1, 2 * page_size]
        for op in ("assign_draft_cache_locs_contiguous", "generate_draft_decode_kv_indices"):
            edges.append(
                Case(
                    op,
                    f"page-boundaries-ps{page_size}",
                    "edge",
                    _page_boundary_builder(op, seq_lens, page_size),
                    small=True,
                )
            )
    return edges


def _page_boundary_builder(op: str, seq_lens: list[int], page_size: int) -> Callable[[torch.device], Kwargs]:
    def build(device: torch.device) -> Kwargs:
        kwargs = BUILDERS[op](device, bs=len(seq_lens), topk=4, num_steps=3, page_size=page_size, seed=7)
        lens = torch.tensor(seq_lens)
        kwargs["seq_lens"] = lens.to(device)
        if op == "generate_draft_decode_kv_indices":
            kwargs["positions"] = lens.repeat_interleave(4).to(device)
            used = 4 * int(lens.sum()) + len(seq_lens) * 4 * 3
            kwargs["kv_indices"] = torch.full(
                (3, used + _TAIL), grid.POISON_INT, dtype=torch.int32, device=device
            )
        return kwargs

    return build


def cases() -> list[Case]:
    random_cases = [
        Case(op, _point_name(point), "random", _sized(op, **point), small=point["bs"] <= 3)
        for op in BUILDERS
        for point in grid_points()
    ]
    return random_cases + _edge_cases() + _golden_cases()


# --------------------------------------------------------------------------------------------------
# Bad cases

#: Sizes of the valid call whose arguments each bad case breaks.
_BASE = {"bs": 3, "topk": 2, "num_steps": 2, "page_size": 4, "seed": 2}


def bad_cases() -> list[BadCase]:
    valid = {op: functools.partial(builder, **_BASE) for op, builder in BUILDERS.items()}
    big = 2**31
    a1, a1u, a2 = "assign_extend_cache_locs", "assign_extend_cache_locs_uniform", "assign_req_to_token_pool"
    a3, a4, a5 = (
        "assign_draft_cache_locs_contiguous",
        "generate_draft_decode_kv_indices",
        "fill_accept_out_cache_loc",
    )
    a6, a6t = "get_src_tgt_cache_loc", "get_target_cache_loc"
    a7, a7f = "create_num_accept_tokens_filter", "filter_finished_cache_loc"
    a8, a9 = "align_evict_mask_to_page_size", "rebuild_compact_draft_req_to_token"
    return [
        bad_case(
            a1,
            "req_to_token-int64",
            valid[a1],
            TypeError,
            "req_to_token",
            req_to_token=lambda t: t.to(torch.int64),
        ),
        bad_case(a1, "out-int32", valid[a1], TypeError, "out", out=lambda t: t.to(torch.int32)),
        bad_case(a1, "start-float", valid[a1], TypeError, "start", start=lambda t: t.to(torch.float32)),
        bad_case(a1, "end-short", valid[a1], ValueError, "end", end=lambda t: t[:-1]),
        bad_case(a1, "out-2d", valid[a1], ValueError, "out", out=lambda t: t.view(1, -1)),
        bad_case(a1, "out-on-meta", valid[a1], ValueError, "out", out=lambda t: t.to("meta")),
        bad_case(
            a1,
            "rpi-out-of-range",
            valid[a1],
            ValueError,
            "req_pool_indices",
            value_check=True,
            req_pool_indices=with_entry(0, 99),
        ),
        bad_case(
            a1,
            "end-before-start",
            valid[a1],
            ValueError,
            "end",
            value_check=True,
            start=torch.tensor([5, 5, 5]),
            end=torch.tensor([6, 4, 6]),
        ),
        bad_case(
            a1, "end-past-row", valid[a1], ValueError, "end", value_check=True, end=with_entry(0, 10_000)
        ),
        bad_case(a1, "out-too-small", valid[a1], ValueError, "out", value_check=True, out=lambda t: t[:1]),
        bad_case(a1u, "draft_token_num-zero", valid[a1u], ValueError, "draft_token_num", draft_token_num=0),
        bad_case(a1u, "draft_token_num-float", valid[a1u], TypeError, "draft_token_num", draft_token_num=2.0),
        bad_case(a1u, "out-wrong-size", valid[a1u], ValueError, "out", out=lambda t: t[:-1]),
        bad_case(a1u, "out-int32", valid[a1u], TypeError, "out", out=lambda t: t.to(torch.int32)),
        bad_case(
            a1u,
            "start-past-row",
            valid[a1u],
            ValueError,
            "start",
            value_check=True,
            start=with_entry(0, 10_000),
        ),
        bad_case(
            a2,
            "out_cache_loc-float",
            valid[a2],
            TypeError,
            "out_cache_loc",
            out_cache_loc=lambda t: t.to(torch.float32),
        ),
        bad_case(
            a2, "req_to_token-1d", valid[a2], ValueError, "req_to_token", req_to_token=lambda t: t.view(-1)
        ),
        bad_case(
            a2,
            "out_cache_loc-too-small",
            valid[a2],
            ValueError,
            "out_cache_loc",
            value_check=True,
            out_cache_loc=lambda t: t[:1],
        ),
        bad_case(
            a2,
            "out_cache_loc-narrowing",
            valid[a2],
            ValueError,
            "out_cache_loc",
            value_check=True,
            out_cache_loc=with_entry(0, big),
        ),
        bad_case(
            a2,
            "rpi-negative",
            valid[a2],
            ValueError,
            "req_pool_indices",
            value_check=True,
            req_pool_indices=with_entry(0, -1),
        ),
        bad_case(a3, "topk-zero", valid[a3], ValueError, "topk", topk=0),
        bad_case(a3, "page_size-bool", valid[a3], TypeError, "page_size", page_size=True),
        bad_case(a3, "out-wrong-size", valid[a3], ValueError, "out", out=lambda t: t[1:]),
        bad_case(
            a3, "seq_lens-int16", valid[a3], TypeError, "seq_lens", seq_lens=lambda t: t.to(torch.int16)
        ),
        bad_case(
            a3,
            "seq_lens-past-row",
            valid[a3],
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=with_entry(0, 10_000),
        ),
        # An int64 sum inside the check would wrap below the row length.
        *(
            bad_case(
                op,
                "seq_lens-int64-max",
                valid[op],
                ValueError,
                "seq_lens",
                value_check=True,
                seq_lens=with_entry(0, 2**63 - 1),
            )
            for op in (a3, a4)
        ),
        bad_case(
            a3,
            "seq_lens-negative",
            valid[a3],
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=with_entry(0, -3),
        ),
        bad_case(
            a4, "kv_indices-int64", valid[a4], TypeError, "kv_indices", kv_indices=lambda t: t.to(torch.int64)
        ),
        bad_case(a4, "kv_indices-rows", valid[a4], ValueError, "kv_indices", kv_indices=lambda t: t[:1]),
        bad_case(a4, "kv_indptr-narrow", valid[a4], ValueError, "kv_indptr", kv_indptr=lambda t: t[:, :2]),
        bad_case(a4, "positions-wrong-size", valid[a4], ValueError, "positions", positions=lambda t: t[:-1]),
        bad_case(
            a4,
            "kv_indices-too-narrow",
            valid[a4],
            ValueError,
            "kv_indices",
            value_check=True,
            kv_indices=lambda t: t[:, :3],
        ),
        bad_case(
            a4,
            "positions-negative",
            valid[a4],
            ValueError,
            "positions",
            value_check=True,
            positions=with_entry(0, -1),
        ),
        # sum(positions) wraps int64 to a negative total
        bad_case(
            a4,
            "positions-sum-wraps-int64",
            valid[a4],
            ValueError,
            "positions",
            value_check=True,
            positions=lambda t: torch.full_like(t, 2**62),
        ),
        bad_case(
            a4,
            "positions-overflow-int32",
            valid[a4],
            ValueError,
            "positions",
            value_check=True,
            positions=with_entry(0, big),
        ),
        bad_case(
            a5, "accept_index-1d", valid[a5], ValueError, "accept_index", accept_index=lambda t: t.view(-1)
        ),
        bad_case(
            a5,
            "out-int32",
            valid[a5],
            TypeError,
            "accept_out_cache_loc",
            accept_out_cache_loc=lambda t: t.to(torch.int32),
        ),
        bad_case(a5, "size-too-large", valid[a5], ValueError, "size", size=10_000),
        bad_case(a5, "size-negative", valid[a5], ValueError, "size", size=-1),
        bad_case(
            a5,
            "out-smaller-than-size",
            valid[a5],
            ValueError,
            "accept_out_cache_loc",
            size=6,
            accept_out_cache_loc=torch.zeros(5, dtype=torch.int64),
        ),
        bad_case(
            a5,
            "accept_index-minus-two",
            valid[a5],
            ValueError,
            "accept_index",
            value_check=True,
            accept_index=with_entry((0, 0), -2),
        ),
        bad_case(
            a5,
            "accept_index-past-end",
            valid[a5],
            ValueError,
            "accept_index",
            value_check=True,
            accept_index=with_entry((0, 0), 10_000),
        ),
        bad_case(
            a6,
            "out_cache_loc-wrong-size",
            valid[a6],
            ValueError,
            "out_cache_loc",
            out_cache_loc=lambda t: t[:-1],
        ),
        bad_case(a6, "src-int32", valid[a6], TypeError, "src_cache_loc", src_cache_loc=lambda t: t.int()),
        bad_case(
            a6,
            "to_free-wrong-size",
            valid[a6],
            ValueError,
            "to_free_num_slots",
            to_free_num_slots=lambda t: t[:-1],
        ),
        bad_case(
            a6,
            "accept_index-minus-one",
            valid[a6],
            ValueError,
            "accept_index",
            value_check=True,
            accept_index=with_entry(0, -1),
        ),
        bad_case(
            a6,
            "ncd-too-large",
            valid[a6],
            ValueError,
            "num_correct_drafts",
            value_check=True,
            num_correct_drafts=with_entry(0, 100),
        ),
        bad_case(
            a6,
            "seq_lens-negative",
            valid[a6],
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=with_entry(0, -1),
        ),
        bad_case(
            a6t,
            "tgt-float",
            valid[a6t],
            TypeError,
            "tgt_cache_loc",
            tgt_cache_loc=lambda t: t.to(torch.float64),
        ),
        bad_case(
            a6t,
            "out_cache_loc-wrong-size",
            valid[a6t],
            ValueError,
            "out_cache_loc",
            out_cache_loc=lambda t: t[1:],
        ),
        bad_case(
            a6t,
            "tgt-too-small",
            valid[a6t],
            ValueError,
            "tgt_cache_loc",
            value_check=True,
            tgt_cache_loc=lambda t: t[:1],
        ),
        bad_case(
            a6t,
            "to_free_slots-too-small",
            valid[a6t],
            ValueError,
            "to_free_slots",
            value_check=True,
            to_free_num_slots=torch.tensor([1, 1, 1]),
            to_free_slots=torch.zeros(2, dtype=torch.int64),
        ),
        bad_case(
            a6t,
            "to_free_num_slots-too-large",
            valid[a6t],
            ValueError,
            "to_free_num_slots",
            value_check=True,
            to_free_num_slots=with_entry(0, 100),
        ),
        bad_case(
            a6t,
            "ncd-negative",
            valid[a6t],
            ValueError,
            "num_correct_drafts",
            value_check=True,
            num_correct_drafts=with_entry(0, -1),
        ),
        bad_case(
            a7,
            "filter-int64",
            valid[a7],
            TypeError,
            "num_accept_tokens_filter",
            num_accept_tokens_filter=lambda t: t.to(torch.int64),
        ),
        bad_case(a7, "seq_lens-short", valid[a7], ValueError, "seq_lens", seq_lens=lambda t: t[:-1]),
        bad_case(
            a7,
            "unfinished-out-of-range",
            valid[a7],
            ValueError,
            "unfinished_index",
            value_check=True,
            unfinished_index=torch.tensor([3]),
        ),
        bad_case(
            a7,
            "ncd-negative",
            valid[a7],
            ValueError,
            "num_correct_drafts",
            value_check=True,
            num_correct_drafts=with_entry(0, -2),
        ),
        bad_case(
            a7,
            "seq_lens-int64-overflow",
            valid[a7],
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=torch.full((3,), 2**63 - 1),
        ),
        bad_case(
            a7,
            "seq_lens-int32-overflow",
            valid[a7],
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=torch.full((3,), big - 1, dtype=torch.int32),
        ),
        bad_case(
            a7f,
            "tgt-float",
            valid[a7f],
            TypeError,
            "tgt_cache_loc",
            tgt_cache_loc=lambda t: t.to(torch.float32),
        ),
        bad_case(
            a7f,
            "filter-short",
            valid[a7f],
            ValueError,
            "num_accept_tokens_filter",
            num_accept_tokens_filter=lambda t: t[:-1],
        ),
        bad_case(
            a7f,
            "out-too-small",
            valid[a7f],
            ValueError,
            "out_cache_loc",
            value_check=True,
            num_accept_tokens_filter=torch.tensor([1, 1, 1]),
            out_cache_loc=torch.zeros(2, dtype=torch.int64),
        ),
        bad_case(
            a7f,
            "filter-above-ncd",
            valid[a7f],
            ValueError,
            "num_accept_tokens_filter",
            value_check=True,
            num_accept_tokens_filter=with_entry(0, 100),
        ),
        # sum(num_correct_drafts + 1) wraps int64 to a total below len(tgt_cache_loc)
        bad_case(
            a7f,
            "ncd-sum-wraps-int64",
            valid[a7f],
            ValueError,
            "tgt_cache_loc",
            value_check=True,
            num_correct_drafts=lambda t: torch.full_like(t, 2**62),
        ),
        bad_case(
            a7f,
            "tgt-too-small",
            valid[a7f],
            ValueError,
            "tgt_cache_loc",
            value_check=True,
            tgt_cache_loc=lambda t: t[:1],
        ),
        bad_case(a8, "mask-int", valid[a8], TypeError, "evict_mask", evict_mask=lambda t: t.int()),
        bad_case(a8, "mask-wrong-size", valid[a8], ValueError, "evict_mask", evict_mask=lambda t: t[1:]),
        bad_case(a8, "page_size-zero", valid[a8], ValueError, "page_size", page_size=0),
        bad_case(
            a8,
            "seq_lens-negative",
            valid[a8],
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=with_entry(0, -1),
        ),
        bad_case(
            a9,
            "draft-int64",
            valid[a9],
            TypeError,
            "draft_req_to_token",
            draft_req_to_token=lambda t: t.to(torch.int64),
        ),
        bad_case(
            a9,
            "target-rows",
            valid[a9],
            ValueError,
            "target_req_to_token",
            target_req_to_token=lambda t: t[:-1],
        ),
        bad_case(
            a9,
            "verify-wrong-rows",
            valid[a9],
            ValueError,
            "verify_out_cache_loc",
            verify_out_cache_loc=lambda t: t[:-1],
        ),
        bad_case(
            a9,
            "prefix-past-row",
            valid[a9],
            ValueError,
            "draft_prefix_lens",
            value_check=True,
            draft_prefix_lens=with_entry(0, 10_000),
        ),
        bad_case(
            a9,
            "suffix-past-row",
            valid[a9],
            ValueError,
            "suffix_start",
            value_check=True,
            suffix_start=with_entry(0, 10_000),
        ),
        bad_case(
            a9,
            "verify-narrowing",
            valid[a9],
            ValueError,
            "verify_out_cache_loc",
            value_check=True,
            verify_out_cache_loc=with_entry((0, 0), big),
        ),
        bad_case(
            a9,
            "rpi-out-of-range",
            valid[a9],
            ValueError,
            "req_pool_indices",
            value_check=True,
            req_pool_indices=with_entry(0, 100),
        ),
    ]
