"""Family C Triton kernels (interpreted) against the portable references of ``spec_hal/ops/tree/``.

Three kinds of checks, shared with the family D and E tests (which import the helpers below):

* conformance cases through the public op with the "triton" provider (``run_case``): the small
  cases, a few larger ones built from the family's ``BUILDERS``, and some with strided tensors;
* malformed inputs the contract rejects on CPU tensors but an accelerator does not check (-1 and
  out-of-range ids, link cycles): the Triton provider and the portable reference are called directly
  on the same arguments and every tensor must agree;
* every vendor's launch configuration (the one its bindings pass to ``spec_hal.composition.bind_triton_family``), registered
  explicitly since the interpreter otherwise runs them all with the interpreter configuration.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch
from triton_family.interpreted import (
    TRITON_VENDORS,
    VENDOR_CONFIGS,
    provider,
    register_launchers,
    small_cases,
)

from spec_hal import registry
from spec_hal.conformance.case import Case
from spec_hal.conformance.cases import tree as tree_cases
from spec_hal.conformance.runner import compare, run_case
from spec_hal.kernels.triton import tree as tree_kernels
from spec_hal.kernels.triton.config import INTERPRETER
from spec_hal.testing import emulate, isolated_registry

CPU = torch.device("cpu")
OPS = (
    "build_tree_kernel_efficient",
    "verify_tree_greedy",
    "tree_speculative_sampling_target_only",
    "chain_speculative_sampling",
    "fill_bonus_tokens",
)


# --------------------------------------------------------------------------------------------------
# Helpers (also used by test_sampling.py and test_simulated.py)


def case_id(case: Case) -> str:
    return f"{case.op}:{case.name}"


def built(builders: dict[str, Callable[..., dict]], op: str, name: str, unchecked=(), **sizes: Any) -> Case:
    """A case of ``op`` from the family's builder with the given sizes."""
    build = functools.partial(builders[op], **sizes)
    return Case(op, name, "edge", build, small=True, unchecked=frozenset(unchecked))


def padded(tensor: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout: stride 2 for vectors, rows padded otherwise
    (the last dimension keeps unit stride)."""
    if tensor.ndim == 0 or tensor.numel() == 0:
        return tensor
    if tensor.ndim == 1:
        room = torch.empty(2 * tensor.shape[0], dtype=tensor.dtype, device=tensor.device)[::2]
    else:
        shape = (*tensor.shape[:-1], tensor.shape[-1] + 3)
        room = torch.empty(shape, dtype=tensor.dtype, device=tensor.device)[..., : tensor.shape[-1]]
    return room.copy_(tensor)


def column_major(tensor: torch.Tensor) -> torch.Tensor:
    """Matrices transposed in memory (unit stride down the columns); other tensors as ``padded``."""
    if tensor.ndim != 2 or min(tensor.shape) < 2:
        return padded(tensor)
    return tensor.t().contiguous().t()


def relaid(case: Case, layout: Callable[[torch.Tensor], torch.Tensor], skip: Iterable[str] = ()) -> Case:
    """``case`` with every tensor argument (inputs and outputs, except ``skip``) in ``layout``."""

    def change(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return layout(value)
        if isinstance(value, (list, tuple)):
            return type(value)(change(v) for v in value)
        return value

    def build(device: torch.device) -> dict[str, Any]:
        return {k: v if k in skip else change(v) for k, v in case.build(device).items()}

    return Case(
        case.op, f"{case.name}[{layout.__name__}]", case.kind, build, small=True, unchecked=case.unchecked
    )


def assert_passes(case: Case, vendor: str = "cuda") -> None:
    with emulate(vendor):
        assert run_case(case, CPU, "triton") == []


def assert_providers_agree(op: str, provider: Callable[..., None], args: list[Any]) -> None:
    """The Triton provider and the portable reference, called directly (no contract: no value
    checks), leave every tensor argument identical."""
    want = copy.deepcopy(args)
    registry.ops()[op].reference(*want)
    got = copy.deepcopy(args)
    provider(*got)
    assert compare(got, want) == []


def assert_passes_with_vendor_config(vendor: str, family: Any, cases: list[Case]) -> None:
    """Run ``cases`` on ``vendor`` with ``family`` registered under the vendor's real configuration."""
    with isolated_registry(), emulate(vendor) as descriptor:
        registry.REGISTRY.load_bindings(descriptor)
        register_launchers(vendor, VENDOR_CONFIGS[vendor], family.LAUNCHERS)
        for case in cases:
            assert run_case(case, CPU, "triton") == [], case_id(case)


# --------------------------------------------------------------------------------------------------
# Conformance cases


B = tree_cases.BUILDERS
EXTRA = [
    # bs 70 > the interpreter block (64): the FULL_MASK prefix of seq_lens is summed in 2 chunks.
    built(B, "build_tree_kernel_efficient", "full_mask_bs70", bs=70, topk=2, num_steps=2, mode=0, idx_dtype=torch.int32),
    built(B, "build_tree_kernel_efficient", "malformed_full_mask_bs9", bs=9, topk=4, num_steps=3, mode=0, malformed=True),
    built(B, "build_tree_kernel_efficient", "bitpack_int8_items", bs=2, topk=2, num_steps=3, mode=2, mask_dtype=torch.int8),
    built(B, "build_tree_kernel_efficient", "bitpack_uint16_d9", bs=3, topk=2, num_steps=4, mode=2, idx_dtype=torch.int32),
    built(B, "build_tree_kernel_efficient", "one_step", bs=3, topk=3, num_steps=1, mode=1),
    built(B, "verify_tree_greedy", "bs5_k4_int32", bs=5, topk=4, num_steps=3, idx_dtype=torch.int32),
    built(B, "tree_speculative_sampling_target_only", "bs5_k4_int32", unchecked={"draft_probs"}, bs=5, topk=4, num_steps=3, idx_dtype=torch.int32),
    built(B, "chain_speculative_sampling", "nan_rows_int32", bs=6, num_steps=4, nan_rows=True, idx_dtype=torch.int32),
    built(B, "fill_bonus_tokens", "bs150_int32", bs=150, num_steps=3, idx_dtype=torch.int32),
    # Trees above 16 nodes: sampling loads one row's (row, token) probabilities per step.
    built(B, "build_tree_kernel_efficient", "d21_full_mask", bs=5, topk=4, num_steps=5, mode=0),
    built(B, "verify_tree_greedy", "d19", bs=4, topk=3, num_steps=6),
    built(B, "tree_speculative_sampling_target_only", "d19", unchecked={"draft_probs"}, bs=4, topk=3, num_steps=6),
    # Rows wider than 16 tokens: the bonus token is gathered by its length instead of read with the row.
    built(B, "fill_bonus_tokens", "w21_gathered", bs=70, num_steps=20),
]  # fmt: skip
STRIDED = [relaid(small_cases(op)[0], layout) for op in OPS for layout in (padded, column_major)]


@pytest.mark.parametrize("case", [c for op in OPS for c in small_cases(op)] + EXTRA + STRIDED, ids=case_id)
def test_case(case):
    assert_passes(case)


@pytest.mark.parametrize("vendor", TRITON_VENDORS)
def test_every_vendor_configuration(vendor):
    golden = [c for op in OPS for c in small_cases(op) if c.kind == "golden"]
    # 9 requests: several programs, each building a few requests (the FULL_MASK total carried over).
    full_mask = built(B, "build_tree_kernel_efficient", "full_mask_bs9", bs=9, topk=2, num_steps=3, mode=0)
    assert_passes_with_vendor_config(vendor, tree_kernels, [*golden, full_mask])


# --------------------------------------------------------------------------------------------------
# Malformed inputs, providers called directly


def _ints(gen: torch.Generator, low: int, high: int, shape, dtype=torch.int64) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=gen).to(dtype)


def _poison(shape, dtype) -> torch.Tensor:
    return torch.full(shape, -7, dtype=dtype)


def _increasing_links(gen: torch.Generator, bs: int, num_nodes: int) -> torch.Tensor:
    """Links to a later node (or the node itself, a sibling self-loop), -1 or out of range: paths
    never revisit a node, so every path write is unambiguous."""
    node = torch.arange(num_nodes)
    later = node + (torch.rand(bs, num_nodes, generator=gen) * (num_nodes - node)).long()
    noise = _ints(gen, 0, 4, (bs, num_nodes))
    return torch.where(
        noise == 0, torch.tensor([-1, num_nodes + 2])[_ints(gen, 0, 2, (bs, num_nodes))], later
    )


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_build_tree_garbage_indices(seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    bs, topk, num_steps = 5, 3, 3
    num_nodes = 9
    width = topk * (num_steps - 1) + 1
    num_scores = topk + (num_steps - 1) * topk * topk
    parent_list = _ints(gen, -2, num_scores + 2, (bs, width), dtype)
    selected = _ints(gen, -3, num_scores + 3, (bs, num_nodes - 1), dtype)
    seq_lens = _ints(gen, 0, 9, (bs,), dtype)
    full_size = num_nodes * int(seq_lens.sum()) + bs * num_nodes * num_nodes
    for mode, mask in (
        (0, torch.rand(full_size - 40, generator=gen) < 0.5),  # too small: the tail cells are dropped
        (1, torch.rand(bs * num_nodes * num_nodes, generator=gen) < 0.5),
        (2, _ints(gen, 0, 1 << 15, (bs * num_nodes,), torch.int16)),
    ):
        # The verify input ids with two of the modes (written by the same launch), none with the other.
        tokens = [None, None, None]
        if mode != 1:
            tokens = [
                _ints(gen, 0, 1 << 20, (bs,), dtype),
                _ints(gen, 0, 1 << 20, (bs, num_nodes - 1), dtype),
                _poison((bs * num_nodes,), torch.int64),
            ]
        args = [
            parent_list, selected, seq_lens, topk, num_steps, num_nodes, mode, mask,
            _poison((bs * num_nodes,), torch.int64),
            *(_poison((bs, num_nodes), torch.int64) for _ in range(3)),
            *tokens,
        ]  # fmt: skip
        assert_providers_agree("build_tree_kernel_efficient", provider("build_tree_kernel_efficient"), args)


@pytest.mark.parametrize("seed", range(3))
def test_verify_tree_greedy_garbage_links(seed):
    # Cycles, -1 and out-of-range links and flat ids: a greedy path write depends on its flat id only.
    gen = torch.Generator().manual_seed(seed)
    bs, num_nodes, width = 4, 7, 5
    args = [
        _poison((bs * num_nodes,), torch.int32),
        _poison((bs, width), torch.int32),
        _poison((bs,), torch.int32),
        _ints(gen, 0, 3, (bs, num_nodes), torch.int32),
        _ints(gen, -2, bs * num_nodes + 2, (bs, num_nodes)),
        _ints(gen, -2, num_nodes + 2, (bs, num_nodes), torch.int32),
        _ints(gen, -2, num_nodes + 2, (bs, num_nodes)),
        _ints(gen, 0, 3, (bs, num_nodes)),
    ]
    assert_providers_agree("verify_tree_greedy", provider("verify_tree_greedy"), args)


#: The interpreter's configuration with a vocabulary tile of 256 lanes over 2 warps (four copy tiles).
VOCABULARY_TILE = dataclasses.replace(INTERPRETER, vocab_block_bytes=1024, vocab_num_warps=2)
#: (seed, vocab, configuration): several blocks over V at 300 lanes, and at 600 in the vocabulary tile.
SAMPLING_CASES = [(0, 6, INTERPRETER), (1, 6, INTERPRETER), (2, 300, INTERPRETER), (3, 600, VOCABULARY_TILE)]


def test_the_sampling_walks_take_the_vocabulary_tile():
    few = dataclasses.replace(VOCABULARY_TILE, copy_tile_programs=4)
    verify = tree_kernels._verify_tree_launch
    assert verify(few, 3, 8, 600).options["BLOCK_V"] == 256
    # At any batch (a request's sums over V must not follow the batch): copy_tile_programs aside.
    assert verify(few, 4, 8, 600).options["BLOCK_V"] == 256
    assert verify(INTERPRETER, 3, 8, 600).options["BLOCK_V"] == 64  # no vocabulary tile set
    assert tree_kernels._chain_sampling_launch(few, 64, 5, 600).options["BLOCK_V"] == 256  # at any batch


@pytest.mark.parametrize("num_nodes", [8, 20])  # 20: probabilities loaded per step, not up front
@pytest.mark.parametrize("seed, vocab, config", SAMPLING_CASES)
def test_tree_sampling_garbage_links_and_tokens(seed, vocab, config, num_nodes):
    gen = torch.Generator().manual_seed(seed)
    bs, width = 4, 4
    probs = torch.randint(0, 16, (bs, num_nodes, vocab), generator=gen).float() / 64
    args = [
        _poison((bs * num_nodes,), torch.int32),
        _poison((bs, width), torch.int32),
        _poison((bs,), torch.int32),
        _ints(gen, -1, vocab + 2, (bs, num_nodes)),  # tokens outside the vocabulary are never accepted
        torch.arange(bs * num_nodes).view(bs, num_nodes).int(),
        _increasing_links(gen, bs, num_nodes),
        _increasing_links(gen, bs, num_nodes).int(),
        (2 * _ints(gen, 0, 64, (bs, num_nodes)) + 1).float() / 128,
        (2 * _ints(gen, 0, 64, (bs,)) + 1).float() / 128,
        probs,
        torch.randint(0, 4, (bs, num_nodes, vocab), generator=gen).float() / 64,
        0.25,
        0.5,
    ]
    assert_providers_agree(
        "tree_speculative_sampling_target_only",
        provider("tree_speculative_sampling_target_only", config),
        args,
    )


@pytest.mark.parametrize("seed, vocab, config", SAMPLING_CASES)
def test_chain_sampling_garbage_tokens_and_ids(seed, vocab, config):
    gen = torch.Generator().manual_seed(seed)
    bs, num_nodes = 4, 5
    draft = torch.randint(0, 16, (bs, num_nodes - 1, vocab), generator=gen).float() / 64
    draft[0, 1] = float("nan")
    flat_ids = torch.randperm(bs * num_nodes + 4, generator=gen)[: bs * num_nodes] - 2  # distinct
    args = [
        _poison((bs * num_nodes,), torch.int32),
        _poison((bs, num_nodes), torch.int32),
        _poison((bs,), torch.int32),
        _ints(gen, -1, vocab + 1, (bs, num_nodes), torch.int32),
        flat_ids.view(bs, num_nodes),
        (2 * _ints(gen, 0, 64, (bs, num_nodes)) + 1).float() / 128,
        (2 * _ints(gen, 0, 64, (bs,)) + 1).float() / 128,
        torch.randint(0, 16, (bs, num_nodes, vocab), generator=gen).float() / 64,
        draft,
    ]
    assert_providers_agree("chain_speculative_sampling", provider("chain_speculative_sampling", config), args)


def test_fill_bonus_tokens_out_of_range_lengths():
    gen = torch.Generator().manual_seed(0)
    accept_tokens = _ints(gen, 0, 1000, (70, 4), torch.int32)
    accept_lens = _ints(gen, -1, 7, (70,))  # 0, -1 and > W are masked lanes
    args = [accept_tokens, accept_lens, _poison((70,), torch.int32)]
    assert_providers_agree("fill_bonus_tokens", provider("fill_bonus_tokens"), args)


def test_register_returns_every_op():
    with isolated_registry():
        assert sorted(register_launchers("cuda", INTERPRETER, tree_kernels.LAUNCHERS)) == sorted(OPS)
        for op in OPS:
            assert any(i.provider == "triton" for i in registry.implementations(op, "cuda"))
