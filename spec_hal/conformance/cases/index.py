"""Conformance cases of family A, index plumbing (spec ops.md §A).

Every builder takes the same keyword sizes (``bs``, ``topk``, ``num_steps``, ``page_size``,
``idx_dtype``, ``seed``; an op ignores the ones it has no use for) and returns the op's keyword
arguments on ``device``, realistic for the speculative-decoding loop, outputs poisoned with
``grid.POISON_INT`` and sized a few entries past what the op writes so that a write past the total
shows. ``req_pool_indices`` is int64 on odd seeds whatever ``idx_dtype`` is (the real mixed pattern).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .. import grid
from ..case import BadCase, Case

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

_BASE = {"bs": 3, "topk": 2, "num_steps": 2, "page_size": 4, "seed": 2}


def _bad(
    op: str,
    name: str,
    change: Callable[[Kwargs], None],
    error: type[Exception],
    match: str,
    *,
    value_check: bool = False,
) -> BadCase:
    """A valid case of ``op`` with ``change`` applied to its keyword arguments."""

    def build(device: torch.device) -> Kwargs:
        kwargs = BUILDERS[op](device, **_BASE)
        change(kwargs)
        return kwargs

    return BadCase(op, name, build, error, match, value_check)


def _set(**values: Any) -> Callable[[Kwargs], None]:
    """Replace arguments; host tensors move to the case's device."""

    def change(kwargs: Kwargs) -> None:
        device = next(v.device for v in kwargs.values() if isinstance(v, torch.Tensor))
        kwargs.update(
            {k: v.to(device, copy=True) if isinstance(v, torch.Tensor) else v for k, v in values.items()}
        )

    return change


def _retype(name: str, dtype: torch.dtype) -> Callable[[Kwargs], None]:
    def change(kwargs: Kwargs) -> None:
        kwargs[name] = kwargs[name].to(dtype)

    return change


def _edit(name: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Kwargs], None]:
    def change(kwargs: Kwargs) -> None:
        kwargs[name] = fn(kwargs[name])

    return change


def _poke(name: str, value: int, at: int = 0) -> Callable[[Kwargs], None]:
    """Set one element (flat index ``at``) of argument ``name``."""

    def change(kwargs: Kwargs) -> None:
        tensor = kwargs[name].clone()
        tensor.view(-1)[at] = value
        kwargs[name] = tensor

    return change


def bad_cases() -> list[BadCase]:
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
        _bad(a1, "req_to_token-int64", _retype("req_to_token", torch.int64), TypeError, "req_to_token"),
        _bad(a1, "out-int32", _retype("out", torch.int32), TypeError, "out"),
        _bad(a1, "start-float", _retype("start", torch.float32), TypeError, "start"),
        _bad(a1, "end-short", _edit("end", lambda t: t[:-1]), ValueError, "end"),
        _bad(a1, "out-2d", _edit("out", lambda t: t.view(1, -1)), ValueError, "out"),
        _bad(a1, "out-on-meta", _edit("out", lambda t: t.to("meta")), ValueError, "out"),
        _bad(
            a1,
            "rpi-out-of-range",
            _poke("req_pool_indices", 99),
            ValueError,
            "req_pool_indices",
            value_check=True,
        ),
        _bad(
            a1,
            "end-before-start",
            _set(start=torch.tensor([5, 5, 5]), end=torch.tensor([6, 4, 6])),
            ValueError,
            "end",
            value_check=True,
        ),
        _bad(a1, "end-past-row", _poke("end", 10_000), ValueError, "end", value_check=True),
        _bad(a1, "out-too-small", _edit("out", lambda t: t[:1]), ValueError, "out", value_check=True),
        _bad(a1u, "draft_token_num-zero", _set(draft_token_num=0), ValueError, "draft_token_num"),
        _bad(a1u, "draft_token_num-float", _set(draft_token_num=2.0), TypeError, "draft_token_num"),
        _bad(a1u, "out-wrong-size", _edit("out", lambda t: t[:-1]), ValueError, "out"),
        _bad(a1u, "out-int32", _retype("out", torch.int32), TypeError, "out"),
        _bad(a1u, "start-past-row", _poke("start", 10_000), ValueError, "start", value_check=True),
        _bad(a2, "out_cache_loc-float", _retype("out_cache_loc", torch.float32), TypeError, "out_cache_loc"),
        _bad(a2, "req_to_token-1d", _edit("req_to_token", lambda t: t.view(-1)), ValueError, "req_to_token"),
        _bad(
            a2,
            "out_cache_loc-too-small",
            _edit("out_cache_loc", lambda t: t[:1]),
            ValueError,
            "out_cache_loc",
            value_check=True,
        ),
        _bad(
            a2,
            "out_cache_loc-narrowing",
            _poke("out_cache_loc", big),
            ValueError,
            "out_cache_loc",
            value_check=True,
        ),
        _bad(
            a2,
            "rpi-negative",
            _poke("req_pool_indices", -1),
            ValueError,
            "req_pool_indices",
            value_check=True,
        ),
        _bad(a3, "topk-zero", _set(topk=0), ValueError, "topk"),
        _bad(a3, "page_size-bool", _set(page_size=True), TypeError, "page_size"),
        _bad(a3, "out-wrong-size", _edit("out", lambda t: t[1:]), ValueError, "out"),
        _bad(a3, "seq_lens-int16", _retype("seq_lens", torch.int16), TypeError, "seq_lens"),
        _bad(a3, "seq_lens-past-row", _poke("seq_lens", 10_000), ValueError, "seq_lens", value_check=True),
        _bad(a3, "seq_lens-negative", _poke("seq_lens", -3), ValueError, "seq_lens", value_check=True),
        _bad(a4, "kv_indices-int64", _retype("kv_indices", torch.int64), TypeError, "kv_indices"),
        _bad(a4, "kv_indices-rows", _edit("kv_indices", lambda t: t[:1]), ValueError, "kv_indices"),
        _bad(a4, "kv_indptr-narrow", _edit("kv_indptr", lambda t: t[:, :2]), ValueError, "kv_indptr"),
        _bad(a4, "positions-wrong-size", _edit("positions", lambda t: t[:-1]), ValueError, "positions"),
        _bad(
            a4,
            "kv_indices-too-narrow",
            _edit("kv_indices", lambda t: t[:, :3]),
            ValueError,
            "kv_indices",
            value_check=True,
        ),
        _bad(a4, "positions-negative", _poke("positions", -1), ValueError, "positions", value_check=True),
        _bad(
            a4, "positions-overflow-int32", _poke("positions", big), ValueError, "positions", value_check=True
        ),
        _bad(a5, "accept_index-1d", _edit("accept_index", lambda t: t.view(-1)), ValueError, "accept_index"),
        _bad(
            a5, "out-int32", _retype("accept_out_cache_loc", torch.int32), TypeError, "accept_out_cache_loc"
        ),
        _bad(a5, "size-too-large", _set(size=10_000), ValueError, "size"),
        _bad(a5, "size-negative", _set(size=-1), ValueError, "size"),
        _bad(
            a5,
            "out-smaller-than-size",
            _set(size=6, accept_out_cache_loc=torch.zeros(5, dtype=torch.int64)),
            ValueError,
            "accept_out_cache_loc",
        ),
        _bad(
            a5,
            "accept_index-minus-two",
            _poke("accept_index", -2),
            ValueError,
            "accept_index",
            value_check=True,
        ),
        _bad(
            a5,
            "accept_index-past-end",
            _poke("accept_index", 10_000),
            ValueError,
            "accept_index",
            value_check=True,
        ),
        _bad(
            a6,
            "out_cache_loc-wrong-size",
            _edit("out_cache_loc", lambda t: t[:-1]),
            ValueError,
            "out_cache_loc",
        ),
        _bad(a6, "src-int32", _edit("src_cache_loc", lambda t: t.int()), TypeError, "src_cache_loc"),
        _bad(
            a6,
            "to_free-wrong-size",
            _edit("to_free_num_slots", lambda t: t[:-1]),
            ValueError,
            "to_free_num_slots",
        ),
        _bad(
            a6,
            "accept_index-minus-one",
            _poke("accept_index", -1),
            ValueError,
            "accept_index",
            value_check=True,
        ),
        _bad(
            a6,
            "ncd-too-large",
            _poke("num_correct_drafts", 100),
            ValueError,
            "num_correct_drafts",
            value_check=True,
        ),
        _bad(a6, "seq_lens-negative", _poke("seq_lens", -1), ValueError, "seq_lens", value_check=True),
        _bad(a6t, "tgt-float", _retype("tgt_cache_loc", torch.float64), TypeError, "tgt_cache_loc"),
        _bad(
            a6t,
            "out_cache_loc-wrong-size",
            _edit("out_cache_loc", lambda t: t[1:]),
            ValueError,
            "out_cache_loc",
        ),
        _bad(
            a6t,
            "tgt-too-small",
            _edit("tgt_cache_loc", lambda t: t[:1]),
            ValueError,
            "tgt_cache_loc",
            value_check=True,
        ),
        _bad(
            a6t,
            "to_free_slots-too-small",
            _set(to_free_num_slots=torch.tensor([1, 1, 1]), to_free_slots=torch.zeros(2, dtype=torch.int64)),
            ValueError,
            "to_free_slots",
            value_check=True,
        ),
        _bad(
            a6t,
            "to_free_num_slots-too-large",
            _poke("to_free_num_slots", 100),
            ValueError,
            "to_free_num_slots",
            value_check=True,
        ),
        _bad(
            a6t,
            "ncd-negative",
            _poke("num_correct_drafts", -1),
            ValueError,
            "num_correct_drafts",
            value_check=True,
        ),
        _bad(
            a7,
            "filter-int64",
            _retype("num_accept_tokens_filter", torch.int64),
            TypeError,
            "num_accept_tokens_filter",
        ),
        _bad(a7, "seq_lens-short", _edit("seq_lens", lambda t: t[:-1]), ValueError, "seq_lens"),
        _bad(
            a7,
            "unfinished-out-of-range",
            _set(unfinished_index=torch.tensor([3])),
            ValueError,
            "unfinished_index",
            value_check=True,
        ),
        _bad(
            a7,
            "ncd-negative",
            _poke("num_correct_drafts", -2),
            ValueError,
            "num_correct_drafts",
            value_check=True,
        ),
        _bad(
            a7,
            "seq_lens-int32-overflow",
            _set(seq_lens=torch.full((3,), big - 1, dtype=torch.int32)),
            ValueError,
            "seq_lens",
            value_check=True,
        ),
        _bad(a7f, "tgt-float", _retype("tgt_cache_loc", torch.float32), TypeError, "tgt_cache_loc"),
        _bad(
            a7f,
            "filter-short",
            _edit("num_accept_tokens_filter", lambda t: t[:-1]),
            ValueError,
            "num_accept_tokens_filter",
        ),
        _bad(
            a7f,
            "out-too-small",
            _set(
                num_accept_tokens_filter=torch.tensor([1, 1, 1]),
                out_cache_loc=torch.zeros(2, dtype=torch.int64),
            ),
            ValueError,
            "out_cache_loc",
            value_check=True,
        ),
        _bad(
            a7f,
            "filter-above-ncd",
            _poke("num_accept_tokens_filter", 100),
            ValueError,
            "num_accept_tokens_filter",
            value_check=True,
        ),
        _bad(
            a7f,
            "tgt-too-small",
            _edit("tgt_cache_loc", lambda t: t[:1]),
            ValueError,
            "tgt_cache_loc",
            value_check=True,
        ),
        _bad(a8, "mask-int", _edit("evict_mask", lambda t: t.int()), TypeError, "evict_mask"),
        _bad(a8, "mask-wrong-size", _edit("evict_mask", lambda t: t[1:]), ValueError, "evict_mask"),
        _bad(a8, "page_size-zero", _set(page_size=0), ValueError, "page_size"),
        _bad(a8, "seq_lens-negative", _poke("seq_lens", -1), ValueError, "seq_lens", value_check=True),
        _bad(a9, "draft-int64", _retype("draft_req_to_token", torch.int64), TypeError, "draft_req_to_token"),
        _bad(
            a9,
            "target-rows",
            _edit("target_req_to_token", lambda t: t[:-1]),
            ValueError,
            "target_req_to_token",
        ),
        _bad(
            a9,
            "verify-wrong-rows",
            _edit("verify_out_cache_loc", lambda t: t[:-1]),
            ValueError,
            "verify_out_cache_loc",
        ),
        _bad(
            a9,
            "prefix-past-row",
            _poke("draft_prefix_lens", 10_000),
            ValueError,
            "draft_prefix_lens",
            value_check=True,
        ),
        _bad(
            a9, "suffix-past-row", _poke("suffix_start", 10_000), ValueError, "suffix_start", value_check=True
        ),
        _bad(
            a9,
            "verify-narrowing",
            _poke("verify_out_cache_loc", big),
            ValueError,
            "verify_out_cache_loc",
            value_check=True,
        ),
        _bad(
            a9,
            "rpi-out-of-range",
            _poke("req_pool_indices", 100),
            ValueError,
            "req_pool_indices",
            value_check=True,
        ),
    ]
