"""The Triton family's coverage: every launcher of its modules.

A launcher is ``launcher(config, *provider_arguments)``: it takes a vendor's launch configuration,
then the op's provider arguments (the reference's signature), and launches. Binding the family for
a vendor registers each :data:`LAUNCHERS` record's launcher with that vendor's configuration, as the
intended provider unless the record says it wants a vocabulary tile the vendor has not measured.
"""

from __future__ import annotations

import os

from . import index, keyed, kv, mamba, renorm, sampling, simulated, tree, vocab
from .config import INTERPRETER, LaunchConfig
from .launcher import Launcher

LAUNCHERS: tuple[Launcher, ...] = (
    *index.LAUNCHERS,
    *keyed.LAUNCHERS,
    *kv.LAUNCHERS,
    *mamba.LAUNCHERS,
    *tree.LAUNCHERS,
    *sampling.LAUNCHERS,
    *vocab.LAUNCHERS,
    *renorm.LAUNCHERS,
    *simulated.LAUNCHERS,
)

#: Why a vendor without a vocabulary tile of its own intends portable for a launcher that wants one.
COPY_TILE_LOSES = (
    "walking rows in the copy tile, its Triton launcher loses to torch at small batches on the H200 "
    "(docs/performance.md); vendors that measured a vocabulary tile of their own (vocab_block_bytes, "
    "as cuda did) intend it"
)


def launcher_of(op: str) -> Launcher | None:
    """The family's launcher record of ``op``; None where the family has no kernel for it."""
    return next((launcher for launcher in LAUNCHERS if launcher.op == op), None)


def interpreted() -> bool:
    """Kernels run on CPU tensors through Triton's interpreter (emulated runs, CI)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def launch_config(vendor_config: LaunchConfig) -> LaunchConfig:
    """The configuration launches use: the vendor's, or the interpreter's small one under it."""
    return INTERPRETER if interpreted() else vendor_config
