"""Family F over a real grammar engine: xgrammar matchers through spec_hal.grammar.from_xgrammar."""

from __future__ import annotations

import random

import pytest
import torch

xgrammar = pytest.importorskip("xgrammar")

from oracles.grammar import (  # noqa: E402  (after the importorskip)
    guided_draft_tokens,
    links_from_parents,
    random_parents,
    traverse_tree_oracle,
)

from spec_hal.grammar import from_xgrammar  # noqa: E402
from spec_hal.ops import generate_token_bitmask, traverse_tree  # noqa: E402

POISON = 0x5A5A5A5A


def small_vocabulary() -> list[str]:
    """About 300 tokens: the stop token, JSON punctuation and keywords, numbers, words in several forms."""
    punctuation = ["{", "}", "[", "]", ":", ",", '"', " ", "\n", "  ", '":', '",', '{"', '"}', "-", ".", "e"]
    keywords = ["true", "false", "null", "tr", "ue", "fal", "se", "nu", "ll"]
    words = ["name", "age", "tags", "ok", "id", "a", "b", "c", "ab", "abc", "x", "y", "hello", "world", "cat"]
    words += ["dog", "key", "value", "list", "item", "foo", "bar", "baz", "qux", "json", "yes", "no", "z"]
    numbers = [str(number) for number in range(60)]
    shaped = [form.format(word) for word in words for form in ('"{}', '{}"', '"{}"', " {}", '"{}":')]
    vocabulary = ["</s>", *punctuation, *keywords, *numbers, *words, *shaped]
    assert len(vocabulary) == len(set(vocabulary))
    return vocabulary


VOCABULARY = small_vocabulary()
VOCAB_SIZE = len(VOCABULARY) + 9  # padded like a model's vocabulary; the padding is never allowed

SCHEMA = (
    '{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, '
    '"tags": {"type": "array", "items": {"type": "string"}}, "ok": {"type": "boolean"}}, '
    '"required": ["name", "age"]}'
)
# short sentences, so that draft trees reach the stop token and terminate inside the tree
EBNF = 'root ::= greeting | "ab" "c"? | list\ngreeting ::= "hello" " " ("world" | "cat" | "dog")\nlist ::= "[" [0-9]+ ("," [0-9]+)* "]"'


@pytest.fixture(scope="module")
def compiled():
    tokenizer = xgrammar.TokenizerInfo(
        VOCABULARY, vocab_type=xgrammar.VocabType.RAW, vocab_size=VOCAB_SIZE, stop_token_ids=[0]
    )
    compiler = xgrammar.GrammarCompiler(tokenizer)
    return {"json": compiler.compile_json_schema(SCHEMA), "ebnf": compiler.compile_grammar(EBNF)}


def matcher_after(compiled_grammar, prefix: list[int]):
    matcher = xgrammar.GrammarMatcher(compiled_grammar)
    for token in prefix:
        assert matcher.accept_token(token)
    return matcher


def next_mask(matcher) -> torch.Tensor:
    row = torch.zeros((1, (VOCAB_SIZE + 31) // 32), dtype=torch.int32)
    matcher.fill_next_token_bitmask(row, 0)
    return row


def prefixes(kind: str) -> list[list[int]]:
    token = VOCABULARY.index
    if kind == "json":
        return [[], [token("{")], [token('{"'), token("name"), token('":'), token('"')]]
    return [[], [token("ab")], [token("hello"), token(" ")]]


@pytest.mark.parametrize("kind", ["json", "ebnf"])
@pytest.mark.parametrize("seed", range(6))
def test_random_trees_match_oracle_and_keep_matcher_state(compiled, kind, seed):
    rng = random.Random(seed)
    prefix = rng.choice(prefixes(kind))

    def fresh_grammar():
        return from_xgrammar(matcher_after(compiled[kind], prefix))

    num_nodes = rng.choice([4, 8, 16, 24])
    parents = random_parents(num_nodes, rng)
    next_token, next_sibling = links_from_parents(parents)
    tokens = guided_draft_tokens(parents, fresh_grammar, VOCAB_SIZE, rng, valid_share=0.85)

    grammar = fresh_grammar()
    before = next_mask(grammar.matcher)
    bitmask = torch.full((num_nodes, (VOCAB_SIZE + 31) // 32), POISON, dtype=torch.int32)
    expected = traverse_tree_oracle(
        next_token, next_sibling, tokens, fresh_grammar, bitmask.clone(), VOCAB_SIZE
    )
    as_tensor = torch.tensor
    traverse_tree(
        as_tensor(next_token), as_tensor(next_sibling), as_tensor(tokens), grammar, bitmask, VOCAB_SIZE
    )

    assert torch.equal(bitmask, expected)
    assert torch.equal(next_mask(grammar.matcher), before)
    # the state is the same one, not just one with the same mask: the same continuation is accepted
    twin = matcher_after(compiled[kind], prefix)
    allowed = [t for t in range(VOCAB_SIZE) if (int(before[0, t // 32]) >> (t % 32)) & 1]
    if allowed:
        follow = allowed[rng.randrange(len(allowed))]
        assert grammar.matcher.accept_token(follow) and twin.accept_token(follow)
        assert torch.equal(next_mask(grammar.matcher), next_mask(twin))


@pytest.mark.parametrize("kind", ["json", "ebnf"])
def test_generate_token_bitmask_matches_xgrammar_traverse_draft_tree(compiled, kind):
    """xgrammar's own C++ traversal is a peer: same rows once both start from a zeroed bitmask."""
    rng = random.Random(11)
    batch_size, num_nodes = 6, 16

    class Request:
        def __init__(self, grammar):
            self.grammar = grammar

    reqs, trees = [], []
    for index in range(batch_size):
        prefix = prefixes(kind)[index % 3]
        reqs.append(Request(None if index == 4 else from_xgrammar(matcher_after(compiled[kind], prefix))))
        parents = random_parents(num_nodes, rng)
        make = lambda prefix=prefix: from_xgrammar(matcher_after(compiled[kind], prefix))  # noqa: E731
        trees.append((*links_from_parents(parents), guided_draft_tokens(parents, make, VOCAB_SIZE, rng)))
    next_token, next_sibling, tokens = (torch.tensor(list(part)) for part in zip(*trees, strict=True))
    masks_before = [next_mask(req.grammar.matcher) if req.grammar else None for req in reqs]

    bitmask, last = generate_token_bitmask(reqs, next_token, next_sibling, tokens, VOCAB_SIZE)
    assert last is reqs[-1].grammar
    assert bitmask.shape == (batch_size * num_nodes, (VOCAB_SIZE + 31) // 32)

    ours = torch.zeros_like(bitmask)
    theirs = torch.zeros_like(bitmask)
    for index, req in enumerate(reqs):
        rows = slice(index * num_nodes, (index + 1) * num_nodes)
        if req.grammar is None:
            assert bool((bitmask[rows] == -1).all())
            continue
        assert torch.equal(next_mask(req.grammar.matcher), masks_before[index])
        traverse_tree(
            next_token[index], next_sibling[index], tokens[index], req.grammar, ours[rows], VOCAB_SIZE
        )
        req.grammar.matcher.traverse_draft_tree(
            next_token[index], next_sibling[index], tokens[index], theirs[rows]
        )
        filled = ours[rows].ne(0).any(1)
        assert torch.equal(bitmask[rows][filled], ours[rows][filled])
    assert torch.equal(ours, theirs)


def test_termination_inside_the_tree(compiled):
    token = VOCABULARY.index
    # root -> "ab" -> </s> (terminates: no row, child never visited) and "ab" -> "c" -> </s>
    parents = [-1, 0, 1, 2, 1, 4]
    tokens = [0, token("ab"), 0, token("ab"), token("c"), 0]
    grammar = from_xgrammar(matcher_after(compiled["ebnf"], []))
    next_token, next_sibling = links_from_parents(parents)
    bitmask = torch.full((6, (VOCAB_SIZE + 31) // 32), POISON, dtype=torch.int32)
    traverse_tree(
        torch.tensor(next_token), torch.tensor(next_sibling), torch.tensor(tokens), grammar, bitmask
    )
    filled = [node for node in range(6) if not bool((bitmask[node] == POISON).all())]
    assert filled == [0, 1, 4]
    assert not grammar.is_terminated()
    stop_only = torch.zeros_like(bitmask[4])
    stop_only[0] = 1
    assert torch.equal(bitmask[4], stop_only)  # after "abc" only the stop token


def test_adapter_raises_on_a_rejected_token_and_keeps_state(compiled):
    grammar = from_xgrammar(matcher_after(compiled["json"], []))
    before = next_mask(grammar.matcher)
    with pytest.raises(ValueError, match="not allowed"):
        grammar.accept_token(VOCABULARY.index("}"))
    assert torch.equal(next_mask(grammar.matcher), before)
    mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 3, "cpu")
    assert (
        mask.shape == (3, (VOCAB_SIZE + 31) // 32) and mask.dtype == torch.int32 and bool((mask == -1).all())
    )


def test_from_xgrammar_rejects_other_objects(compiled):
    with pytest.raises(TypeError, match="matcher: expected an xgrammar.GrammarMatcher"):
        from_xgrammar(compiled["json"])


def test_bare_matcher_is_not_a_grammar(compiled):
    matcher = matcher_after(compiled["json"], [])
    tree = torch.tensor([-1]), torch.tensor([-1]), torch.tensor([0])
    with pytest.raises(ValueError, match="grammar: .*from_xgrammar"):
        traverse_tree(*tree, matcher, torch.zeros((1, (VOCAB_SIZE + 31) // 32), dtype=torch.int32))


# --------------------------------------------------------------------------------------------------
# Bitmask views and widths: xgrammar writes row r at data_ptr + r * width, whatever the strides


def _random_tree(compiled, seed: int):
    rng = random.Random(seed)
    parents = random_parents(12, rng)
    next_token, next_sibling = links_from_parents(parents)
    fresh = lambda: from_xgrammar(matcher_after(compiled["json"], []))  # noqa: E731
    tokens = guided_draft_tokens(parents, fresh, VOCAB_SIZE, rng, valid_share=0.9)
    return (torch.tensor(next_token), torch.tensor(next_sibling), torch.tensor(tokens)), fresh


VIEWS = {  # (rows and words of the store, the view taken of it) for a bitmask of W words per row
    "every_other_word": (lambda words: (12, 2 * words), lambda store, words: store[:, ::2]),
    "wider_rows": (lambda words: (12, words + 3), lambda store, words: store[:, :words]),
    "every_other_row": (lambda words: (24, words), lambda store, words: store[::2]),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_a_strided_bitmask_view_is_filled_in_place_and_nothing_outside_it(compiled, view):
    tree, fresh = _random_tree(compiled, seed=3)
    words = (VOCAB_SIZE + 31) // 32
    expected = torch.full((12, words), POISON, dtype=torch.int32)
    traverse_tree(*tree, fresh(), expected, VOCAB_SIZE)
    store_shape, take = VIEWS[view]
    store = torch.full(store_shape(words), POISON, dtype=torch.int32)
    inside = torch.zeros(store.shape, dtype=torch.bool)
    take(inside, words).fill_(True)
    traverse_tree(*tree, fresh(), take(store, words), VOCAB_SIZE)
    assert torch.equal(take(store, words), expected)
    assert bool((store[~inside] == POISON).all())


@pytest.mark.parametrize(
    "make",
    [
        lambda words: torch.full((1, words), POISON, dtype=torch.int32).expand(12, words),
        lambda words: torch.full((12 + words,), POISON, dtype=torch.int32).as_strided((12, words), (1, 1)),
    ],
    ids=["stride_0_rows", "overlapping_rows"],
)
def test_a_bitmask_whose_rows_share_memory_is_refused_untouched(compiled, make):
    tree, fresh = _random_tree(compiled, seed=4)
    bitmask = make((VOCAB_SIZE + 31) // 32)
    storage = bitmask.as_strided((bitmask.untyped_storage().nbytes() // 4,), (1,))
    before = storage.clone()
    grammar = fresh()
    with pytest.raises(ValueError, match=r"bitmask: elements of the view overlap"):
        traverse_tree(*tree, grammar, bitmask, VOCAB_SIZE)
    assert torch.equal(storage, before)
    assert torch.equal(next_mask(grammar.matcher), next_mask(fresh().matcher))  # state unchanged


def test_a_bitmask_width_the_matcher_does_not_fill_is_a_value_error(compiled):
    tree, fresh = _random_tree(compiled, seed=5)
    words = (VOCAB_SIZE + 31) // 32
    wide = torch.zeros((12, words + 1), dtype=torch.int32)
    message = rf"bitmask: rows of {words + 1} int32 words .* needs {words} words per row"
    with pytest.raises(ValueError, match=message):
        traverse_tree(*tree, fresh(), wide)
    with pytest.raises(ValueError, match=message):
        traverse_tree(*tree, fresh(), wide, 32 * (words + 1))

    class Request:
        grammar = fresh()

    with pytest.raises(ValueError, match=rf"rows of {words + 2} int32 words"):
        generate_token_bitmask([Request()], *(part[None] for part in tree), 32 * (words + 2))
