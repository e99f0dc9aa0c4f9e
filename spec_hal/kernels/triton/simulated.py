"""Triton kernel of family E: ``generate_simulated_accept_index`` in one launch.

The accept length L is drawn on the host by the contract and arrives as a plain int. Each program
writes whole rows of a block of requests (a ``[rows, max(W, D)]`` tile): the new accept row (rows
whose root is -1 or out of range stay as they were), ``num_correct_drafts`` and the request's
``predicts`` entries. No program writes another program's rows.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._constants import SIMULATED_TOKEN
from .config import LaunchConfig
from .launch import Launch, cdiv, kernel, next_power_of_2
from .launcher import Launcher


@kernel
@triton.jit
def _simulated_accept_kernel(
    accept_index_ptr, accept_stride_b,
    predicts_ptr, predicts_stride,
    num_correct_ptr, num_correct_stride,
    candidates_ptr, candidates_stride_b, candidates_stride_n,
    target_predict_ptr, target_stride_b, target_stride_n,
    new_accept_ptr, new_accept_stride_b, new_accept_stride_k,
    bs, num_nodes, width, accept_len,
    REAL_DRAFT_TOKENS: tl.constexpr, SIMULATED_TOKEN: tl.constexpr,
    ROWS: tl.constexpr, COLUMNS: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    column = tl.arange(0, COLUMNS).to(tl.int64)
    live = b < bs
    tl.store(
        num_correct_ptr + b * num_correct_stride, tl.zeros([ROWS], tl.int32) + (accept_len - 1), mask=live
    )

    # New accept row: root + [0, L), -1 after; only column 0 of accept_index is read.
    root = tl.load(accept_index_ptr + b * accept_stride_b, mask=live, other=-1).to(tl.int64)
    root_ok = live & (root >= 0) & (root < bs * num_nodes)
    accepted = tl.where(column[None, :] < accept_len, root[:, None] + column[None, :], -1)
    tl.store(
        new_accept_ptr + b[:, None] * new_accept_stride_b + column[None, :] * new_accept_stride_k,
        accepted.to(tl.int32),
        mask=root_ok[:, None] & (column[None, :] < width),
    )

    # predicts[b*D + k]: the next draft for k < L-1 and the target's token at k = L-1 (other entries
    # untouched), or SIMULATED_TOKEN everywhere.
    node = b[:, None] * num_nodes + column[None, :]
    in_row = live[:, None] & (column[None, :] < num_nodes)
    if REAL_DRAFT_TOKENS:
        is_draft = in_row & (column[None, :] < accept_len - 1)
        is_bonus = in_row & (column[None, :] == accept_len - 1)
        drafts = tl.load(
            candidates_ptr + b[:, None] * candidates_stride_b + (column[None, :] + 1) * candidates_stride_n,
            mask=is_draft,
            other=0,
        )
        bonus = tl.load(
            target_predict_ptr + b[:, None] * target_stride_b + column[None, :] * target_stride_n,
            mask=is_bonus,
            other=0,
        )
        tokens = tl.where(is_draft, drafts.to(tl.int32), bonus.to(tl.int32))
        tl.store(predicts_ptr + node * predicts_stride, tokens, mask=is_draft | is_bonus)
    else:
        tokens = tl.zeros([ROWS, COLUMNS], tl.int32) + SIMULATED_TOKEN
        tl.store(predicts_ptr + node * predicts_stride, tokens, mask=in_row)


def _generate_simulated_accept_index(
    config: LaunchConfig,
    accept_index: torch.Tensor,
    predicts: torch.Tensor,
    num_correct_drafts: torch.Tensor,
    candidates: torch.Tensor,
    target_predict: torch.Tensor,
    accept_len: int,
    real_draft_tokens: bool,
    new_accept_index: torch.Tensor,
) -> None:
    bs, num_nodes = candidates.shape
    width = new_accept_index.shape[1]
    _simulated_accept_launch(config, bs, max(width, num_nodes), real_draft_tokens)(
        accept_index, accept_index.stride()[0],
        predicts, predicts.stride()[0],
        num_correct_drafts, num_correct_drafts.stride()[0],
        candidates, *candidates.stride(),
        target_predict, *target_predict.stride(),
        new_accept_index, *new_accept_index.stride(),
        bs, num_nodes, width, accept_len,
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _simulated_accept_launch(config: LaunchConfig, bs: int, lanes: int, real_draft_tokens: bool) -> Launch:
    columns = next_power_of_2(lanes)
    rows = max(1, config.block // columns)
    return _simulated_accept_kernel.at(
        (cdiv(bs, rows),),
        REAL_DRAFT_TOKENS=real_draft_tokens,
        SIMULATED_TOKEN=SIMULATED_TOKEN,
        ROWS=rows,
        COLUMNS=columns,
        num_warps=config.num_warps,
    )


#: The family's launchers of this module.
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("generate_simulated_accept_index", _generate_simulated_accept_index),
)
