"""The paged KV cache of the demo: slots, a page allocator with a free list, ``req_to_token`` rows.

A *slot* holds one token's K and V in every layer (``k[layer][slot]``, ``v[layer][slot]``). Slots are
handed out a page at a time (``page_size`` consecutive slots, page p = slots ``[p*ps, (p+1)*ps)``), so
column c of a request's ``req_to_token`` row always sits at offset ``c % ps`` of its page, as paged
attention kernels expect. Page 0 and ``req_to_token`` row 0 are never handed out: they are the dummy
targets of padding and graph-capture rows (row 0 maps every column to slot 0), so such rows write
nowhere that matters. Each request row also owns recurrent-state line ``row`` (line 0 = dummy) and,
for an EAGLE-style draft, feature line ``row``: the target's hidden state the next draft reads.

Host bookkeeping (free lists, allocated lengths) is plain Python; the one device write,
recording new slots in ``req_to_token``, is :func:`spec_hal.ops.assign_req_to_token_pool` (called
through ``self.ops``, which a profiler may wrap).
"""

from __future__ import annotations

import torch

from .. import ops

DUMMY_ROW = 0


class PagedKVCache:
    def __init__(
        self,
        *,
        num_layers: int,
        num_heads: int,
        head_dim: int,
        page_size: int,
        num_pages: int,
        max_requests: int,
        max_context: int,
        state_size: int,
        feature_size: int = 0,
        device: torch.device | str,
        dtype: torch.dtype,
    ) -> None:
        if page_size < 1 or num_pages < 2:
            raise ValueError("page_size >= 1 and num_pages >= 2 (page 0 is the dummy page)")
        self.ops = ops
        self.page_size = page_size
        self.num_pages = num_pages
        self.num_slots = num_pages * page_size
        self.max_context = max_context
        shape = (self.num_slots, num_heads, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        # One KVBuffers for the accepted-token moves (every layer), one per draft depth for the
        # draft's re-gather (only the layers the draft writes), built once: never under capture.
        self.kv = ops.KVBuffers(self.k + self.v)
        self._layer_kv: dict[int, ops.KVBuffers] = {}
        self.req_to_token = torch.zeros(max_requests + 1, max_context, dtype=torch.int32, device=device)
        # recurrent state per request row: [layers=1, lines, N] as MambaVerifyStates wants it
        self.ssm_states = torch.zeros(1, max_requests + 1, max(state_size, 1), device=device, dtype=dtype)
        # the hidden state per request row that the draft's first step reads (EAGLE-style drafts)
        self.features = torch.zeros(max_requests + 1, max(feature_size, 1), device=device, dtype=dtype)
        self.free_pages = list(range(num_pages - 1, 0, -1))  # pop() hands out low pages first
        self.free_rows = list(range(max_requests, 0, -1))
        self.allocated_len = [0] * (max_requests + 1)

    def layer_kv(self, num_layers: int) -> ops.KVBuffers:
        """KVBuffers over the first ``num_layers`` layers' K and V (cached)."""
        if num_layers not in self._layer_kv:
            self._layer_kv[num_layers] = ops.KVBuffers(self.k[:num_layers] + self.v[:num_layers])
        return self._layer_kv[num_layers]

    # ---- requests ------------------------------------------------------------------------------

    def new_request(self) -> int:
        if not self.free_rows:
            raise MemoryError("no free req_to_token row")
        row = self.free_rows.pop()
        self.ssm_states[:, row].zero_()
        return row

    def reserve(self, rows: list[int], lengths: list[int]) -> None:
        """Back columns ``[0, lengths[i])`` of each row with slots, a whole page at a time, and record
        the new slots in ``req_to_token`` (one ``assign_req_to_token_pool`` for the batch)."""
        ps = self.page_size
        starts: list[int] = []
        ends: list[int] = []
        slots: list[int] = []
        for row, length in zip(rows, lengths, strict=True):
            start = self.allocated_len[row]
            end = max(start, -(-length // ps) * ps)
            if end > self.max_context:
                raise MemoryError(f"row {row}: {end} columns needed, req_to_token has {self.max_context}")
            pages = (end - start) // ps
            if pages > len(self.free_pages):
                raise MemoryError(f"out of KV pages ({pages} needed, {len(self.free_pages)} free)")
            for _ in range(pages):
                page = self.free_pages.pop()
                slots.extend(range(page * ps, (page + 1) * ps))
            starts.append(start)
            ends.append(end)
            self.allocated_len[row] = end
        if not slots:
            return
        device = self.req_to_token.device
        self.ops.assign_req_to_token_pool(
            torch.tensor(rows, device=device),
            self.req_to_token,
            torch.tensor(starts, device=device),
            torch.tensor(ends, device=device),
            torch.tensor(slots, device=device),
        )

    def release(self, row: int) -> None:
        """Give a finished request's pages and row back."""
        used = self.allocated_len[row]
        page_starts = self.req_to_token[row, : used : self.page_size].tolist()
        self.free_pages.extend(slot // self.page_size for slot in page_starts)
        self.req_to_token[row, :used] = 0
        self.allocated_len[row] = 0
        self.free_rows.append(row)

    # ---- accounting ----------------------------------------------------------------------------

    def leaks(self) -> list[str]:
        """What is not back after every request was released (empty when nothing leaked)."""
        problems = []
        free = sorted(self.free_pages)
        if free != list(range(1, self.num_pages)):
            missing = sorted(set(range(1, self.num_pages)) - set(free))
            problems.append(f"{len(missing)} KV pages not in the free list (e.g. {missing[:5]})")
        if len(free) != len(set(free)):
            problems.append("a KV page is in the free list twice")
        if sorted(self.free_rows) != list(range(1, len(self.allocated_len))):
            problems.append("req_to_token rows not released")
        if any(self.allocated_len) or bool(self.req_to_token.ne(0).any()):
            problems.append("req_to_token still maps columns to slots")
        return problems
