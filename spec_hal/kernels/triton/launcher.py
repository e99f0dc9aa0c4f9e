"""The Triton family's provider of one op: its launcher, and what binding and the tools know of it.

A kernel module ends with ``LAUNCHERS``, a tuple of :class:`Launcher` records. The record is the one
place for the facts about a launcher: which op it serves, which of a vendor's tiles its kernels walk
in (what ``spec-hal bench --sweep`` times), whether it is worth binding only with a vendor's own
vocabulary tile, the variants it declines, and the sizes ``spec-hal compile`` must add to the
bench's to reach every kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: The tiles a vendor's launch configuration chooses: the copy tile (``copy_block_bytes``) or the
#: tile of the walks over a vocabulary row (``vocab_block_bytes``).
Tile = Literal["copy", "vocabulary"]


@dataclass(frozen=True)
class Launcher:
    """``launch(config, *provider_arguments)``: launches the op's kernels under a vendor's
    configuration.

    Attributes:
        op: the op it serves (``spec_hal.ops.<op>``).
        launch: the launcher; its parameters after ``config`` are the op reference's.
        tile: the tile of the vendor's configuration its kernels walk in, whose size and warps a
            vendor sweeps (None: the launch does not depend on a tile a sweep would change).
        wants_vocabulary_tile: walking its rows in the copy tile, the launcher loses to torch at the
            batches engines decode with, so a vendor intends it only with a measured vocabulary
            tile of its own (``vocab_block_bytes``).
        coverage_sizes: builder sizes that reach kernels the bench's sizes never launch (added by
            ``spec-hal compile``).
        supports: ``supports(variant)``: None where the launcher serves a variant of the op (the
            values of the op's ``variant`` arguments), else why not; the registry then records a
            fallback (an error under ``SPEC_HAL_STRICT=1``). None: it serves every variant.
    """

    op: str
    launch: Callable[..., None]
    tile: Tile | None = None
    wants_vocabulary_tile: bool = False
    coverage_sizes: tuple[Mapping[str, Any], ...] = ()
    supports: Callable[[Any], str | None] | None = None
