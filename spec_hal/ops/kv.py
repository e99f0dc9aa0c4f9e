"""Family B: KV data movement .

``KVBuffers`` groups same-shape buffers (per-layer K, V or MLA latent) so one call moves a row in
all of them. ``move_kv_cache`` is the move itself; ``move_accept_tokens_to_target_kvcache`` computes
the (target, source) slot lists of the accepted tokens and then moves them with ``move_kv_cache``.

Contracts and portable references live together: each ``_<op>_reference`` function is the op's
portable provider (and the provider signature); each public op is made by ``define_op`` from its
contract, which validates and dispatches.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from ..opdef import OpDef, define_op
from ..runtime import is_capturing, synchronize
from ..validation import (
    check_index,
    check_non_negative,
    check_output,
    check_range,
    check_sum_below,
    check_tensor,
    common_device,
    new_output,
    trailing_dims_contiguous,
    value_checks_enabled,
)

__all__ = ["KVBuffers", "move_kv_cache", "move_accept_tokens_to_target_kvcache"]

# Vectorised copy providers move 16-byte words: rows and buffers must sit on that boundary.
_VECTOR_BYTES = 16


def _redirect_masked_lanes(valid: Tensor, *lane_indices: Tensor) -> tuple[Tensor, ...]:
    """Give every masked lane the indices of the first valid lane (lane 0's when none is valid).

    A masked lane then repeats exactly the write of a valid lane (same target, same bytes), so
    duplicates are harmless and nothing outside the valid lanes changes: a mask without a host sync
    or a data-dependent shape. The caller makes lane 0's indices harmless for the all-masked case.
    """
    first = valid.to(torch.uint8).argmax().view(1)  # a tensor index: no host sync
    return tuple(torch.where(valid, index, index.index_select(0, first)) for index in lane_indices)


# --------------------------------------------------------------------------------------------------
# Which buffers share bytes


class _Rows(NamedTuple):
    """Where a ``[slots, *row]`` buffer's rows lie, in bytes: row i is ``[start + i*stride, + size)``."""

    start: int
    stride: int
    size: int
    slots: int

    @property
    def end(self) -> int:
        return self.start + (self.slots - 1) * self.stride + self.size

    @staticmethod
    def of(buffer: Tensor) -> _Rows:
        element = buffer.element_size()
        return _Rows(
            buffer.data_ptr(),
            buffer.stride()[0] * element,
            buffer.shape[1:].numel() * element,
            buffer.shape[0],
        )


def _rows_overlap(a: _Rows, b: _Rows) -> bool:
    """Whether some row of ``a`` and some row of ``b`` share a byte (K and V views of one fused
    tensor interleave their rows without sharing any)."""
    if not a.slots or not b.slots or not a.size or not b.size or a.end <= b.start or b.end <= a.start:
        return False
    if a.slots == 1 and b.slots == 1:
        return True  # each span is its one row
    if a.slots == 1:
        a = a._replace(stride=b.stride)  # one row: any stride describes it
    if b.slots == 1:
        b = b._replace(stride=a.stride)
    if a.stride == b.stride:
        # Row j of b minus row i of a is offset + k*stride (k = j - i); the rows meet iff that lies
        # in (-b.size, a.size). Take the smallest such k in range and test it.
        offset, stride = b.start - a.start, a.stride
        k = max((-b.size - offset) // stride + 1, -(a.slots - 1))
        return k <= b.slots - 1 and offset + k * stride < a.size
    # Different slot strides (never in one KVBuffers): for each row of a, the first row of b that
    # ends after it starts.
    starts = a.start + torch.arange(a.slots, dtype=torch.int64) * a.stride
    first = torch.div(starts - b.size - b.start, b.stride, rounding_mode="floor").add_(1).clamp_(min=0)
    meets = (first < b.slots) & (b.start + first * b.stride < starts + a.size)
    return bool(meets.any())


def _first_overlap(rows: Sequence[_Rows], group: Sequence[int] | None = None) -> tuple[int, int] | None:
    """Indices ``(i, j)``, ``i < j``, of two entries of ``rows`` that share a byte, or None. With
    ``group`` (an id per entry) only entries of different groups are compared."""
    open_rows: list[int] = []  # entries whose span reaches past the current start
    for index in sorted(range(len(rows)), key=lambda i: rows[i].start):
        current = rows[index]
        open_rows = [other for other in open_rows if rows[other].end > current.start]
        for other in open_rows:
            if (group is None or group[other] != group[index]) and _rows_overlap(rows[other], current):
                return min(other, index), max(other, index)
        open_rows.append(index)
    return None


# --------------------------------------------------------------------------------------------------
# The KVBuffers type


class KVBuffers:
    """Same-shape buffers ``[slots, *row]`` whose row ``i`` is moved together (K and V of every layer).

    Built once, outside graph capture: it keeps the list, the table of the buffers' data pointers
    (an int64 tensor on their device, for kernels that move every buffer in one launch), and whether
    a 16-byte vectorised copy can serve it. Each row must be contiguous in memory; the slot stride
    may exceed the row (views into one fused K/V tensor). The buffers must not be reallocated while
    the object is in use (the pointer table would go stale).

    Attributes:
        buffers: the tensors, in the given order.
        num_slots: ``buffers[0].shape[0]``.
        row_shape: ``buffers[0].shape[1:]``.
        row_bytes: bytes of one row of one buffer.
        ptr_table: ``[len(buffers)]`` int64 data pointers on the buffers' device.
        vectorizable: rows, slot strides and buffers all 16-byte aligned (a vectorised provider
            declines the others; the registry records that as a fallback).
    """

    __slots__ = (
        "buffers",
        "num_slots",
        "row_shape",
        "row_bytes",
        "ptr_table",
        "vectorizable",
        "_rows",
        "__weakref__",
    )

    def __init__(self, buffers: Sequence[Tensor]) -> None:
        if not isinstance(buffers, (list, tuple)):
            raise TypeError(f"buffers: expected a list of tensors, got {type(buffers).__name__}")
        if not buffers:
            raise ValueError("buffers: expected a non-empty list of tensors")
        first = check_tensor("buffers[0]", buffers[0])
        if first.dim() == 0:
            raise ValueError("buffers[0]: expected a [slots, *row] tensor, got a scalar")
        for i, buffer in enumerate(buffers):
            name = f"buffers[{i}]"
            check_tensor(name, buffer, dtype=first.dtype, shape=first.shape)
            if buffer.device != first.device:
                raise ValueError(
                    f"{name}: expected device {first.device} (the device of buffers[0]), got {buffer.device}"
                )
            if not trailing_dims_contiguous(buffer, 1):
                raise ValueError(f"{name}: each row must be contiguous in memory (strides {buffer.stride()})")
            row_numel = buffer.shape[1:].numel()
            if buffer.shape[0] > 1 and buffer.stride()[0] < row_numel:
                raise ValueError(
                    f"{name}: rows overlap (slot stride {buffer.stride()[0]} < row size {row_numel})"
                )
        if is_capturing(first.device):
            raise ValueError(
                "buffers: build KVBuffers outside graph capture (it allocates its pointer table)"
            )
        pointers = [buffer.data_ptr() for buffer in buffers]
        rows = [_Rows.of(buffer) for buffer in buffers]
        shared = None if first.is_meta else _first_overlap(rows)  # meta holds no bytes
        if shared is not None:
            i, j = shared
            twice = "the same memory is listed twice" if pointers[i] == pointers[j] else "they share memory"
            raise ValueError(
                f"buffers: buffers[{i}] and buffers[{j}] overlap ({twice}): their rows would be moved twice"
            )
        element_size = first.element_size()
        self.buffers: list[Tensor] = list(buffers)
        self.num_slots: int = first.shape[0]
        self.row_shape = torch.Size(first.shape[1:])
        self.row_bytes: int = self.row_shape.numel() * element_size
        self.ptr_table: Tensor = torch.tensor(pointers, dtype=torch.int64, device=first.device)
        self._rows: tuple[_Rows, ...] = tuple(rows)
        self.vectorizable: bool = (
            self.row_bytes % _VECTOR_BYTES == 0
            and all(pointer % _VECTOR_BYTES == 0 for pointer in pointers)
            and all(
                self.num_slots <= 1 or buffer.stride()[0] * element_size % _VECTOR_BYTES == 0
                for buffer in buffers
            )
        )

    @property
    def device(self) -> torch.device:
        return self.buffers[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self.buffers[0].dtype

    def __len__(self) -> int:
        return len(self.buffers)

    def __repr__(self) -> str:
        return (
            f"KVBuffers({len(self.buffers)} x [{self.num_slots}, {', '.join(map(str, self.row_shape))}] "
            f"{str(self.dtype).replace('torch.', '')} on {self.device}, row_bytes={self.row_bytes}, "
            f"vectorizable={self.vectorizable})"
        )


def _kv_list(kv: object) -> list[KVBuffers]:
    if isinstance(kv, KVBuffers):
        return [kv]
    if isinstance(kv, (list, tuple)) and kv and all(isinstance(item, KVBuffers) for item in kv):
        kvs = list(kv)
        if len(kvs) > 1:
            _check_disjoint(kvs)
        return kvs
    raise TypeError(f"kv: expected a KVBuffers or a non-empty list of KVBuffers, got {type(kv).__name__}")


#: Lists of KVBuffers found disjoint, by the ids of their items (weak references confirm the ids
#: still name those objects): an engine passes the same list every step.
_DISJOINT_LISTS: dict[tuple[int, ...], tuple[weakref.ref[KVBuffers], ...]] = {}
_MAX_DISJOINT_LISTS = 64


def _check_disjoint(kvs: list[KVBuffers]) -> None:
    """No two KVBuffers of a list share a byte: rows they share would be moved twice (a swap would
    undo itself). Each KVBuffers checked its own buffers when it was built."""
    key = tuple(map(id, kvs))
    known = _DISJOINT_LISTS.get(key)
    if known is not None and all(ref() is item for ref, item in zip(known, kvs, strict=True)):
        return
    if len(set(key)) != len(key):
        i = key.index(next(k for k in key if key.count(k) > 1))
        j = key.index(key[i], i + 1)
        raise ValueError(f"kv: kv[{i}] and kv[{j}] are the same KVBuffers (its rows would be moved twice)")
    if kvs[0].device.type != "meta":  # meta tensors hold no bytes
        rows = [row for item in kvs for row in item._rows]
        owner = [position for position, item in enumerate(kvs) for _ in item._rows]
        shared = _first_overlap(rows, owner)
        if shared is not None:
            i, j = owner[shared[0]], owner[shared[1]]
            raise ValueError(f"kv: kv[{i}] and kv[{j}] share memory (those rows would be moved twice)")
    if len(_DISJOINT_LISTS) >= _MAX_DISJOINT_LISTS:
        _DISJOINT_LISTS.clear()
    _DISJOINT_LISTS[key] = tuple(weakref.ref(item) for item in kvs)


def _kv_devices(kvs: list[KVBuffers]) -> dict[str, Tensor]:
    return {f"kv[{i}]": item.buffers[0] for i, item in enumerate(kvs)}


# --------------------------------------------------------------------------------------------------
# B1 move_kv_cache


def _move_kv_cache_reference(
    buffers: list[Tensor],
    ptr_table: Tensor,
    vectorizable: bool,
    tgt_loc: Tensor,
    src_loc: Tensor,
    segment_lens: Tensor | None,
) -> None:
    # One gather of every lane's source row per buffer, then one scatter: every read of the call
    # precedes every write, which is the per-segment gather-then-scatter of the contract (and more,
    # since segments never overlap each other). segment_lens only matters to kernels that stage
    # one segment at a time; the pointer table to kernels that move all buffers in one launch.
    num_slots = buffers[0].shape[0]
    if tgt_loc.numel() == 0 or num_slots == 0:
        return
    tgt = tgt_loc.long()
    src = src_loc.long()
    valid = (tgt >= 0) & (tgt < num_slots) & (src >= 0) & (src < num_slots)
    # Lane 0 masked too means no lane is valid: it becomes slot 0 copied onto itself (same bytes).
    tgt_safe, src_safe = _redirect_masked_lanes(valid, torch.where(valid, tgt, 0), torch.where(valid, src, 0))
    for buffer in buffers:
        buffer.index_copy_(0, tgt_safe, buffer.index_select(0, src_safe))


def _check_move_values(
    kvs: list[KVBuffers],
    tgt_loc: Tensor,
    src_loc: Tensor,
    segment_lens: Tensor | None,
    tgt_name: str = "tgt_loc",
    src_name: str = "src_loc",
) -> None:
    """Slot ranges, segment lengths, and no slot written twice or written by one segment and read by another."""
    num_slots = min(item.num_slots for item in kvs)
    check_range(tgt_name, tgt_loc, 0, num_slots, allow=-1)
    check_range(src_name, src_loc, 0, num_slots, allow=-1)
    lanes = tgt_loc.numel()
    if segment_lens is None:
        segment_of_lane = torch.zeros(lanes, dtype=torch.int64, device=tgt_loc.device)
    else:
        check_non_negative("segment_lens", segment_lens)
        total = int(segment_lens.sum())
        if total != lanes:
            raise ValueError(
                f"segment_lens: expected lengths summing to the {lanes} lanes of tgt_loc, got {total}"
            )
        segment_ids = torch.arange(segment_lens.numel(), device=tgt_loc.device)
        segment_of_lane = torch.repeat_interleave(segment_ids, segment_lens.long())
    moved = (tgt_loc != -1) & (src_loc != -1)
    # Stable: the lanes of one target stay in lane order, hence in segment order.
    targets, order = tgt_loc[moved].long().sort(stable=True)
    if targets.numel() == 0:
        return
    sources = src_loc[moved].long()[order]
    segments = segment_of_lane[moved][order]
    # Lanes repeating a (target, source) pair are harmless (sglang pads with 0 -> 0 lanes): the
    # result is the move without the repeats. One target with two sources has no defined result.
    conflicting = (targets[1:] == targets[:-1]) & (sources[1:] != sources[:-1])
    if bool(conflicting.any()):
        at = int(conflicting.nonzero()[0, 0])
        raise ValueError(
            f"{tgt_name}: slot {int(targets[at])} is the target of more than one lane, with different sources "
            f"({int(sources[at])} and {int(sources[at + 1])})"
        )
    # A lane moving a slot onto itself writes the bytes the slot holds: it cannot disturb another
    # segment's read, nor be disturbed. Every other slot a segment reads must be written (if at all)
    # by that segment alone: its first and last writer (lowest and highest segment) are checked.
    copies = targets != sources
    written, writers = targets[copies], segments[copies]
    if written.numel() == 0:
        return
    read, reader = sources[copies], segments[copies]
    first = torch.searchsorted(written, read).clamp(max=written.numel() - 1)
    last = (torch.searchsorted(written, read, right=True) - 1).clamp(min=0)
    crossing = (written[first] == read) & ((writers[first] != reader) | (writers[last] != reader))
    if bool(crossing.any()):
        slot = int(read[crossing][0])
        raise ValueError(
            f"{src_name}: slot {slot} is read by one segment and written by another (segments must not overlap)"
        )


def _move_rows(
    kvs: list[KVBuffers], device: torch.device, tgt_loc: Tensor, src_loc: Tensor, segment_lens: Tensor | None
) -> None:
    for item in kvs:
        move_kv_cache.dispatch(
            device, item.buffers, item.ptr_table, item.vectorizable, tgt_loc, src_loc, segment_lens
        )


def _slot_bytes(kv: KVBuffers | list[KVBuffers]) -> int:
    """Bytes of one slot's rows over every buffer of ``kv``."""
    return sum(len(item.buffers) * item.row_bytes for item in (kv if isinstance(kv, list) else [kv]))


def _move_bytes(kv: KVBuffers | list[KVBuffers], tgt_loc: Tensor, src_loc: Tensor, **_: object) -> int:
    """A lane with both slots reads and writes one row of every buffer; other lanes move nothing."""
    return 2 * int(((tgt_loc >= 0) & (src_loc >= 0)).sum()) * _slot_bytes(kv)


@define_op(
    _move_kv_cache_reference,
    mutates=("buffers",),
    op_class="bandwidth",
    variant=("tgt_loc", "src_loc", "segment_lens", "vectorizable"),
    bytes_moved=_move_bytes,
)
def move_kv_cache(
    op: OpDef,
    kv: KVBuffers | list[KVBuffers],
    tgt_loc: Tensor,
    src_loc: Tensor,
    segment_lens: Tensor | None = None,
) -> KVBuffers | list[KVBuffers]:
    """Copy KV row ``src_loc[i]`` onto row ``tgt_loc[i]`` in every buffer of ``kv``.

    Used after verify to move accepted draft tokens' KV to their committed slots (spec v2), and by
    pools that compact or relocate KV. Within each segment (a run of consecutive lanes) the result is
    as if every source row were read before any target row is written, whatever the overlap; rows of
    different segments must not overlap (a slot one segment writes is read by no other segment;
    sharing sources is fine). Lanes whose target or source is -1 are skipped. Lanes repeating
    another lane's (target, source) pair are allowed and change nothing (sglang pads with lanes
    moving slot 0 onto itself); one target with two different sources is an error. The buffers of
    the KVBuffers in a list must not share memory.

    Args:
        kv: a :class:`KVBuffers` or a list of them (all on one device, sharing the slot ids).
        tgt_loc: ``[N]`` int32/int64 target slots, -1 = skip.
        src_loc: ``[N]`` int32/int64 source slots, -1 = skip.
        segment_lens: ``[n_seg]`` int32/int64 lengths of consecutive lane runs summing to N;
            None = one segment of all N lanes.

    Returns:
        ``kv``, its buffers updated in place.
    """
    kvs = _kv_list(kv)
    check_index("tgt_loc", tgt_loc)
    check_index("src_loc", src_loc, shape=(tgt_loc.shape[0],))
    if segment_lens is not None:
        check_index("segment_lens", segment_lens)
    device = common_device(**_kv_devices(kvs), tgt_loc=tgt_loc, src_loc=src_loc, segment_lens=segment_lens)
    if value_checks_enabled(device):
        _check_move_values(kvs, tgt_loc, src_loc, segment_lens)
    if tgt_loc.numel():
        _move_rows(kvs, device, tgt_loc, src_loc, segment_lens)
    return kv


# --------------------------------------------------------------------------------------------------
# B2 move_accept_tokens_to_target_kvcache


def _move_accept_tokens_to_target_kvcache_reference(
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    num_correct_drafts: Tensor,
    accept_index: Tensor,
    out_cache_loc: Tensor,
    tgt_loc: Tensor,
    src_loc: Tensor,
) -> None:
    # Lane (b, j) moves accepted node j of request b from its draft slot to committed position
    # seq_lens[b] + j. Lanes past ncd[b], -1 nodes and any out-of-range index are padded with -1
    # (and never used to read out of bounds).
    num_requests, pool_len = req_to_token.shape
    if req_to_token.numel() == 0 or out_cache_loc.numel() == 0:
        tgt_loc.fill_(-1)
        src_loc.fill_(-1)
        return
    bs, width = accept_index.shape
    lane = torch.arange(width, device=accept_index.device)
    request_row = req_pool_indices.long()[:, None].expand(bs, width)
    column = seq_lens.long()[:, None] + lane
    node = accept_index.long()
    accepted = (
        (lane <= num_correct_drafts.long()[:, None])
        & (node >= 0)
        & (node < out_cache_loc.numel())
        & (request_row >= 0)
        & (request_row < num_requests)
        & (column >= 0)
        & (column < pool_len)
    )
    target = req_to_token[torch.where(accepted, request_row, 0), torch.where(accepted, column, 0)]
    source = out_cache_loc[torch.where(accepted, node, 0)]
    tgt_loc.copy_(torch.where(accepted, target.long(), -1).flatten())
    src_loc.copy_(torch.where(accepted, source.long(), -1).flatten())


#: Read-only ``[bs]`` tensors of W, per (device, bs, W): the segments of the accepted-token move.
#: Made once (outside graph capture), so the move is two launches, not three with a fill.
_UNIFORM_SEGMENT_LENS: dict[tuple[torch.device, int, int], Tensor] = {}
_MAX_CACHED_SEGMENT_LENS = 1024


def _uniform_segment_lens(device: torch.device, bs: int, width: int) -> Tensor:
    key = (device, bs, width)
    cached = _UNIFORM_SEGMENT_LENS.get(key)
    if cached is not None:
        return cached
    lens = torch.full((bs,), width, dtype=torch.int64, device=device)
    # A tensor made under capture lives in the graph's memory pool: never keep it past the graph.
    if not is_capturing(device) and len(_UNIFORM_SEGMENT_LENS) < _MAX_CACHED_SEGMENT_LENS:
        synchronize(device)  # once per key: later calls on any stream read it filled
        _UNIFORM_SEGMENT_LENS[key] = lens
    return lens


def _accept_move_bytes(kv: KVBuffers | list[KVBuffers], num_correct_drafts: Tensor, **_: object) -> int:
    """The rows of each request's accepted path (root and ``ncd`` drafts), read and written once."""
    lanes = int(num_correct_drafts.long().sum()) + num_correct_drafts.numel()
    return 2 * lanes * _slot_bytes(kv)


@define_op(
    _move_accept_tokens_to_target_kvcache_reference,
    mutates=("tgt_loc", "src_loc"),
    op_class="bandwidth",
    variant=("req_pool_indices", "seq_lens", "num_correct_drafts", "accept_index", "out_cache_loc"),
    bytes_moved=_accept_move_bytes,
)
def move_accept_tokens_to_target_kvcache(
    op: OpDef,
    kv: KVBuffers | list[KVBuffers],
    req_pool_indices: Tensor,
    req_to_token: Tensor,
    seq_lens: Tensor,
    num_correct_drafts: Tensor,
    accept_index: Tensor,
    out_cache_loc: Tensor,
    tgt_loc: Tensor | None = None,
    src_loc: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Move the KV of each request's accepted tokens from their draft slots to their committed slots.

    Spec v2 reserves KV ahead and verifies the draft tree in scratch slots (``out_cache_loc``);
    after verify the accepted path (root + ``ncd[b]`` drafts) of request b is moved to
    ``req_to_token[rpi[b], seq_lens[b] + j]``, j = 0..ncd[b]. The slot lists are built with one
    segment of W lanes per request, -1 padded, then moved with :func:`move_kv_cache`.

    Args:
        kv: a :class:`KVBuffers` or a list of them.
        req_pool_indices: ``[bs]`` int32/int64 rows of ``req_to_token``.
        req_to_token: ``[R, P]`` int32 slot map.
        seq_lens: ``[bs]`` int32/int64 committed lengths before this step.
        num_correct_drafts: ``[bs]`` int32/int64 accepted drafts (bonus excluded), ``< W``.
        accept_index: ``[bs, W]`` int32/int64 flat node ids of the accepted path, root first, -1 padded.
        out_cache_loc: ``[bs*D]`` int32/int64 draft slots of the verify step.
        tgt_loc, src_loc: optional ``[bs*W]`` int64 outputs.

    Returns:
        ``(tgt_loc, src_loc)``: lane ``b*W + j`` holds the target and source slot of accepted node j
        of request b, -1 for lanes not moved.
    """
    kvs = _kv_list(kv)
    check_index("accept_index", accept_index, ndim=2)
    bs, width = accept_index.shape
    check_index("req_pool_indices", req_pool_indices, shape=(bs,))
    check_tensor("req_to_token", req_to_token, dtype=torch.int32, ndim=2)
    check_index("seq_lens", seq_lens, shape=(bs,))
    check_index("num_correct_drafts", num_correct_drafts, shape=(bs,))
    check_index("out_cache_loc", out_cache_loc)
    device = common_device(
        **_kv_devices(kvs),
        req_pool_indices=req_pool_indices,
        req_to_token=req_to_token,
        seq_lens=seq_lens,
        num_correct_drafts=num_correct_drafts,
        accept_index=accept_index,
        out_cache_loc=out_cache_loc,
    )
    lanes = bs * width
    outputs = []
    for name, given in (("tgt_loc", tgt_loc), ("src_loc", src_loc)):
        if given is None:
            outputs.append(new_output((lanes,), torch.int64, device))
        else:
            outputs.append(check_output(name, given, dtype=torch.int64, device=device, shape=(lanes,)))
    tgt_loc, src_loc = outputs
    if bs == 0:
        return tgt_loc, src_loc
    checking = value_checks_enabled(device)
    if checking:
        num_requests, pool_len = req_to_token.shape
        check_range("req_pool_indices", req_pool_indices, 0, num_requests)
        check_non_negative("seq_lens", seq_lens)
        check_range("num_correct_drafts", num_correct_drafts, 0, width)
        check_sum_below(
            "seq_lens",
            seq_lens,
            pool_len,
            plus=num_correct_drafts,
            expression="seq_lens + num_correct_drafts (the last committed column of req_to_token)",
        )
        check_range("accept_index", accept_index, 0, out_cache_loc.numel(), allow=-1)
    op.dispatch(
        device,
        req_pool_indices,
        req_to_token,
        seq_lens,
        num_correct_drafts,
        accept_index,
        out_cache_loc,
        tgt_loc,
        src_loc,
    )
    # One segment per request: a kernel can hold a request's W rows before writing them.
    segment_lens = _uniform_segment_lens(device, bs, width)
    if checking:
        _check_move_values(
            kvs, tgt_loc, src_loc, segment_lens, "req_to_token (target slots)", "out_cache_loc (source slots)"
        )
    _move_rows(kvs, device, tgt_loc, src_loc, segment_lens)
    return tgt_loc, src_loc
