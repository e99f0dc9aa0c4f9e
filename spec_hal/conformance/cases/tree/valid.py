"""Family C's random and edge conformance cases (the golden ones come from ``golden``)."""

from __future__ import annotations

from typing import Any

import torch

from ... import grid
from ...case import Case
from .builders import BUILDERS, tree_node_count
from .golden import golden_cases


def _sizes() -> list[dict[str, Any]]:
    """A covering walk of the grid (every bs, K, S and index dtype appears; no full product)."""
    sizes = []
    for n, bs in enumerate(grid.BATCH_SIZES):
        for m, topk in enumerate(grid.TOPKS):
            num_steps = grid.STEPS[(n + m) % len(grid.STEPS)]
            if bs > 64 and topk * num_steps > 16:
                continue  # large batches with large trees add time, not coverage
            idx_dtype = grid.INDEX_DTYPES[(n + m) % 2]
            sizes.append(
                {"bs": bs, "topk": topk, "num_steps": num_steps, "idx_dtype": idx_dtype, "seed": 7 * n + m}
            )
    return sizes


def _case(op: str, name: str, kind="random", expected=None, unchecked=(), **sizes: Any) -> Case:
    builder = BUILDERS[op]
    small = sizes.get("bs", 0) <= 3
    return Case(
        op,
        name,
        kind,
        lambda device: builder(device, **sizes),
        expected=expected,
        small=small,
        unchecked=frozenset(unchecked),
    )


def _label(sizes: dict[str, Any]) -> str:
    dtype = str(sizes["idx_dtype"]).replace("torch.", "")
    return f"bs{sizes['bs']}_k{sizes['topk']}_s{sizes['num_steps']}_{dtype}"


def cases() -> list[Case]:
    out: list[Case] = []
    for n, sizes in enumerate(_sizes()):
        label = _label(sizes)
        for op in ("organize_draft_results", "verify_tree_greedy", "pack_ngram_full_mask"):
            out.append(_case(op, label, **sizes))
        out.append(_case("reconstruct_indices_from_tree_mask", label, **sizes))
        # The mask modes rotate over the sizes (BITPACKING only fits D <= 32).
        fits_bitpack = tree_node_count(sizes["topk"], sizes["num_steps"]) <= 32
        mode = n % 3 if fits_bitpack else n % 2
        out.append(_case("build_tree_kernel_efficient", f"{label}_mode{mode}", mode=mode, **sizes))
        if n % 2:
            malformed = dict(sizes, seed=sizes["seed"] + 1000)
            mode = (n + 1) % 3 if fits_bitpack else 1
            name = f"{label}_malformed_mode{mode}"
            out.append(_case("build_tree_kernel_efficient", name, mode=mode, malformed=True, **malformed))
        out.append(_case("tree_speculative_sampling_target_only", label, unchecked=("draft_probs",), **sizes))
        chain = {k: v for k, v in sizes.items() if k != "topk"}
        out.append(_case("chain_speculative_sampling", label, **chain))
        out.append(_case("fill_bonus_tokens", label, **chain))
    # Edge variants.
    base = {"bs": 3, "topk": 4, "num_steps": 3, "idx_dtype": torch.int32, "seed": 5}
    # Rows wider than a kernel loads whole with the lengths (another code path).
    out.append(
        _case("fill_bonus_tokens", "wide_rows", kind="edge", bs=3, num_steps=20, idx_dtype=torch.int32)
    )
    out.append(_case("organize_draft_results", "ties", kind="edge", ties=True, **base))
    out.append(
        _case("build_tree_kernel_efficient", "malformed_full_mask", "edge", mode=0, malformed=True, **base)
    )
    out.append(
        _case("build_tree_kernel_efficient", "malformed_bitpack", "edge", mode=2, malformed=True, **base)
    )
    out.append(
        _case(
            "build_tree_kernel_efficient",
            "bitpack_int64_items",
            "edge",
            mode=2,
            mask_dtype=torch.int64,
            **base,
        )
    )
    out.append(_case("build_tree_kernel_efficient", "bitpack_d32", "edge", mode=2, num_nodes=32, **base))
    out.append(
        _case(
            "tree_speculative_sampling_target_only",
            "nonzero_draft_thresholds",
            "edge",
            unchecked=("draft_probs",),
            draft_zero=False,
            threshold_single=0.25,
            threshold_acc=0.5,
            **base,
        )
    )
    # sglang's thresholds (0, 0): children of target probability 0 are accepted (p >= 0).
    out.append(
        _case(
            "tree_speculative_sampling_target_only",
            "zero_thresholds",
            "edge",
            unchecked=("draft_probs",),
            threshold_single=0.0,
            threshold_acc=0.0,
            **base,
        )
    )
    chain = {k: v for k, v in base.items() if k != "topk"}
    out.append(_case("chain_speculative_sampling", "draft_rows_d", "edge", full_draft_rows=True, **chain))
    out.append(_case("chain_speculative_sampling", "nan_draft_rows", "edge", nan_rows=True, **chain))
    out.extend(golden_cases())
    return out
