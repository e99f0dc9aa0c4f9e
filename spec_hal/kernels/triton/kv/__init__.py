"""Family B (KV movement) in Triton: ``move_kv_cache`` and the slot lists of
``move_accept_tokens_to_target_kvcache``.

``move_kv_cache`` moves every buffer of a :class:`~spec_hal.ops.KVBuffers` in one launch: programs
read their buffers' base addresses from the KVBuffers' pointer table, so the launch does not depend
on how many buffers (layers) there are. Rows are moved as integer *words* (int32 when the KVBuffers
is vectorizable, with a 16-byte alignment hint so loads and stores are 128-bit; otherwise the widest
word every row, slot stride and buffer start is a multiple of), whatever the buffers' dtype.

Work split: grid (segment runs, buffer groups, column tiles). A program loads the slots of a chunk
of its segments once, then walks its group of buffers a *block* at a time: one register tile of
``[block buffers x chunk lanes, tile columns]`` (a tile of small rows stacks several buffers). The
next block's rows, and the pointers of the block after it, are loaded before the current block is
stored, so a program keeps two tiles in flight and pays the dependent index loads (segment lengths,
then slots) once per chunk for its whole group. The grid is sized from shapes: a program takes two
blocks, or up to :data:`MAX_BLOCKS` where that keeps the launch near :data:`TARGET_PROGRAMS`
programs. ``segment_lens=None`` with few lanes is one chunk (no lengths tensor is built).

Read-before-write (the contract's per-segment gather-then-scatter): chunks are whole segments of at
most ``LANE_BLOCK`` lanes together. A block's stores are predicated on a reduction over every word
the block loaded (its rows are spread over the program's threads, and a barrier does not wait for
loads in flight on every vendor), so no target row of a segment is written before all its source
rows are read. Rows of different segments, buffers or columns never overlap (contract; buffers are
distinct), so neither the order of chunks and blocks inside a program nor the order of programs
matters. Segment starts are prefix sums of ``segment_lens``: a program sums the lengths before its
first segment once (chunked vector sums), and with many segments the programs per buffer group and
tile are capped, so the total prefix work stays linear in the number of segments.

Segments longer than ``LANE_BLOCK`` (never in spec use, where segments are W lanes): up to
``HELD_LANES`` lanes (:data:`MAX_HELD_LANES` at most) are still held in registers, a narrow
column slice at a time (read-before-write per slice is enough: slices never overlap). Longer ones
are staged through a scratch buffer ``[N, row]`` by the programs of the first buffer group, one
buffer after the other with a barrier between its gather and its scatter; the provider allocates
that scratch only when N exceeds the held lanes, the only case where such a segment can exist.
Both paths keep tiles no larger than the main one: a kernel has one register allocation, so a
rarely taken branch with big tiles would cost the main path its occupancy. With
``segment_lens=None`` and more than :data:`MAX_LANES` lanes (one large segment) the move is two
launches instead: gather every source row into a scratch buffer, then scatter it.

The modules: ``move`` (both providers; ``move_kv_cache``'s kernels, layout and plan), ``_common``
(the move kernels' device helpers) and ``accept`` (the slot lists' kernel). The provider of the
slot lists sits beside the move its op's contract runs next, so that a warm call passes one
kernel module.
"""

from __future__ import annotations

from ..launcher import Launcher
from .move import _accept_locs, _move_kv_cache

#: The family's launchers of this module.
LAUNCHERS: tuple[Launcher, ...] = (
    # The two-launch move of one segment longer than a chunk (segment_lens=None): the bench does not
    # time it.
    Launcher(
        "move_kv_cache",
        _move_kv_cache,
        tile="copy",
        coverage_sizes=({"bs": 64, "num_steps": 3, "segmented": False},),
    ),
    Launcher("move_accept_tokens_to_target_kvcache", _accept_locs, tile="copy"),
)

__all__ = ["LAUNCHERS"]
