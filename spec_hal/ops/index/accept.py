"""Family A after verify: A5 ``fill_accept_out_cache_loc``, A6 ``get_src_tgt_cache_loc`` /
``get_target_cache_loc`` and A7 ``create_num_accept_tokens_filter`` / ``filter_finished_cache_loc``."""

from __future__ import annotations

import torch
from torch import Tensor

from ...opdef import OpDef, define_op
from ...validation import (
    check_capacity,
    check_index,
    check_non_negative,
    check_output,
    check_positive_int,
    check_range,
    check_sum_fits,
    common_device,
    exact_sum,
    new_output,
    value_checks_enabled,
)
from ._common import ragged_fill_, scatter_valid_, take


def _fill_accept_out_cache_loc_reference(
    accept_index: Tensor, out_cache_loc: Tensor, accept_out_cache_loc: Tensor, size: int
) -> None:
    considered = accept_index.reshape(-1)[:size]
    accepted = (considered >= 0) & (considered < out_cache_loc.shape[0])  # -1 and out of range: rejected

    def read(entry: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        return take(out_cache_loc, considered[entry])

    # Each accepted entry is a run of length 1: run r's offset is its rank among accepted entries.
    ragged_fill_(accept_out_cache_loc, accepted, read, max_total=size)


@define_op(
    _fill_accept_out_cache_loc_reference,
    mutates=("accept_out_cache_loc",),
    op_class="latency",
)
def fill_accept_out_cache_loc(
    op: OpDef,
    accept_index: Tensor,
    out_cache_loc: Tensor,
    accept_out_cache_loc: Tensor,
    size: int | None = None,
) -> Tensor:
    """Compact the KV slots of the accepted draft tokens, in accept order.

    Over the first ``size`` entries p of the flattened ``accept_index`` (-1 = rejected),
    ``accept_out_cache_loc[rank(p)] = out_cache_loc[accept_index[p]]`` with rank(p) the number of
    accepted entries before p. Used after verify to find the slots whose KV moves to the target
    positions; entries past the accepted count are untouched.

    Args:
        accept_index: ``[bs, W]`` int32/int64, values in ``[-1, len(out_cache_loc))``.
        out_cache_loc: ``[bs*D]`` int32/int64 verify slots.
        accept_out_cache_loc: ``[>= size]`` int64, written.
        size: prefix of the flat ``accept_index`` to consider, ``0 <= size <= bs*W``; None = all.

    Returns:
        ``accept_out_cache_loc``.
    """
    check_index("accept_index", accept_index, ndim=2)
    bs = accept_index.shape[0]
    check_index("out_cache_loc", out_cache_loc)
    device = common_device(
        accept_index=accept_index, out_cache_loc=out_cache_loc, accept_out_cache_loc=accept_out_cache_loc
    )
    if size is None:
        size = accept_index.numel()
    check_positive_int("size", size, minimum=0)
    if size > accept_index.numel():
        raise ValueError(f"size: expected at most accept_index.numel() = {accept_index.numel()}, got {size}")
    check_output(
        "accept_out_cache_loc", accept_out_cache_loc, dtype=torch.int64, device=device, ndim=1, min_numel=size
    )
    if value_checks_enabled(device):
        check_range("accept_index", accept_index.reshape(-1)[:size], 0, out_cache_loc.shape[0], allow=-1)
    if bs == 0 or size == 0:
        return accept_out_cache_loc
    op.dispatch(device, accept_index, out_cache_loc, accept_out_cache_loc, size)
    return accept_out_cache_loc


def _get_src_tgt_cache_loc_reference(
    seq_lens: Tensor,
    out_cache_loc: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    draft_token_num: int,
    page_size: int,
    src_cache_loc: Tensor,
    tgt_cache_loc: Tensor,
    to_free_num_slots: Tensor,
) -> None:
    values, inside = take(out_cache_loc, accept_index.long())
    src_cache_loc.copy_(torch.where(inside, values.long(), src_cache_loc))
    tgt_cache_loc.zero_()
    seq = seq_lens.long()
    extended = seq + draft_token_num
    committed = seq + num_correct_drafts.long() + 1
    page_end = torch.div(committed + (page_size - 1), page_size, rounding_mode="floor") * page_size
    to_free_num_slots.copy_(extended - torch.minimum(page_end, extended))


@define_op(
    _get_src_tgt_cache_loc_reference,
    mutates=("src_cache_loc", "tgt_cache_loc", "to_free_num_slots"),
    op_class="latency",
)
def get_src_tgt_cache_loc(
    op: OpDef,
    seq_lens: Tensor,
    out_cache_loc: Tensor,
    accept_index: Tensor,
    num_correct_drafts: Tensor,
    draft_token_num: int,
    page_size: int,
    src_cache_loc: Tensor | None = None,
    tgt_cache_loc: Tensor | None = None,
    to_free_num_slots: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Spec v1, paged tree accept: where accepted KV comes from and how many tail slots to free.

    ``src_cache_loc = out_cache_loc[accept_index]``, ``tgt_cache_loc`` zero-filled (filled later by
    :func:`get_target_cache_loc`), and per request ``to_free_num_slots = ext - min(roundup(seq_len +
    ncd + 1, ps), ext)`` with ``ext = seq_len + D``: the verify slots past the page holding the last
    committed token.

    Args:
        seq_lens: ``[bs]`` int32/int64 committed lengths before this step.
        out_cache_loc: ``[bs*D]`` int32/int64 verify slots.
        accept_index: ``[A]`` int32/int64 compacted accepted flat ids (no -1), in ``[0, bs*D)``.
        num_correct_drafts: ``[bs]`` int32/int64 in ``[0, D)``.
        draft_token_num, page_size: D >= 1, ps >= 1.
        src_cache_loc, tgt_cache_loc: optional ``[A]`` int64. to_free_num_slots: optional ``[bs]`` int64.

    Returns:
        ``(src_cache_loc, tgt_cache_loc, to_free_num_slots)``.
    """
    check_index("seq_lens", seq_lens)
    bs = seq_lens.shape[0]
    check_positive_int("draft_token_num", draft_token_num)
    check_positive_int("page_size", page_size)
    check_index("out_cache_loc", out_cache_loc, shape=(bs * draft_token_num,))
    check_index("accept_index", accept_index)
    check_index("num_correct_drafts", num_correct_drafts, shape=(bs,))
    device = common_device(
        seq_lens=seq_lens,
        out_cache_loc=out_cache_loc,
        accept_index=accept_index,
        num_correct_drafts=num_correct_drafts,
        src_cache_loc=src_cache_loc,
        tgt_cache_loc=tgt_cache_loc,
        to_free_num_slots=to_free_num_slots,
    )
    accepted = accept_index.shape[0]
    src_cache_loc = _optional_output("src_cache_loc", src_cache_loc, (accepted,), device)
    tgt_cache_loc = _optional_output("tgt_cache_loc", tgt_cache_loc, (accepted,), device)
    to_free_num_slots = _optional_output("to_free_num_slots", to_free_num_slots, (bs,), device)
    if value_checks_enabled(device):
        check_non_negative("seq_lens", seq_lens)
        check_range("accept_index", accept_index, 0, out_cache_loc.shape[0])
        check_range("num_correct_drafts", num_correct_drafts, 0, draft_token_num)
    if bs == 0:
        return src_cache_loc, tgt_cache_loc, to_free_num_slots
    op.dispatch(
        device,
        seq_lens,
        out_cache_loc,
        accept_index,
        num_correct_drafts,
        draft_token_num,
        page_size,
        src_cache_loc,
        tgt_cache_loc,
        to_free_num_slots,
    )
    return src_cache_loc, tgt_cache_loc, to_free_num_slots


def _optional_output(
    name: str,
    value: Tensor | None,
    shape: tuple[int, ...],
    device: torch.device,
    dtype: torch.dtype = torch.int64,
) -> Tensor:
    if value is None:
        return new_output(shape, dtype, device)
    return check_output(name, value, dtype=dtype, device=device, shape=shape)


def _get_target_cache_loc_reference(
    tgt_cache_loc: Tensor,
    to_free_slots: Tensor,
    num_correct_drafts: Tensor,
    to_free_num_slots: Tensor,
    out_cache_loc: Tensor,
    draft_token_num: int,
) -> None:
    rows = out_cache_loc.view(-1, draft_token_num)
    bs = rows.shape[0]
    to_free = to_free_num_slots.long()

    def read_accepted(run: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        return take(rows, run, within)  # the first ncd+1 verify slots of the request

    def read_freed(run: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        return take(rows, run, draft_token_num - to_free[run] + within)  # its last to_free slots

    bound = bs * draft_token_num  # each run lies within the request's D verify slots
    ragged_fill_(tgt_cache_loc, num_correct_drafts.long() + 1, read_accepted, max_total=bound)
    ragged_fill_(to_free_slots, to_free, read_freed, max_total=bound)


@define_op(
    _get_target_cache_loc_reference,
    mutates=("tgt_cache_loc", "to_free_slots"),
    op_class="latency",
)
def get_target_cache_loc(
    op: OpDef,
    tgt_cache_loc: Tensor,
    to_free_slots: Tensor,
    num_correct_drafts: Tensor,
    to_free_num_slots: Tensor,
    out_cache_loc: Tensor,
    draft_token_num: int,
) -> tuple[Tensor, Tensor]:
    """Spec v1, paged tree accept: the slots accepted KV moves to and the verify slots to free.

    Request b's first ``ncd[b] + 1`` verify slots go to ``tgt_cache_loc`` at the exclusive cumsum of
    ``ncd + 1``; its last ``to_free_num_slots[b]`` verify slots go to ``to_free_slots`` at the
    exclusive cumsum of ``to_free_num_slots``. Entries past either total are untouched. (sglang's
    ``num_verify_tokens`` is ``draft_token_num``.)

    Args:
        tgt_cache_loc: ``[>= sum(ncd + 1)]`` int64, written.
        to_free_slots: ``[>= sum(to_free_num_slots)]`` int64, written.
        num_correct_drafts: ``[bs]`` int32/int64 in ``[0, D)``.
        to_free_num_slots: ``[bs]`` int32/int64 in ``[0, D]`` (from :func:`get_src_tgt_cache_loc`).
        out_cache_loc: ``[bs*D]`` int32/int64 verify slots.
        draft_token_num: D >= 1.

    Returns:
        ``(tgt_cache_loc, to_free_slots)``.
    """
    check_index("num_correct_drafts", num_correct_drafts)
    bs = num_correct_drafts.shape[0]
    check_index("to_free_num_slots", to_free_num_slots, shape=(bs,))
    check_positive_int("draft_token_num", draft_token_num)
    check_index("out_cache_loc", out_cache_loc, shape=(bs * draft_token_num,))
    device = common_device(
        tgt_cache_loc=tgt_cache_loc,
        to_free_slots=to_free_slots,
        num_correct_drafts=num_correct_drafts,
        to_free_num_slots=to_free_num_slots,
        out_cache_loc=out_cache_loc,
    )
    check_output("tgt_cache_loc", tgt_cache_loc, dtype=torch.int64, device=device, ndim=1)
    check_output("to_free_slots", to_free_slots, dtype=torch.int64, device=device, ndim=1)
    if value_checks_enabled(device):
        check_range("num_correct_drafts", num_correct_drafts, 0, draft_token_num)
        check_range("to_free_num_slots", to_free_num_slots, 0, draft_token_num + 1)
        check_capacity(
            "tgt_cache_loc",
            tgt_cache_loc,
            exact_sum(num_correct_drafts) + bs,
            "sum(num_correct_drafts + 1)",
        )
        check_capacity("to_free_slots", to_free_slots, exact_sum(to_free_num_slots), "sum(to_free_num_slots)")
    if bs == 0:
        return tgt_cache_loc, to_free_slots
    op.dispatch(
        device,
        tgt_cache_loc,
        to_free_slots,
        num_correct_drafts,
        to_free_num_slots,
        out_cache_loc,
        draft_token_num,
    )
    return tgt_cache_loc, to_free_slots


def _create_num_accept_tokens_filter_reference(
    num_correct_drafts: Tensor, unfinished_index: Tensor, seq_lens: Tensor, num_accept_tokens_filter: Tensor
) -> None:
    committed = num_correct_drafts.long() + 1
    num_accept_tokens_filter.zero_()
    rows = unfinished_index.long()
    values, inside = take(committed, rows)
    scatter_valid_(num_accept_tokens_filter, (rows,), values, inside)
    seq_lens.add_(committed.to(seq_lens.dtype))


@define_op(
    _create_num_accept_tokens_filter_reference,
    mutates=("seq_lens", "num_accept_tokens_filter"),
    op_class="latency",
)
def create_num_accept_tokens_filter(
    op: OpDef,
    num_correct_drafts: Tensor,
    unfinished_index: Tensor,
    seq_lens: Tensor,
    num_accept_tokens_filter: Tensor | None = None,
) -> Tensor:
    """Spec v1 accept: committed token counts of the unfinished requests, and advance ``seq_lens``.

    ``num_accept_tokens_filter = 0`` except ``[unfinished_index] = ncd + 1``; ``seq_lens += ncd + 1``
    for every request (finished ones included). The filter then drives
    :func:`filter_finished_cache_loc`.

    Args:
        num_correct_drafts: ``[bs]`` int32/int64, >= 0.
        unfinished_index: ``[k]`` int32/int64 rows in ``[0, bs)``.
        seq_lens: ``[bs]`` int32/int64, mutated (keeps its dtype).
        num_accept_tokens_filter: optional ``[bs]`` int32.

    Returns:
        ``num_accept_tokens_filter``.
    """
    check_index("num_correct_drafts", num_correct_drafts)
    bs = num_correct_drafts.shape[0]
    check_index("unfinished_index", unfinished_index)
    check_index("seq_lens", seq_lens, shape=(bs,))
    device = common_device(
        num_correct_drafts=num_correct_drafts,
        unfinished_index=unfinished_index,
        seq_lens=seq_lens,
        num_accept_tokens_filter=num_accept_tokens_filter,
    )
    num_accept_tokens_filter = _optional_output(
        "num_accept_tokens_filter", num_accept_tokens_filter, (bs,), device, torch.int32
    )
    if value_checks_enabled(device):
        check_non_negative("num_correct_drafts", num_correct_drafts)
        check_range("unfinished_index", unfinished_index, 0, bs)
        check_sum_fits(
            "seq_lens",
            seq_lens,
            seq_lens.dtype,
            plus=num_correct_drafts,
            constant=1,
            expression="seq_lens + num_correct_drafts + 1",
        )
        check_sum_fits(
            "num_correct_drafts",
            num_correct_drafts,
            torch.int32,
            constant=1,
            expression="num_correct_drafts + 1 (num_accept_tokens_filter)",
        )
    if bs == 0:
        return num_accept_tokens_filter
    op.dispatch(device, num_correct_drafts, unfinished_index, seq_lens, num_accept_tokens_filter)
    return num_accept_tokens_filter


def _filter_finished_cache_loc_reference(
    out_cache_loc: Tensor, tgt_cache_loc: Tensor, num_correct_drafts: Tensor, num_accept_tokens_filter: Tensor
) -> None:
    committed = num_correct_drafts.long() + 1
    source_start = torch.cumsum(committed, 0) - committed

    def read(run: Tensor, within: Tensor) -> tuple[Tensor, Tensor]:
        values, inside = take(tgt_cache_loc, source_start[run] + within)
        return values, inside & (within < committed[run])  # never read into the next request's run

    ragged_fill_(out_cache_loc, num_accept_tokens_filter, read, max_total=tgt_cache_loc.shape[0])


@define_op(
    _filter_finished_cache_loc_reference,
    mutates=("out_cache_loc",),
    op_class="latency",
)
def filter_finished_cache_loc(
    op: OpDef,
    out_cache_loc: Tensor,
    tgt_cache_loc: Tensor,
    num_correct_drafts: Tensor,
    num_accept_tokens_filter: Tensor,
) -> Tensor:
    """Spec v1 accept: drop the finished requests' slots from the committed slot list.

    Request b's run of ``ncd[b] + 1`` slots in ``tgt_cache_loc`` (at the exclusive cumsum of
    ``ncd + 1``) is copied, first ``filter[b]`` entries, to ``out_cache_loc`` at the exclusive cumsum
    of the filter. Entries past ``sum(filter)`` are untouched.

    Args:
        out_cache_loc: ``[>= sum(filter)]`` int64, written.
        tgt_cache_loc: ``[sum(ncd + 1)]`` int32/int64 (a longer tensor's tail is ignored).
        num_correct_drafts: ``[bs]`` int32/int64, >= 0.
        num_accept_tokens_filter: ``[bs]`` int32/int64 in ``[0, ncd + 1]`` (from
            :func:`create_num_accept_tokens_filter`).

    Returns:
        ``out_cache_loc``.
    """
    check_index("tgt_cache_loc", tgt_cache_loc)
    check_index("num_correct_drafts", num_correct_drafts)
    bs = num_correct_drafts.shape[0]
    check_index("num_accept_tokens_filter", num_accept_tokens_filter, shape=(bs,))
    device = common_device(
        out_cache_loc=out_cache_loc,
        tgt_cache_loc=tgt_cache_loc,
        num_correct_drafts=num_correct_drafts,
        num_accept_tokens_filter=num_accept_tokens_filter,
    )
    check_output("out_cache_loc", out_cache_loc, dtype=torch.int64, device=device, ndim=1)
    if value_checks_enabled(device):
        check_non_negative("num_correct_drafts", num_correct_drafts)
        check_non_negative("num_accept_tokens_filter", num_accept_tokens_filter)
        if bool(
            (num_accept_tokens_filter.long() - 1 > num_correct_drafts.long()).any()
        ):  # no wrap: both >= 0
            raise ValueError("num_accept_tokens_filter: expected values <= num_correct_drafts + 1")
        check_capacity(
            "tgt_cache_loc",
            tgt_cache_loc,
            exact_sum(num_correct_drafts) + bs,
            "sum(num_correct_drafts + 1)",
        )
        check_capacity(
            "out_cache_loc",
            out_cache_loc,
            exact_sum(num_accept_tokens_filter),
            "sum(num_accept_tokens_filter)",
        )
    if bs == 0:
        return out_cache_loc
    op.dispatch(device, out_cache_loc, tgt_cache_loc, num_correct_drafts, num_accept_tokens_filter)
    return out_cache_loc
