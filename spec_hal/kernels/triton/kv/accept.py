"""The kernel of ``move_accept_tokens_to_target_kvcache``'s target and source slot lists (its provider,
``move._accept_locs``, sits beside the move the contract runs next)."""

from __future__ import annotations

import triton
import triton.language as tl

from ..launch import kernel


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
