"""Conformance cases of family B (KV movement): ``move_kv_cache`` and
``move_accept_tokens_to_target_kvcache``.

A ``kv`` argument is a :class:`~spec_hal.ops.KVBuffers` (or a list of them): comparing it after
the call means comparing its ``buffers``; a golden case's expected ``kv`` is the list of expected
buffers (of every KVBuffers, in order). Slots follow spec v2: each request owns a block of slots,
its verify slots ``out_cache_loc`` are the D slots after its committed length, so the targets
(committed positions) and sources (accepted nodes) of one request overlap.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ...ops.kv import KVBuffers
from .. import grid
from ..case import BadCase, Case, bad_case, benched

__all__ = ["BUILDERS", "cases", "bad_cases"]

_ROW_SHAPE = (2, 8)  # 2 heads x 8 dims: 32 bytes in bf16, 64 in fp32


def _kv_buffers(
    num_slots: int,
    num_layers: int,
    dtype: torch.dtype,
    device: torch.device,
    generator: torch.Generator,
    fused: bool,
    row_shape: tuple[int, ...] = _ROW_SHAPE,
) -> KVBuffers:
    """K and V of every layer; ``fused``: K and V are views into one [slots, 2, *row] tensor per layer."""
    buffers = []
    for _ in range(num_layers):
        if fused:
            layer = torch.randn(num_slots, 2, *row_shape, generator=generator).to(dtype=dtype, device=device)
            buffers += [layer[:, 0], layer[:, 1]]
        else:
            buffers += [
                torch.randn(num_slots, *row_shape, generator=generator).to(dtype=dtype, device=device)
                for _ in "kv"
            ]
    return KVBuffers(buffers)


def _scale_buffers(
    num_slots: int, num_layers: int, device: torch.device, generator: torch.Generator
) -> KVBuffers:
    """Per-slot FP8-style scales: another row shape (4 bytes, not vectorizable), so another KVBuffers."""
    return KVBuffers([torch.rand(num_slots, 1, generator=generator).to(device) for _ in range(num_layers)])


def _accepted_nodes(num_accepted: int, draft_token_num: int, generator: torch.Generator) -> list[int]:
    """Tree steps of an accepted path: the root, then strictly increasing nodes (a_j >= j)."""
    picked = torch.randperm(draft_token_num - 1, generator=generator)[: num_accepted - 1].sort().values + 1
    return [0, *picked.tolist()]


#: The bench's large sizes: KV rows of 8 KV heads x 128 dims bf16 (2 KiB); bs 64 / 512 segments of
#: 4 lanes move 256 / 2048 slots.
_LARGE_SIZES = tuple({"bs": bs, "num_layers": 60, "row_shape": (8, 128)} for bs in (64, 512))


@benched(large_sizes=_LARGE_SIZES)
def build_move_kv_cache(
    device: torch.device,
    *,
    bs: int,
    num_steps: int = 3,
    num_layers: int = 2,
    idx_dtype: torch.dtype = torch.int64,
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    segmented: bool = True,
    fused: bool = False,
    with_scales: bool = False,
    row_shape: tuple[int, ...] = _ROW_SHAPE,
    skip_fraction: float = 0.2,
) -> dict[str, Any]:
    """``bs`` segments of ``num_steps + 1`` lanes moving accepted rows down their own slot block."""
    generator = torch.Generator().manual_seed(seed)
    width = num_steps + 1
    block = 2 * width + 1  # slots owned by one segment; a few slots stay untouched
    num_slots = bs * block + 3
    tgt, src = [], []
    for b in range(bs):
        base = 1 + b * block
        accepted = int(torch.randint(1, width + 1, (1,), generator=generator))
        nodes = _accepted_nodes(accepted, block - 1, generator)
        for j in range(width):
            skip = j >= accepted or float(torch.rand(1, generator=generator)) < skip_fraction
            # A skipped lane has -1 on one side only: the slot on the other side must stay untouched.
            tgt.append(-1 if skip and j % 2 == 0 else base + j)
            src.append(-1 if skip and j % 2 == 1 else base + nodes[min(j, accepted - 1)])
    kv = _kv_buffers(num_slots, num_layers, dtype, device, generator, fused, row_shape)
    return {
        "kv": [kv, _scale_buffers(num_slots, num_layers, device, generator)] if with_scales else kv,
        "tgt_loc": torch.tensor(tgt, dtype=idx_dtype, device=device),
        "src_loc": torch.tensor(src, dtype=idx_dtype, device=device),
        "segment_lens": torch.full((bs,), width, dtype=idx_dtype, device=device) if segmented else None,
    }


@benched(large_sizes=_LARGE_SIZES)
def build_move_accept_tokens_to_target_kvcache(
    device: torch.device,
    *,
    bs: int,
    topk: int = 1,
    num_steps: int = 3,
    num_layers: int = 2,
    idx_dtype: torch.dtype = torch.int64,
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    fused: bool = False,
    with_scales: bool = False,
    row_shape: tuple[int, ...] = _ROW_SHAPE,
) -> dict[str, Any]:
    """Spec v2 after verify: request b's verify slots are ``req_to_token[rpi[b], seq_lens[b]:+D]``."""
    generator = torch.Generator().manual_seed(seed)
    width = num_steps + 1
    draft_token_num = num_steps + 1 if topk == 1 else topk * num_steps + 1
    num_rows = bs + 2
    pool_len = 24 + draft_token_num
    num_slots = num_rows * pool_len + 1  # slot 0 is never used
    req_to_token = (1 + torch.randperm(num_slots - 1, generator=generator)[: num_rows * pool_len]).view(
        num_rows, pool_len
    )
    req_pool_indices = torch.randperm(num_rows, generator=generator)[:bs]
    seq_lens = torch.randint(0, pool_len - draft_token_num + 1, (bs,), generator=generator)
    num_correct_drafts = torch.randint(0, width, (bs,), generator=generator)
    accept_index = torch.full((bs, width), -1, dtype=torch.int64)
    out_cache_loc = torch.empty(bs * draft_token_num, dtype=torch.int64)
    for b in range(bs):
        row, start = int(req_pool_indices[b]), int(seq_lens[b])
        out_cache_loc[b * draft_token_num : (b + 1) * draft_token_num] = req_to_token[
            row, start : start + draft_token_num
        ]
        nodes = _accepted_nodes(int(num_correct_drafts[b]) + 1, draft_token_num, generator)
        accept_index[b, : len(nodes)] = torch.tensor(nodes) + b * draft_token_num
    kv = _kv_buffers(num_slots, num_layers, dtype, device, generator, fused, row_shape)
    lanes = bs * width
    return {
        "kv": [kv, _scale_buffers(num_slots, num_layers, device, generator)] if with_scales else kv,
        "req_pool_indices": req_pool_indices.to(idx_dtype).to(device),
        "req_to_token": req_to_token.to(torch.int32).to(device),
        "seq_lens": seq_lens.to(idx_dtype).to(device),
        "num_correct_drafts": num_correct_drafts.to(idx_dtype).to(device),
        "accept_index": accept_index.to(idx_dtype).to(device),
        "out_cache_loc": out_cache_loc.to(idx_dtype).to(device),
        "tgt_loc": torch.full((lanes,), grid.POISON_INT, dtype=torch.int64, device=device),
        "src_loc": torch.full((lanes,), grid.POISON_INT, dtype=torch.int64, device=device),
    }


BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "move_kv_cache": build_move_kv_cache,
    "move_accept_tokens_to_target_kvcache": build_move_accept_tokens_to_target_kvcache,
}


# --------------------------------------------------------------------------------------------------
# Golden cases (exact values)


def _ramp_kv(device: torch.device, num_slots: int = 8) -> KVBuffers:
    """Two fp32 buffers [slots, 4] whose row s holds s (buffer 0) and 100 + s (buffer 1)."""
    rows = torch.arange(num_slots, dtype=torch.float32)[:, None].expand(num_slots, 4)
    return KVBuffers([rows.clone().to(device), (rows + 100).to(device)])


def _golden_move_build(device: torch.device) -> dict[str, Any]:
    # Segment 0 shifts rows 2, 3 down to 1, 2 (overlapping: row 2 is read and written); its -1 lane
    # is skipped. Segment 1 swaps rows 5 and 6 (only gather-then-scatter gets a swap right).
    return {
        "kv": _ramp_kv(device),
        "tgt_loc": torch.tensor([1, 2, -1, 5, 6], device=device),
        "src_loc": torch.tensor([2, 3, 4, 6, 5], device=device),
        "segment_lens": torch.tensor([3, 2], dtype=torch.int32, device=device),
    }


def _golden_move_expected() -> dict[str, Any]:
    rows = torch.tensor([0, 2, 3, 3, 4, 6, 5, 7], dtype=torch.float32)[:, None].expand(8, 4)
    return {"kv": [rows.clone(), rows + 100]}


def _golden_repeated_lanes_build(device: torch.device) -> dict[str, Any]:
    # sglang pads its lists with 0 -> 0 lanes, and a lane may repeat another's (target, source):
    # both change nothing. Segment 0 shifts rows 2, 3 down to 1, 2, then pads; segment 1 swaps rows
    # 5 and 6, repeats its 5 <- 6 lane and pads.
    return {
        "kv": _ramp_kv(device),
        "tgt_loc": torch.tensor([1, 2, 0, 5, 6, 5, 0, 0], device=device),
        "src_loc": torch.tensor([2, 3, 0, 6, 5, 6, 0, 0], device=device),
        "segment_lens": torch.tensor([3, 5], device=device),
    }


def _golden_zero_padded_build(device: torch.device) -> dict[str, Any]:
    # sglang's B2 move: one segment, accepted moves first, the tail zero-padded.
    return {
        "kv": _ramp_kv(device),
        "tgt_loc": torch.tensor([3, 4, 0, 0, 0], dtype=torch.int32, device=device),
        "src_loc": torch.tensor([6, 7, 0, 0, 0], dtype=torch.int32, device=device),
        "segment_lens": None,
    }


def _golden_zero_padded_expected() -> dict[str, Any]:
    rows = torch.tensor([0, 1, 2, 6, 7, 5, 6, 7], dtype=torch.float32)[:, None].expand(8, 4)
    return {"kv": [rows.clone(), rows + 100]}


def _golden_accept_build(device: torch.device) -> dict[str, Any]:
    # D = 3, W = 3. Request 0 (row 1, seq_len 2): nodes 0 and 2 accepted -> positions 2, 3.
    # Request 1 (row 0, seq_len 5): root only.
    req_to_token = (torch.arange(40, dtype=torch.int32).view(2, 20) % 8).to(device)
    return {
        "kv": _ramp_kv(device),
        "req_pool_indices": torch.tensor([1, 0], device=device),
        "req_to_token": req_to_token,
        "seq_lens": torch.tensor([2, 5], dtype=torch.int32, device=device),
        "num_correct_drafts": torch.tensor([1, 0], device=device),
        "accept_index": torch.tensor([[0, 2, -1], [3, -1, -1]], dtype=torch.int32, device=device),
        "out_cache_loc": torch.tensor([6, 7, 1, 0, 1, 2], device=device),
        "tgt_loc": torch.full((6,), grid.POISON_INT, device=device),
        "src_loc": torch.full((6,), grid.POISON_INT, device=device),
    }


def _golden_accept_expected() -> dict[str, Any]:
    # Targets: req_to_token[1, 2] = 22 % 8 = 6, [1, 3] = 7, [0, 5] = 5. Sources: 6, 1, 0.
    rows = torch.tensor([0, 1, 2, 3, 4, 0, 6, 1], dtype=torch.float32)[:, None].expand(8, 4)
    tgt = torch.tensor([6, 7, -1, 5, -1, -1])
    src = torch.tensor([6, 1, -1, 0, -1, -1])
    return {"kv": [rows.clone(), rows + 100], "tgt_loc": tgt, "src_loc": src, "result": (tgt, src)}


# --------------------------------------------------------------------------------------------------
# Case lists


def _random_sizes() -> list[dict[str, Any]]:
    """The grid of spec_hal.conformance.grid walked diagonally (no full product)."""
    sizes = []
    for i, bs in enumerate(grid.BATCH_SIZES):
        for j, idx_dtype in enumerate(grid.INDEX_DTYPES):
            sizes.append(
                {
                    "bs": bs,
                    "idx_dtype": idx_dtype,
                    "num_steps": grid.STEPS[(i + j) % len(grid.STEPS)],
                    "num_layers": 1 + (i + 2 * j) % 3,
                    "dtype": (torch.bfloat16, torch.float32)[(i + j) % 2],
                    "fused": (i + j) % 3 == 1,
                    "with_scales": (i + j) % 3 == 2,
                    "seed": 10 * i + j,
                }
            )
    return sizes


def _case_name(sizes: dict[str, Any]) -> str:
    return ",".join(f"{key}={str(value).replace('torch.', '')}" for key, value in sizes.items())


def cases() -> list[Case]:
    found: list[Case] = []
    for op, builder in BUILDERS.items():
        for sizes in _random_sizes():
            if op == "move_accept_tokens_to_target_kvcache":
                sizes["topk"] = grid.TOPKS[sizes["seed"] % len(grid.TOPKS)]
            small = sizes["bs"] <= 3
            found.append(
                Case(op, _case_name(sizes), "random", functools.partial(builder, **sizes), small=small)
            )
    edges: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "move_kv_cache": [
            ("no lanes", {"bs": 0}),
            ("one segment of all lanes", {"bs": 5, "segmented": False}),
            ("every lane skipped", {"bs": 3, "skip_fraction": 1.0}),
            ("fused K/V views, int32", {"bs": 4, "fused": True, "idx_dtype": torch.int32}),
        ],
        "move_accept_tokens_to_target_kvcache": [
            ("bs 0", {"bs": 0}),
            ("single step", {"bs": 3, "num_steps": 1}),
            ("tree, fused K/V and scales", {"bs": 3, "topk": 4, "fused": True, "with_scales": True}),
        ],
    }
    for op, entries in edges.items():
        for name, sizes in entries:
            found.append(Case(op, name, "edge", functools.partial(BUILDERS[op], **sizes), small=True))
    found.append(
        Case(
            "move_kv_cache",
            "overlap and swap",
            "golden",
            _golden_move_build,
            _golden_move_expected,
            small=True,
        )
    )
    found.append(
        Case(
            "move_kv_cache",
            "repeated and 0 -> 0 lanes",
            "golden",
            _golden_repeated_lanes_build,
            _golden_move_expected,  # the same move as "overlap and swap"
            small=True,
        )
    )
    found.append(
        Case(
            "move_kv_cache",
            "zero-padded like sglang",
            "golden",
            _golden_zero_padded_build,
            _golden_zero_padded_expected,
            small=True,
        )
    )
    found.append(
        Case(
            "move_accept_tokens_to_target_kvcache",
            "two requests",
            "golden",
            _golden_accept_build,
            _golden_accept_expected,
            small=True,
        )
    )
    return found


def bad_cases() -> list[BadCase]:
    # The valid calls whose arguments the cases break.
    move, accept = _golden_move_build, _golden_accept_build
    return [
        bad_case("move_kv_cache", "kv a list of tensors", move, TypeError, "kv", kv=[torch.zeros(4, 2)]),
        # Rows in both would move twice (a swap would undo itself).
        bad_case("move_kv_cache", "the same KVBuffers twice", move, ValueError, "kv", kv=lambda kv: [kv, kv]),
        bad_case(
            "move_kv_cache",
            "two KVBuffers over one tensor",
            move,
            ValueError,
            "kv",
            kv=lambda kv: [kv, KVBuffers(kv.buffers[1:])],
        ),
        bad_case("move_kv_cache", "float tgt_loc", move, TypeError, "tgt_loc", tgt_loc=torch.zeros(5)),
        bad_case(
            "move_kv_cache", "src_loc length", move, ValueError, "src_loc", src_loc=torch.tensor([2, 3, 4, 6])
        ),
        bad_case(
            "move_kv_cache",
            "2-D tgt_loc",
            move,
            ValueError,
            "tgt_loc",
            tgt_loc=torch.zeros(5, 1, dtype=torch.int64),
        ),
        bad_case(
            "move_kv_cache",
            "tgt past the slots",
            move,
            ValueError,
            "tgt_loc",
            value_check=True,
            tgt_loc=torch.tensor([1, 2, -1, 5, 8]),
        ),
        bad_case(
            "move_kv_cache",
            "src -2",
            move,
            ValueError,
            "src_loc",
            value_check=True,
            src_loc=torch.tensor([2, 3, 4, -2, 5]),
        ),
        bad_case(
            "move_kv_cache",
            "segments cover 4 of 5 lanes",
            move,
            ValueError,
            "segment_lens",
            value_check=True,
            segment_lens=torch.tensor([3, 1]),
        ),
        bad_case(
            "move_kv_cache",
            "negative segment",
            move,
            ValueError,
            "segment_lens",
            value_check=True,
            segment_lens=torch.tensor([6, -1]),
        ),
        bad_case(
            "move_kv_cache",
            "a target written twice",
            move,
            ValueError,
            "tgt_loc",
            value_check=True,
            tgt_loc=torch.tensor([1, 2, -1, 5, 1]),
        ),
        # Segment 1 reads row 2, which segment 0 writes.
        bad_case(
            "move_kv_cache",
            "segments overlap",
            move,
            ValueError,
            "src_loc",
            value_check=True,
            src_loc=torch.tensor([2, 3, 4, 6, 2]),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "req_to_token int64",
            accept,
            TypeError,
            "req_to_token",
            req_to_token=torch.zeros(2, 20, dtype=torch.int64),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "seq_lens length",
            accept,
            ValueError,
            "seq_lens",
            seq_lens=torch.tensor([2]),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "1-D accept_index",
            accept,
            ValueError,
            "accept_index",
            accept_index=torch.tensor([0, 2, -1]),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "int32 tgt_loc",
            accept,
            TypeError,
            "tgt_loc",
            tgt_loc=torch.zeros(6, dtype=torch.int32),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "src_loc too short",
            accept,
            ValueError,
            "src_loc",
            src_loc=torch.zeros(5, dtype=torch.int64),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "request row out of range",
            accept,
            ValueError,
            "req_pool_indices",
            value_check=True,
            req_pool_indices=torch.tensor([2, 0]),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "ncd >= W",
            accept,
            ValueError,
            "num_correct_drafts",
            value_check=True,
            num_correct_drafts=torch.tensor([3, 0]),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "negative seq_lens",
            accept,
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=torch.tensor([-1, 5]),
        ),
        # seq_lens + num_correct_drafts would wrap int64 below the pool length
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "seq_lens at int64 max",
            accept,
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=torch.tensor([2**63 - 1, 5]),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "past the pool",
            accept,
            ValueError,
            "seq_lens",
            value_check=True,
            seq_lens=torch.tensor([19, 5]),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "accept_index past out_cache_loc",
            accept,
            ValueError,
            "accept_index",
            value_check=True,
            accept_index=torch.tensor([[0, 6, -1], [3, -1, -1]]),
        ),
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "source slot past the KV",
            accept,
            ValueError,
            "out_cache_loc",
            value_check=True,
            out_cache_loc=torch.tensor([6, 7, 1, 9, 1, 2]),
        ),
        # Request 1's committed slot (req_to_token[0, 5] = 5) is request 0's source slot.
        bad_case(
            "move_accept_tokens_to_target_kvcache",
            "requests overlap",
            accept,
            ValueError,
            "out_cache_loc",
            value_check=True,
            out_cache_loc=torch.tensor([5, 7, 1, 0, 1, 2]),
        ),
    ]
