"""Family A's valid conformance cases: random grid points, edge cases and golden cases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ... import grid
from ...case import Case
from .builders import BUILDERS, TAIL, Kwargs

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
                (3, used + TAIL), grid.POISON_INT, dtype=torch.int32, device=device
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
