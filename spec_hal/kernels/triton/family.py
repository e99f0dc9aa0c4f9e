"""The Triton family's coverage: every launcher of its modules, by op name.

A launcher is ``launcher(config, *provider_arguments)``: it takes a vendor's launch configuration,
then the op's provider arguments (the reference's signature), and launches. Binding the family for
a vendor registers ``launcher`` with that vendor's configuration for every op of :data:`LAUNCHERS`;
the ops it leaves to torch are in :data:`LEFT_TO_TORCH`, each with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from . import index, kv, mamba, renorm, sampling, simulated, tree, vocab
from .config import INTERPRETER, LaunchConfig

LAUNCHERS: dict[str, Callable[..., None]] = {
    **index.LAUNCHERS,
    **kv.LAUNCHERS,
    **mamba.LAUNCHERS,
    **tree.LAUNCHERS,
    **sampling.LAUNCHERS,
    **vocab.LAUNCHERS,
    **renorm.LAUNCHERS,
    **simulated.LAUNCHERS,
}

#: Ops torch already runs as well as a kernel would (one or two fused launches, or host-side
#: compositions), or that the family does not cover yet: every vendor binding it intends portable.
LEFT_TO_TORCH: dict[str, str] = {
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
