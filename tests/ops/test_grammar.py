"""Family F: traverse_tree / generate_token_bitmask over a pure-Python grammar (no engine needed)."""

from __future__ import annotations

import logging
import random
import sys

import pytest
import torch
from oracles.grammar import (
    ToyGrammar,
    guided_draft_tokens,
    links_from_parents,
    random_parents,
    traverse_tree_oracle,
)

import spec_hal.ops.grammar as grammar_ops
from spec_hal.ops import Grammar, generate_token_bitmask, traverse_tree

POISON = 0x5A5A5A5A  # rows the traversal must leave alone keep this value


def as_tensors(next_token, next_sibling, tokens, dtype=torch.int64):
    return (torch.tensor(part, dtype=dtype) for part in (next_token, next_sibling, tokens))


def grammar_after(prefix: list[int], **options) -> ToyGrammar:
    grammar = ToyGrammar(**options)
    for token in prefix:
        grammar.accept_token(token)
    return grammar


def test_toy_grammar_is_a_grammar():
    assert isinstance(ToyGrammar(), Grammar)


@pytest.mark.parametrize("seed", range(12))
def test_random_trees_match_oracle_and_keep_state(seed):
    rng = random.Random(seed)
    num_nodes = rng.choice([1, 2, 5, 9, 16, 33])
    prefix = rng.choice([[], [1], [2, 2], [1, 1, 0]])  # the last one has terminated
    grammar = grammar_after(prefix, vocab_size=rng.choice([31, 32, 33, 70]))
    parents = random_parents(num_nodes, rng)
    next_token, next_sibling = links_from_parents(parents)
    tokens = guided_draft_tokens(parents, grammar.copy_state, grammar.vocab_size, rng)
    vocab_size = rng.choice([None, grammar.vocab_size])
    words = (grammar.vocab_size + 31) // 32
    index_dtype = rng.choice([torch.int32, torch.int64])

    bitmask = torch.full((num_nodes + rng.randrange(3), words), POISON, dtype=torch.int32)
    expected = traverse_tree_oracle(
        next_token, next_sibling, tokens, grammar.copy_state, bitmask.clone(), vocab_size
    )
    history = list(grammar.history)
    result = traverse_tree(
        *as_tensors(next_token, next_sibling, tokens, index_dtype), grammar, bitmask, vocab_size
    )
    assert result is bitmask
    assert torch.equal(bitmask, expected)
    assert grammar.history == history


def test_deep_chain_is_iterative_and_balanced():
    depth = 5000
    grammar = ToyGrammar(min_length=depth + 1)  # the stop token never becomes allowed
    replay = grammar.copy_state()
    tokens = [0]
    for _ in range(depth):
        tokens.append(replay.allowed_tokens()[0])
        replay.accept_token(tokens[-1])
    next_token = list(range(1, depth + 1)) + [-1]
    next_sibling = [-1] * (depth + 1)
    bitmask = torch.full((depth + 1, 3), POISON, dtype=torch.int32)

    traverse_tree(*as_tensors(next_token, next_sibling, tokens), grammar, bitmask, grammar.vocab_size)

    assert grammar.history == []
    assert grammar.max_history == depth
    assert grammar.filled_rows == list(range(depth + 1))
    expected = traverse_tree_oracle(
        next_token, next_sibling, tokens, grammar.copy_state, bitmask.clone(), nodes=[0, 1, 2, depth]
    )
    assert torch.equal(bitmask, expected)


# parents and tokens of a hand-made tree over ToyGrammar() from an empty history:
# node 1 (token 3) is rejected at the root, so its children 4 and 5 must never be walked; node 3 (stop
# token) is not allowed yet; node 7 (token 2 after sum 1) is rejected; node 8 accepts the stop token,
# terminating the grammar, so it gets no row and its child 10 is never visited; node 9 is accepted.
HAND_PARENTS = [-1, 0, 0, 0, 1, 1, 2, 2, 6, 6, 8]
HAND_TOKENS = [7, 3, 1, 0, 1, 2, 1, 2, 0, 5, 1]


def test_rejected_subtrees_and_termination_are_not_walked():
    grammar = ToyGrammar()
    next_token, next_sibling = links_from_parents(HAND_PARENTS)
    bitmask = torch.full((len(HAND_PARENTS), 3), POISON, dtype=torch.int32)

    traverse_tree(*as_tensors(next_token, next_sibling, HAND_TOKENS), grammar, bitmask, 70)

    assert sorted(grammar.filled_rows) == [0, 2, 6, 9]
    assert grammar.accepted == [1, 1, 0, 5]  # nodes 2, 6, 8, 9 in depth-first order
    untouched = [1, 3, 4, 5, 7, 8, 10]
    assert bool((bitmask[untouched] == POISON).all())
    expected = traverse_tree_oracle(
        next_token, next_sibling, HAND_TOKENS, ToyGrammar, torch.full_like(bitmask, POISON), 70
    )
    assert torch.equal(bitmask, expected)
    assert grammar.history == []


def test_tokens_past_the_vocabulary_are_rejected():
    grammar = ToyGrammar(vocab_size=100, permissive=True)  # fills every bit of the row
    next_token, next_sibling = links_from_parents([-1, 0, 0, 0])
    tokens = [0, 50, 63, 64]
    rows = {}
    for vocab_size in (40, None):
        bitmask = torch.full((4, 2), POISON, dtype=torch.int32)
        traverse_tree(*as_tensors(next_token, next_sibling, tokens), grammar, bitmask, vocab_size)
        rows[vocab_size] = sorted(grammar.filled_rows)
        grammar.filled_rows.clear()
    assert rows[40] == [0]  # 50 and 63 >= vocab_size
    assert rows[None] == [0, 1, 2]  # the limit is 32 * 2 words: 64 has no bit
    assert grammar.history == []


def test_grammar_terminated_before_the_tree_fills_nothing():
    grammar = grammar_after([1, 1, 0])
    assert grammar.is_terminated()
    next_token, next_sibling = links_from_parents([-1, 0])
    bitmask = torch.full((2, 3), POISON, dtype=torch.int32)
    traverse_tree(*as_tensors(next_token, next_sibling, [0, 1]), grammar, bitmask, 70)
    assert grammar.filled_rows == [] and grammar.accepted == [1, 1, 0]
    assert bool((bitmask == POISON).all())


class RejectingGrammar(ToyGrammar):
    """Raises in accept_token for one token although its mask allows it."""

    def accept_token(self, token: int) -> None:
        if token == 2:
            raise RuntimeError("engine failure")
        super().accept_token(token)


def test_state_restored_when_a_method_raises():
    next_token, next_sibling = links_from_parents([-1, 0, 1, 2, 3, 4])
    tokens = [0, 1, 2, 1, 2, 1]  # all allowed after the prefix [1] (running sums 2, 4, 5, 7)
    failing_fill = grammar_after([1])
    failing_fill.fail_on_fill_after = 4  # raises three tokens deep
    failing_accept = RejectingGrammar()
    failing_accept.accept_token(1)
    for grammar in (failing_fill, failing_accept):
        bitmask = torch.zeros((6, 3), dtype=torch.int32)
        with pytest.raises(RuntimeError):
            traverse_tree(*as_tensors(next_token, next_sibling, tokens), grammar, bitmask, 70)
        assert grammar.history == [1]
    assert failing_fill.max_history == 4


def test_generate_token_bitmask_batches_requests():
    rng = random.Random(7)
    num_nodes, vocab_size = 12, 70

    class Request:
        def __init__(self, grammar):
            self.grammar = grammar

    reqs = [Request(grammar_after([1] * index)) for index in range(3)] + [
        Request(None),
        Request(ToyGrammar()),
    ]
    trees = []
    for req in reqs:
        parents = random_parents(num_nodes, rng)
        next_token, next_sibling = links_from_parents(parents)
        tokens = guided_draft_tokens(parents, (req.grammar or ToyGrammar()).copy_state, vocab_size, rng)
        trees.append((next_token, next_sibling, tokens))
    next_token, next_sibling, tokens = (torch.tensor(list(part)) for part in zip(*trees, strict=True))
    histories = [list(req.grammar.history) if req.grammar else None for req in reqs]

    bitmask, last = generate_token_bitmask(reqs, next_token, next_sibling, tokens, vocab_size)

    assert last is reqs[-1].grammar
    assert bitmask.shape == (len(reqs) * num_nodes, 3) and bitmask.dtype == torch.int32
    for index, req in enumerate(reqs):
        rows = bitmask[index * num_nodes : (index + 1) * num_nodes]
        if req.grammar is None:
            assert bool((rows == -1).all())
            continue
        expected = traverse_tree_oracle(
            *trees[index], req.grammar.copy_state, torch.full_like(rows, -1), vocab_size
        )
        assert torch.equal(rows, expected)
        assert req.grammar.history == histories[index]


def test_generate_token_bitmask_without_grammar_and_empty_batch():
    class Request:
        grammar = None

    tree = torch.tensor([[1, -1]]), torch.tensor([[-1, -1]]), torch.tensor([[0, 5]])
    assert generate_token_bitmask([Request()], *tree, 70) == (None, None)
    empty = torch.zeros((0, 4), dtype=torch.int64)
    assert generate_token_bitmask([], empty, empty, empty, 70) == (None, None)


def test_generate_token_bitmask_warns_when_slow(monkeypatch, caplog):
    class Request:
        grammar = ToyGrammar()

    tree = torch.tensor([[1, -1]]), torch.tensor([[-1, -1]]), torch.tensor([[0, 1]])
    with caplog.at_level(logging.WARNING, logger="spec_hal"):
        generate_token_bitmask([Request()], *tree, 70)
        assert not caplog.records
        monkeypatch.setattr(grammar_ops, "SLOW_TRAVERSAL_SECONDS", -1.0)
        generate_token_bitmask([Request()], *tree, 70)
    assert len(caplog.records) == 1 and "request 0" in caplog.records[0].getMessage()


def test_empty_tree_is_a_no_op():
    grammar = ToyGrammar()
    empty = torch.zeros(0, dtype=torch.int64)
    bitmask = torch.full((0, 3), POISON, dtype=torch.int32)
    assert traverse_tree(empty, empty, empty, grammar, bitmask, 70) is bitmask
    assert grammar.filled_rows == []


# --------------------------------------------------------------------------------------------------
# bad inputs

CHAIN = ([1, 2, -1], [-1, -1, -1], [0, 1, 1])


def call_traverse(**overrides):
    arguments = dict(
        retrieve_next_token=torch.tensor(CHAIN[0]),
        retrieve_next_sibling=torch.tensor(CHAIN[1]),
        draft_tokens=torch.tensor(CHAIN[2]),
        grammar=ToyGrammar(),
        bitmask=torch.zeros((3, 3), dtype=torch.int32),
        vocab_size=70,
    )
    arguments.update(overrides)
    return traverse_tree(**arguments)


class NoRollback:
    accept_token = fill_vocab_mask = is_terminated = allocate_vocab_mask = ToyGrammar.accept_token


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        (dict(grammar=NoRollback()), ValueError, "grammar: .*lacks rollback"),
        (dict(grammar=object()), ValueError, "grammar: .*from_xgrammar"),
        (dict(bitmask=torch.zeros((3, 3), dtype=torch.int64)), TypeError, "bitmask: expected dtype int32"),
        (dict(bitmask=torch.zeros(9, dtype=torch.int32)), ValueError, "bitmask: expected a 2-D"),
        (
            dict(bitmask=torch.zeros((2, 3), dtype=torch.int32)),
            ValueError,
            "bitmask: expected at least 3 rows",
        ),
        (dict(bitmask=torch.zeros((3, 4), dtype=torch.int32)), ValueError, "bitmask: expected 3 int32 words"),
        (
            dict(bitmask=torch.zeros((3, 3), dtype=torch.int32, device="meta")),
            ValueError,
            "bitmask: expected a CPU",
        ),
        (
            dict(retrieve_next_token=torch.tensor([1.0, 2.0, -1.0])),
            TypeError,
            "retrieve_next_token: expected dtype",
        ),
        (
            dict(retrieve_next_sibling=torch.tensor([-1, -1])),
            ValueError,
            "retrieve_next_sibling: expected shape",
        ),
        (dict(draft_tokens=torch.tensor([[0, 1, 1]])), ValueError, "draft_tokens: expected a 1-D"),
        (
            dict(draft_tokens=torch.tensor([0, 1, 1], device="meta")),
            ValueError,
            "draft_tokens: expected a CPU",
        ),
        (
            dict(retrieve_next_token=torch.tensor([1, 3, -1])),
            ValueError,
            "retrieve_next_token: values must lie",
        ),
        (
            dict(retrieve_next_sibling=torch.tensor([-1, 2, -1])),
            ValueError,
            "node 2 is linked to more than once",
        ),
        (dict(retrieve_next_token=torch.tensor([1, 0, -1])), ValueError, "node 0 is linked"),
        (dict(retrieve_next_sibling=torch.tensor([2, -1, -1])), ValueError, "root .* cannot have a sibling"),
        (dict(draft_tokens=torch.tensor([0, -3, 1])), ValueError, "draft_tokens: expected non-negative"),
        (dict(vocab_size=0), ValueError, "vocab_size: expected an int >= 1"),
        (dict(vocab_size=True), TypeError, "vocab_size: expected an int"),
    ],
)
def test_traverse_tree_bad_inputs(overrides, error, match):
    with pytest.raises(error, match=match):
        call_traverse(**overrides)


class Request:
    def __init__(self, grammar):
        self.grammar = grammar


class BadAllocator(ToyGrammar):
    def allocate_vocab_mask(self, vocab_size, batch_size, device):
        return torch.full((batch_size, 1), -1, dtype=torch.int32)


BATCH = tuple(torch.tensor([part]) for part in CHAIN)


@pytest.mark.parametrize(
    "reqs, tree, error, match",
    [
        ([Request(ToyGrammar())] * 2, BATCH, ValueError, "reqs: expected 1 requests"),
        ([object()], BATCH, ValueError, r"reqs\[0\]: expected a request with a .grammar"),
        ([Request(NoRollback())], BATCH, ValueError, r"reqs\[0\].grammar: .*lacks rollback"),
        ([Request(BadAllocator())], BATCH, ValueError, r"reqs\[0\].grammar.allocate_vocab_mask: expected 3"),
        (
            [Request(ToyGrammar())],
            tuple(part[0] for part in BATCH),
            ValueError,
            "retrieve_next_token: expected a 2-D",
        ),
        ([Request(ToyGrammar())], (*BATCH[:2], BATCH[2][:, :2]), ValueError, "draft_tokens: expected shape"),
    ],
)
def test_generate_token_bitmask_bad_inputs(reqs, tree, error, match):
    with pytest.raises(error, match=match):
        generate_token_bitmask(reqs, *tree, 70)


def test_two_parents_in_a_batch_names_the_request():
    tree = (
        torch.tensor([[1, 2, -1], [1, 2, -1]]),
        torch.tensor([[-1, -1, -1], [-1, 2, -1]]),
        torch.zeros(2, 3),
    )
    with pytest.raises(ValueError, match="node 2 of request 1"):
        generate_token_bitmask([Request(None)] * 2, tree[0], tree[1], tree[2].long(), 70)


def test_from_xgrammar_without_xgrammar(monkeypatch):
    from spec_hal.grammar import from_xgrammar

    monkeypatch.setitem(sys.modules, "xgrammar", None)  # an import of it fails, installed or not
    with pytest.raises(ImportError, match=r"pip install spec-hal\[grammar\]"):
        from_xgrammar(object())
