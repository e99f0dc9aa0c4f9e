"""The Triton family's coverage: every launcher of its modules, by op name.

A launcher is ``launcher(config, *provider_arguments)``: it takes a vendor's launch configuration,
then the op's provider arguments (the reference's signature), and launches. Binding the family for
a vendor registers ``launcher`` with that vendor's configuration for every op of :data:`LAUNCHERS`,
as the intended provider unless :data:`LEFT_TO_TORCH` gives the reason torch serves the op.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from . import index, keyed, kv, mamba, renorm, sampling, simulated, softmax, tree, vocab
from .config import INTERPRETER, LaunchConfig

LAUNCHERS: dict[str, Callable[..., None]] = {
    **index.LAUNCHERS,
    **keyed.LAUNCHERS,
    **kv.LAUNCHERS,
    **mamba.LAUNCHERS,
    **tree.LAUNCHERS,
    **sampling.LAUNCHERS,
    **vocab.LAUNCHERS,
    **softmax.LAUNCHERS,
    **renorm.LAUNCHERS,
    **simulated.LAUNCHERS,
}

#: Ops every vendor binding the family intends portable for, with the reason: torch runs them as
#: well as a kernel would, the family does not cover them yet, or its launcher (still registered,
#: selectable with SPEC_HAL_OPS) loses to torch at the batch sizes engines decode with. A vendor's
#: own intents win (cuda intends the vocabulary walks).
_COPY_TILE_LOSES = (
    "walking rows in the copy tile, its Triton launcher loses to torch at small batches on the H200 "
    "(docs/performance.md); vendors that measured a vocabulary tile of their own (vocab_block_bytes, "
    "as cuda did) intend it"
)
LEFT_TO_TORCH: dict[str, str] = {
    "fast_sample": _COPY_TILE_LOSES,
    "renorm_draft_probs": _COPY_TILE_LOSES,
    "sample_draft_proposal": _COPY_TILE_LOSES,
    "select_top_k_tokens": "one top-k and two gathers; the hidden-state gather is a torch copy",
    "organize_draft_results": "a sort and gathers over [bs, K + (S-1)K^2]: torch is a few launches",
    "pack_ngram_full_mask": "NGRAM only; not yet in the Triton family",
    "reconstruct_indices_from_tree_mask": "NGRAM only; not yet in the Triton family",
}


def interpreted() -> bool:
    """Kernels run on CPU tensors through Triton's interpreter (emulated runs, CI)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def launch_config(vendor_config: LaunchConfig) -> LaunchConfig:
    """The configuration launches use: the vendor's, or the interpreter's small one under it."""
    return INTERPRETER if interpreted() else vendor_config
