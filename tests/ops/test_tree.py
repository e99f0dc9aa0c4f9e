"""Family C (tree build / verify / accept): the public ops against the loop oracles of
``tests/oracles/tree.py``, golden values, argument errors, meta tensors, torch.compile and the
losslessness of the sampling verifies."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from oracles import tree as oracle

import spec_hal.ops as ops
from spec_hal import registry
from spec_hal.conformance import grid
from spec_hal.conformance.cases import tree as tree_cases
from spec_hal.ops import tree as tree_ops

CPU = torch.device("cpu")
CASES = tree_cases.cases()
CHECKED = [c for c in CASES if c.kind != "golden"]
GOLDEN = [c for c in CASES if c.kind == "golden"]


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def _to(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    return value


def _assert_same(actual: Any, expected: Any, what: str) -> None:
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _assert_same(a, e, f"{what}[{i}]")
        return
    assert actual.dtype == expected.dtype or not isinstance(expected, torch.Tensor), (
        what,
        actual.dtype,
        expected.dtype,
    )
    torch.testing.assert_close(
        actual.cpu(), expected, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}"
    )


# --------------------------------------------------------------------------------------------------
# Oracle runners: the expected state after the call, by argument name ("result" = the return value)


def _oracle_organize(kw):
    return {
        "result": oracle.organize_draft_results(
            kw["score_list"], kw["token_list"], kw["parents_list"], kw["draft_token_num"]
        )
    }


def _oracle_build(kw):
    mask, positions, ri, nt, ns = oracle.build_tree(
        kw["parent_list"].long(),
        kw["selected_index"].long(),
        kw["seq_lens"].long(),
        kw["topk"],
        kw["num_steps"],
        kw["draft_token_num"],
        kw["tree_mask_mode"],
        kw["tree_mask"],
    )
    expected = {
        "tree_mask": mask,
        "positions": positions,
        "retrieve_index": ri,
        "retrieve_next_token": nt,
        "retrieve_next_sibling": ns,
    }
    if kw.get("verified_id") is not None:
        flat = torch.cat([kw["verified_id"].long()[:, None], kw["draft_tokens"].long()], 1).flatten()
        expected["result"] = (mask, positions, ri, nt, ns, flat)
    return expected


def _verify_outputs(kw, *extra):
    return {name: kw[name].clone() for name in ("predicts", "accept_index", "num_correct_drafts", *extra)}


def _oracle_greedy(kw):
    out = _verify_outputs(kw)
    oracle.verify_tree_greedy(
        out["predicts"],
        out["accept_index"],
        out["num_correct_drafts"],
        kw["candidates"],
        kw["retrieve_index"],
        kw["retrieve_next_token"],
        kw["retrieve_next_sibling"],
        kw["target_predict"],
    )
    return out


def _oracle_tree_sampling(kw):
    out = _verify_outputs(kw, "draft_probs")
    oracle.tree_sampling(
        out["predicts"],
        out["accept_index"],
        out["num_correct_drafts"],
        kw["candidates"],
        kw["retrieve_index"],
        kw["retrieve_next_token"],
        kw["retrieve_next_sibling"],
        kw["uniform_samples"],
        kw["uniform_samples_for_final_sampling"],
        kw["target_probs"],
        out["draft_probs"],
        kw.get("threshold_single", 1.0),
        kw.get("threshold_acc", 1.0),
    )
    return out


def _oracle_chain(kw):
    out = _verify_outputs(kw)
    oracle.chain_sampling(
        out["predicts"],
        out["accept_index"],
        out["num_correct_drafts"],
        kw["candidates"],
        kw["retrieve_index"],
        kw["uniform_samples"],
        kw["uniform_samples_for_final_sampling"],
        kw["target_probs"],
        kw["draft_probs"],
    )
    return out


def _oracle_bonus(kw):
    given = kw.get("bonus_tokens")
    bonus = torch.zeros(kw["accept_lens"].shape, dtype=torch.int32) if given is None else given.clone()
    oracle.fill_bonus_tokens(kw["accept_tokens"], kw["accept_lens"], bonus)
    return {"bonus_tokens": bonus}


def _oracle_pack(kw):
    full = kw["full_mask"].clone()
    oracle.pack_ngram_full_mask(kw["draft_tree_mask"], kw["seq_lens"], kw["draft_token_num"], full)
    return {"full_mask": full}


def _oracle_reconstruct(kw):
    return {"result": oracle.reconstruct_indices(kw["tree_mask"], kw["seq_lens"], kw["draft_token_num"])}


ORACLES = {
    "organize_draft_results": _oracle_organize,
    "build_tree_kernel_efficient": _oracle_build,
    "verify_tree_greedy": _oracle_greedy,
    "tree_speculative_sampling_target_only": _oracle_tree_sampling,
    "chain_speculative_sampling": _oracle_chain,
    "fill_bonus_tokens": _oracle_bonus,
    "pack_ngram_full_mask": _oracle_pack,
    "reconstruct_indices_from_tree_mask": _oracle_reconstruct,
}


def _run_checked(op_name: str, kwargs: dict[str, Any], expected: dict[str, Any]) -> None:
    """Run the op; compare with ``expected``; every argument the op may not write is unchanged."""
    mutated = set(registry.ops()[op_name].mutates) | {"out"}
    before = {k: _clone(v) for k, v in kwargs.items() if k not in mutated}
    result = getattr(ops, op_name)(**kwargs)
    for name, value in expected.items():
        _assert_same(result if name == "result" else kwargs[name], value, name)
    for name, value in before.items():
        if isinstance(value, (torch.Tensor, list, tuple)) and name != "tree_mask":
            _assert_same(kwargs[name], value, f"input {name} changed")


@pytest.mark.parametrize("case", CHECKED, ids=lambda c: f"{c.op}-{c.name}")
def test_matches_oracle(case):
    kwargs = case.build(CPU)
    expected = ORACLES[case.op](_clone(kwargs))
    _run_checked(case.op, kwargs, expected)


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: f"{c.op}-{c.name}")
def test_golden(case):
    kwargs = case.build(CPU)
    from_oracle = ORACLES[case.op](_clone(kwargs))
    _run_checked(case.op, kwargs, case.expected())
    # The oracle agrees with the hand-derived values too.
    for name, value in case.expected().items():
        if name in from_oracle:
            _assert_same(from_oracle[name], value, f"oracle {name}")


@pytest.mark.parametrize("bad", tree_cases.bad_cases(), ids=lambda b: f"{b.op}-{b.name}")
def test_bad_case(bad):
    kwargs = bad.build(CPU)
    with pytest.raises(bad.error, match=bad.match):
        getattr(ops, bad.op)(**kwargs)


def test_every_op_has_cases():
    names = {c.op for c in CASES}
    assert names == set(tree_cases.BUILDERS)
    assert {c.op for c in GOLDEN} == names
    assert {b.op for b in tree_cases.bad_cases()} == names
    assert set(tree_ops.__all__) >= names
    assert any(c.op == "build_tree_kernel_efficient" and "malformed" in c.name for c in CASES)
    modes = {c.build(CPU)["tree_mask_mode"] for c in CASES if c.op == "build_tree_kernel_efficient"}
    assert modes == {0, 1, 2}


# --------------------------------------------------------------------------------------------------
# Untouched entries, outputs left None, bs = 0


def test_greedy_keeps_unvisited_entries():
    kwargs = tree_cases.build_verify_tree_greedy(CPU, bs=64, topk=4, num_steps=3, seed=3)
    ops.verify_tree_greedy(**kwargs)
    n = kwargs["num_correct_drafts"].long()
    accept = kwargs["accept_index"]
    width = accept.shape[1]
    padding = torch.arange(width) > n[:, None]
    assert (accept[padding] == grid.POISON_INT).all() and (accept[~padding] >= 0).all()
    visited = torch.zeros_like(kwargs["predicts"], dtype=torch.bool)
    visited[accept[~padding].long()] = True
    assert (kwargs["predicts"][~visited] == grid.POISON_INT).all()
    assert (kwargs["predicts"][visited] != grid.POISON_INT).all()
    assert 0 < n.float().mean() < width - 1  # the case accepts some drafts, not all


def test_full_mask_untouched_outside_tree_columns():
    kwargs = tree_cases.build_build_tree_kernel_efficient(CPU, bs=5, topk=2, num_steps=3, mode=0, seed=1)
    before = kwargs["tree_mask"].clone()
    ops.build_tree_kernel_efficient(**kwargs)
    seqs, num_nodes = kwargs["seq_lens"].tolist(), kwargs["draft_token_num"]
    tree_column = torch.zeros_like(before)
    start = 0
    for seq in seqs:
        for i in range(num_nodes):
            row = start + i * (seq + num_nodes)
            tree_column[row + seq : row + seq + num_nodes] = True
        start += seq * num_nodes + num_nodes * num_nodes
    assert torch.equal(kwargs["tree_mask"][~tree_column], before[~tree_column])


def test_optional_outputs_allocated():
    kwargs = tree_cases.build_build_tree_kernel_efficient(CPU, bs=3, topk=2, num_steps=3, mode=2, seed=2)
    expected = _oracle_build(_clone(kwargs))
    for name in ("tree_mask", "positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling"):
        del kwargs[name]
    result = ops.build_tree_kernel_efficient(**kwargs)
    assert result[0].dtype == torch.uint8
    _assert_same(result, expected["result"], "result")
    rebuilt = ops.reconstruct_indices_from_tree_mask(
        torch.ones(2, 3, 3, dtype=torch.bool).tril().flatten(), torch.tensor([4, 0]), 3
    )
    assert [t.dtype for t in rebuilt] == [torch.int64] * 4
    bonus = ops.fill_bonus_tokens(torch.tensor([[1, 2]], dtype=torch.int32), torch.tensor([2]))
    assert bonus.dtype == torch.int32 and bonus.tolist() == [2]


def test_full_mask_offsets_are_int64():
    seq = torch.tensor([2**31, 5, 2**30])
    from spec_hal.ops.tree._common import full_mask_tree_columns

    columns = full_mask_tree_columns(seq, 4)
    assert columns.dtype == torch.int64
    assert columns[1, 0, 0].item() == 4 * 2**31 + 16 + 5  # block of request 1 + its prefix
    assert columns[2, 3, 3].item() == 4 * (2**31 + 5) + 2 * 16 + 3 * (2**30 + 4) + 2**30 + 3


@pytest.mark.parametrize("op_name", sorted(tree_cases.BUILDERS))
def test_bs_zero(op_name):
    kwargs = tree_cases.BUILDERS[op_name](CPU, bs=0, topk=2, num_steps=2)
    result = getattr(ops, op_name)(**kwargs)
    tensors = result if isinstance(result, tuple) else (result,)
    assert all(t is None or isinstance(t, torch.Tensor) for t in tensors)


# --------------------------------------------------------------------------------------------------
# Meta tensors: the public ops dispatch to the portable references, which stay shape-static


META_SIZES = {"bs": 3, "num_steps": 3, "seed": 4}


@pytest.mark.parametrize("op_name", sorted(tree_cases.BUILDERS))
def test_meta_runs_portable(op_name):
    sizes = dict(META_SIZES, topk=2)
    kwargs = tree_cases.BUILDERS[op_name](CPU, **sizes)
    if op_name == "build_tree_kernel_efficient":
        kwargs = tree_cases.build_build_tree_kernel_efficient(CPU, mode=0, **sizes)
    meta = {k: _to(v, "meta") for k, v in kwargs.items()}
    op = registry.ops()[op_name]
    op.clear_bindings()
    getattr(ops, op_name)(**meta)
    assert all(fn is op.reference for (device, _), fn in op._bound.items() if device.type == "meta")
    assert any(device.type == "meta" for device, _ in op._bound)


def test_meta_every_mask_mode():
    for mode in (0, 1, 2):
        kwargs = tree_cases.build_build_tree_kernel_efficient(CPU, bs=2, topk=4, num_steps=2, mode=mode)
        result = ops.build_tree_kernel_efficient(**{k: _to(v, "meta") for k, v in kwargs.items()})
        assert result[0].device.type == "meta"


# --------------------------------------------------------------------------------------------------
# torch.compile


def _compiled_matches_eager(op_name: str, kwargs: dict[str, Any]) -> None:
    torch._dynamo.reset()
    eager_kwargs, compiled_kwargs = _clone(kwargs), _clone(kwargs)
    op = getattr(ops, op_name)
    eager = op(**eager_kwargs)
    compiled = torch.compile(lambda kw: op(**kw), fullgraph=True, backend="aot_eager")(compiled_kwargs)
    _assert_same(compiled, eager, "result")
    for name in registry.ops()[op_name].mutates:
        if name in eager_kwargs:
            _assert_same(compiled_kwargs[name], eager_kwargs[name], name)


def test_compile_verify_tree_greedy():
    kwargs = tree_cases.build_verify_tree_greedy(
        CPU, bs=8, topk=2, num_steps=3, idx_dtype=torch.int32, seed=11
    )
    _compiled_matches_eager("verify_tree_greedy", kwargs)


def test_compile_build_tree():
    kwargs = tree_cases.build_build_tree_kernel_efficient(CPU, bs=4, topk=2, num_steps=3, mode=0, seed=12)
    _compiled_matches_eager("build_tree_kernel_efficient", kwargs)


def test_compile_tree_sampling():
    kwargs = tree_cases.build_tree_speculative_sampling_target_only(CPU, bs=4, topk=2, num_steps=3, seed=13)
    _compiled_matches_eager("tree_speculative_sampling_target_only", kwargs)


# --------------------------------------------------------------------------------------------------
# Losslessness: over a dense coin grid, the committed tokens follow the target exactly

_GRID = 8  # coins (k + 0.5)/8; every probability below is a multiple of 1/8 (exact on this grid)
_COINS = (torch.arange(_GRID, dtype=torch.float64) + 0.5) / _GRID


def _committed_histograms(predicts, accept_index, num_correct, weights, num_nodes, vocab):
    """mass[c] and hist[c, t]: weight of outcomes whose path holds node c and commit t after it."""
    rows = accept_index.shape[0]
    hist = torch.zeros(num_nodes, vocab, dtype=torch.float64)
    on_path = torch.arange(accept_index.shape[1]) <= num_correct.long()[:, None]
    for k in range(accept_index.shape[1]):
        flat = accept_index[:, k].long().clamp(min=0)
        node = torch.where(on_path[:, k], flat - torch.arange(rows) * num_nodes, 0)
        token = predicts.long()[flat]
        contribution = torch.where(on_path[:, k], weights, 0.0)
        hist.index_put_((node, token), contribution, accumulate=True)
    return hist.sum(1), hist


def _assert_target_distributed(mass, hist, target_rows):
    assert mass[0] == pytest.approx(1.0, abs=1e-12)
    for node in range(len(mass)):
        if mass[node] > 0:
            expected = mass[node] * target_rows[node].double()
            assert torch.allclose(hist[node], expected, rtol=0, atol=1e-12), (node, hist[node], expected)


# Tree: root -> node 1 (token 1), node 2 (token 2); node 1 -> node 3 (token 0). W = 3, V = 4.
_TREE_TARGET = torch.tensor(
    [[0.25, 0.125, 0.375, 0.25], [0.5, 0.25, 0.0, 0.25], [0.125, 0.125, 0.25, 0.5], [0.25, 0.25, 0.25, 0.25]]
)


def _tree_sampling_grid(sampler, **thresholds):
    coins = torch.tensor(list(itertools.product(_COINS.tolist(), repeat=3)), dtype=torch.float32)
    rows, num_nodes = coins.shape[0], 4
    predicts = torch.zeros(rows * num_nodes, dtype=torch.int32)
    accept_index = torch.full((rows, 3), -1, dtype=torch.int32)
    num_correct = torch.zeros(rows, dtype=torch.int32)
    node_coins = torch.stack(
        [coins[:, 0], coins[:, 1], coins[:, 1], coins[:, 1]], 1
    )  # one of nodes 1/2 is used
    sampler(
        predicts,
        accept_index,
        num_correct,
        torch.tensor([[3, 1, 2, 0]]).expand(rows, 4),
        torch.arange(rows)[:, None] * num_nodes + torch.arange(num_nodes),
        torch.tensor([[1, 3, -1, -1]]).expand(rows, 4),
        torch.tensor([[-1, 2, -1, -1]]).expand(rows, 4),
        node_coins.contiguous(),
        coins[:, 2].contiguous(),
        _TREE_TARGET.expand(rows, 4, 4).contiguous(),
        torch.zeros(rows, num_nodes, 4),
        **thresholds,
    )
    weights = torch.full((rows,), 1.0 / rows, dtype=torch.float64)
    return _committed_histograms(predicts, accept_index, num_correct, weights, num_nodes, 4)


def test_tree_sampling_is_lossless():
    mass, hist = _tree_sampling_grid(ops.tree_speculative_sampling_target_only)
    _assert_target_distributed(mass, hist, _TREE_TARGET)
    assert mass[3] > 0  # the deepest node is reached


def _eager_coins(sampler):
    def biased(*args, **kwargs):
        args = list(args)
        args[7] = args[7] * 0.7  # scaled coins accept drafts too eagerly
        return sampler(*args, **kwargs)

    return biased


@pytest.mark.parametrize("bias", ["coin_scale", "threshold_acc"])
def test_biased_tree_sampling_is_caught(bias):
    if bias == "coin_scale":
        mass, hist = _tree_sampling_grid(_eager_coins(ops.tree_speculative_sampling_target_only))
    else:
        mass, hist = _tree_sampling_grid(ops.tree_speculative_sampling_target_only, threshold_acc=0.5)
    with pytest.raises(AssertionError):
        _assert_target_distributed(mass, hist, _TREE_TARGET)


# Chain: D = 3, V = 4; drafts x1 ~ q0, x2 ~ q1 (enumerated with their probabilities).
_CHAIN_TARGET = torch.tensor(
    [[0.25, 0.25, 0.25, 0.25], [0.5, 0.125, 0.125, 0.25], [0.125, 0.375, 0.25, 0.25]]
)
_CHAIN_DRAFT = torch.tensor([[0.5, 0.25, 0.125, 0.125], [0.125, 0.125, 0.25, 0.5]])


def _chain_sampling_grid(sampler):
    combos = list(itertools.product(range(4), range(4), *([_COINS.tolist()] * 3)))
    table = torch.tensor(combos, dtype=torch.float64)
    rows, num_nodes = table.shape[0], 3
    drafts = table[:, :2].long()
    weights = _CHAIN_DRAFT[0, drafts[:, 0]].double() * _CHAIN_DRAFT[1, drafts[:, 1]].double() / _GRID**3
    predicts = torch.zeros(rows * num_nodes, dtype=torch.int32)
    accept_index = torch.full((rows, num_nodes), -1, dtype=torch.int32)
    num_correct = torch.zeros(rows, dtype=torch.int32)
    coins = table[:, 2:].float()
    sampler(
        predicts,
        accept_index,
        num_correct,
        torch.cat([torch.zeros(rows, 1, dtype=torch.long), drafts], 1),
        torch.arange(rows)[:, None] * num_nodes + torch.arange(num_nodes),
        torch.cat([coins[:, :2], torch.zeros(rows, 1)], 1),
        coins[:, 2].contiguous(),
        _CHAIN_TARGET.expand(rows, 3, 4).contiguous(),
        _CHAIN_DRAFT.expand(rows, 2, 4).contiguous(),
    )
    return _committed_histograms(predicts, accept_index, num_correct, weights, num_nodes, 4)


def test_chain_sampling_is_lossless():
    mass, hist = _chain_sampling_grid(ops.chain_speculative_sampling)
    _assert_target_distributed(mass, hist, _CHAIN_TARGET)
    assert mass[2] > 0


def test_biased_chain_sampling_is_caught():
    def eager(*args):
        args = list(args)
        args[5] = args[5] * 0.5
        return ops.chain_speculative_sampling(*args)

    mass, hist = _chain_sampling_grid(eager)
    with pytest.raises(AssertionError):
        _assert_target_distributed(mass, hist, _CHAIN_TARGET)
