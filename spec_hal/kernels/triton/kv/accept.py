"""Triton provider of ``move_accept_tokens_to_target_kvcache``: its target and source slot lists."""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..config import LaunchConfig
from ..launch import Launch, cdiv, kernel


@kernel
@triton.jit
def _accept_locs_kernel(
    req_pool_indices,
    req_to_token,
    seq_lens,
    num_correct_drafts,
    accept_index,
    out_cache_loc,
    tgt_loc,
    src_loc,
    num_lanes,
    pool_rows,
    pool_len,
    num_nodes,
    rpi_stride,
    pool_row_stride,
    pool_col_stride,
    seq_stride,
    ncd_stride,
    accept_row_stride,
    accept_col_stride,
    loc_stride,
    tgt_stride,
    src_stride,
    WIDTH: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # Lane b*W + j: accepted node j of request b moves from its draft slot to committed position
    # seq_lens[b] + j. Two dependent load levels; W is a constant (fixed per deployment), so the
    # lane's request and step cost no division. Every index is bound-checked before it is used; a
    # lane failing any check is -1 (the masked loads' fill value).
    for start in range(tl.program_id(0) * BLOCK, num_lanes, tl.num_programs(0) * BLOCK):
        lanes = start + tl.arange(0, BLOCK).to(tl.int64)
        in_range = lanes < num_lanes
        request = lanes // WIDTH
        j = lanes % WIDTH
        row = tl.load(req_pool_indices + request * rpi_stride, mask=in_range, other=-1).to(tl.int64)
        column = tl.load(seq_lens + request * seq_stride, mask=in_range, other=-1).to(tl.int64) + j
        accepted_drafts = tl.load(num_correct_drafts + request * ncd_stride, mask=in_range, other=-1)
        node = tl.load(
            accept_index + request * accept_row_stride + j * accept_col_stride, mask=in_range, other=-1
        ).to(tl.int64)
        accepted = (
            in_range
            & (j <= accepted_drafts)
            & (node >= 0)
            & (node < num_nodes)
            & (row >= 0)
            & (row < pool_rows)
            & (column >= 0)
            & (column < pool_len)
        )
        target = tl.load(
            req_to_token + row * pool_row_stride + column * pool_col_stride, mask=accepted, other=-1
        )
        source = tl.load(out_cache_loc + node * loc_stride, mask=accepted, other=-1)
        tl.store(tgt_loc + lanes * tgt_stride, target.to(tl.int64), mask=in_range)
        tl.store(src_loc + lanes * src_stride, source.to(tl.int64), mask=in_range)


def _accept_locs(
    config: LaunchConfig,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    num_correct_drafts: torch.Tensor,
    accept_index: torch.Tensor,
    out_cache_loc: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    num_lanes = tgt_loc.shape[0]
    if num_lanes == 0:
        return
    pool_rows, pool_len = req_to_token.shape
    _accept_locs_launch(config, num_lanes, accept_index.shape[1])(
        req_pool_indices,
        req_to_token,
        seq_lens,
        num_correct_drafts,
        accept_index,
        out_cache_loc,
        tgt_loc,
        src_loc,
        num_lanes,
        pool_rows,
        pool_len,
        out_cache_loc.shape[0],
        req_pool_indices.stride()[0],
        req_to_token.stride()[0],
        req_to_token.stride()[1],
        seq_lens.stride()[0],
        num_correct_drafts.stride()[0],
        accept_index.stride()[0],
        accept_index.stride()[1],
        out_cache_loc.stride()[0],
        tgt_loc.stride()[0],
        src_loc.stride()[0],
    )


@functools.lru_cache(maxsize=1024)
def _accept_locs_launch(config: LaunchConfig, num_lanes: int, width: int) -> Launch:
    return _accept_locs_kernel.at(
        (min(cdiv(num_lanes, config.block), config.max_grid),),
        WIDTH=width,
        BLOCK=config.block,
        num_warps=config.num_warps,
    )
