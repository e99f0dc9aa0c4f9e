"""Grammar engine adapters for :class:`spec_hal.ops.Grammar` (the optional extra ``grammar``).

The grammar ops (``spec_hal.ops.traverse_tree``, ``generate_token_bitmask``) take any object with the
five methods of the protocol; sglang's grammar backends already have them. :func:`from_xgrammar` wraps
a bare xgrammar ``GrammarMatcher``; docs/ops/grammar.md shows how to write one for another engine.

:func:`compare_with_xgrammar_traversal` times ``generate_token_bitmask`` over this adapter against
xgrammar's own C++ ``GrammarMatcher.traverse_draft_tree`` on the same trees (a benchmark helper).
"""

from __future__ import annotations

import math
import random
import re
import time
from typing import Any

import torch
from torch import Tensor

from .ops.grammar import generate_token_bitmask, traverse_tree

__all__ = ["XGrammarAdapter", "from_xgrammar", "compare_with_xgrammar_traversal"]


def _import_xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError as error:
        raise ImportError(
            "spec_hal.grammar.from_xgrammar needs xgrammar: pip install spec-hal[grammar]"
        ) from error
    return xgrammar


class XGrammarAdapter:
    """A :class:`spec_hal.ops.Grammar` over an xgrammar ``GrammarMatcher`` (kept as ``.matcher``)."""

    def __init__(self, matcher: Any) -> None:
        self.matcher = matcher

    def accept_token(self, token: int) -> None:
        # xgrammar returns False for a rejected token and keeps its state; the protocol raises.
        if not self.matcher.accept_token(int(token)):
            raise ValueError(f"token {token} is not allowed by the grammar in its current state")

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)

    def fill_vocab_mask(self, bitmask: Tensor, row: int) -> None:
        # xgrammar writes row r at data_ptr + r * width, whatever the strides: only a contiguous
        # bitmask is handed over. A view is filled through a contiguous row and copied back, so
        # nothing outside it is written; a view whose elements overlap cannot take a row at all.
        if bitmask.is_contiguous():
            self._fill(bitmask, row)
            return
        _check_no_overlap(bitmask)
        staged = torch.empty((1, bitmask.shape[1]), dtype=bitmask.dtype, device=bitmask.device)
        self._fill(staged, 0)
        bitmask[row].copy_(staged[0])

    def _fill(self, bitmask: Tensor, row: int) -> None:
        try:
            self.matcher.fill_next_token_bitmask(bitmask, row)
        except RuntimeError as error:
            needed = _MATCHER_WIDTH.search(str(error))
            if needed is None:
                raise
            words = int(needed.group(1))
            raise ValueError(
                f"bitmask: rows of {bitmask.shape[1]} int32 words (a vocab_size of up to "
                f"{32 * bitmask.shape[1]}) do not match the xgrammar matcher, whose vocabulary size "
                f"needs {words} words per row ({32 * words - 31} to {32 * words} tokens); size the "
                "bitmask and vocab_size by the matcher's TokenizerInfo.vocab_size"
            ) from None

    def is_terminated(self) -> bool:
        return bool(self.matcher.is_terminated())

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> Tensor:
        # xgrammar fills only CPU rows; an engine copies the finished mask to its device.
        return torch.full((batch_size, math.ceil(vocab_size / 32)), -1, dtype=torch.int32, device=device)

    def __repr__(self) -> str:
        return f"XGrammarAdapter({self.matcher!r})"


#: xgrammar's shape error names the row width its matcher fills: "should be (batch_size, N)".
_MATCHER_WIDTH = re.compile(r"should be \(batch_size, (\d+)\)")


def _check_no_overlap(bitmask: Tensor) -> None:
    """A ValueError naming ``bitmask`` when two of its elements share memory (a stride-0 or
    overlapping view): filling one row would change another."""
    rows, words = bitmask.shape
    row_stride, word_stride = bitmask.stride()
    overlapping = (rows > 1 and row_stride == 0) or (words > 1 and word_stride == 0)
    if not overlapping and rows > 1 and words > 1:
        # r*row_stride + w*word_stride repeats iff some step of d rows equals a step of at most
        # words - 1 words; the smallest such d gives lcm(row_stride, word_stride).
        common = math.lcm(row_stride, word_stride)
        overlapping = common // row_stride <= rows - 1 and common // word_stride <= words - 1
    if overlapping:
        raise ValueError(
            f"bitmask: elements of the view overlap in memory (shape {tuple(bitmask.shape)}, strides "
            f"{bitmask.stride()}): a row written would change another; pass a bitmask whose rows are "
            "distinct memory"
        )


def from_xgrammar(matcher: Any) -> XGrammarAdapter:
    """Wrap an ``xgrammar.GrammarMatcher`` as a :class:`spec_hal.ops.Grammar`.

    The matcher must be built for the target's vocabulary size (xgrammar fills exactly
    ``ceil(vocab_size / 32)`` words per row). The adapter holds no state of its own: the matcher's
    state is the grammar's.
    """
    xgrammar = _import_xgrammar()
    if not isinstance(matcher, xgrammar.GrammarMatcher):
        raise TypeError(f"matcher: expected an xgrammar.GrammarMatcher, got {type(matcher).__name__}")
    return XGrammarAdapter(matcher)


# --------------------------------------------------------------------------------------------------
# Timing against xgrammar's own traversal


def _synthetic_vocabulary(vocab_size: int, rng: random.Random) -> list[str]:
    """JSON punctuation, digits, keywords and quoted or bare random words; entry 0 is the stop token."""
    fixed = ["</s>", "{", "}", "[", "]", ":", ",", '"', " ", "\n", "true", "false", "null", '":', '",', '{"']
    fixed += [str(digit) for digit in range(100)]
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set(fixed)
    vocabulary = list(fixed)
    while len(vocabulary) < vocab_size:
        word = "".join(rng.choice(letters) for _ in range(rng.randint(1, 7)))
        word = rng.choice([word, f'"{word}', f'{word}"', f" {word}", f'"{word}"'])
        if word not in words:
            words.add(word)
            vocabulary.append(word)
    return vocabulary


def _allowed_tokens(mask_row: Tensor) -> list[int]:
    bits = (mask_row.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.flatten().nonzero().flatten().tolist()


def _guided_draft_tree(
    matcher: Any, num_nodes: int, vocab_size: int, rng: random.Random
) -> tuple[list, list, list]:
    """An EAGLE-style tree (random earlier parent per node) whose tokens mostly follow the grammar.

    Returns ``(retrieve_next_token, retrieve_next_sibling, draft_tokens)`` as lists.
    """
    parents = [-1] + [rng.randrange(node) for node in range(1, num_nodes)]
    next_token, next_sibling = [-1] * num_nodes, [-1] * num_nodes
    for node in range(num_nodes - 1, 0, -1):  # prepend, so each sibling list runs in index order
        next_sibling[node] = next_token[parents[node]]
        next_token[parents[node]] = node
    tokens = [0] * num_nodes
    row = torch.zeros((1, math.ceil(vocab_size / 32)), dtype=torch.int32)
    for node in range(1, num_nodes):
        path = []
        ancestor = parents[node]
        while ancestor > 0:
            path.append(tokens[ancestor])
            ancestor = parents[ancestor]
        accepted = 0
        for token in reversed(path):
            if not matcher.accept_token(token):
                break
            accepted += 1
        allowed = []
        if accepted == len(path) and not matcher.is_terminated():
            matcher.fill_next_token_bitmask(row, 0)
            allowed = _allowed_tokens(row[0])
        if accepted:
            matcher.rollback(accepted)
        # mostly grammar-valid tokens, a few random ones so that rejected subtrees occur
        tokens[node] = rng.choice(allowed) if allowed and rng.random() < 0.85 else rng.randrange(vocab_size)
    return next_token, next_sibling, tokens


def compare_with_xgrammar_traversal(
    batch_size: int = 64,
    draft_token_nums: tuple[int, ...] = (8, 16, 32, 64),
    vocab_sizes: tuple[int, ...] = (32768, 131072),
    repeats: int = 7,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Time :func:`generate_token_bitmask` over :func:`from_xgrammar` against xgrammar's C++
    ``GrammarMatcher.traverse_draft_tree`` on the same trees, for each vocabulary and tree size.

    Each request has its own matcher over one JSON-schema grammar and a synthetic vocabulary;
    trees have random parents and tokens mostly drawn from the grammar's mask. Returns one dict per
    configuration with best-of-``repeats`` milliseconds per batch: ``spec_hal_ms`` /
    ``xgrammar_ms`` include allocating the batch bitmask (``generate_token_bitmask`` against
    xgrammar's allocation and per-request traversal), ``*_walk_ms`` are the per-request traversals
    alone over a preallocated bitmask (``traverse_tree`` against ``traverse_draft_tree``); their
    ratios; and whether both fill the same rows (from a zeroed bitmask: xgrammar zeroes rows it does
    not fill, spec_hal leaves them as given).
    """
    xgrammar = _import_xgrammar()
    rng = random.Random(seed)
    schema = (
        '{"type": "object", "properties": {"name": {"type": "string"}, "id": {"type": "integer"}, '
        '"tags": {"type": "array", "items": {"type": "string"}}, "ok": {"type": "boolean"}}, '
        '"required": ["name", "id", "tags", "ok"]}'
    )
    results = []
    for vocab_size in vocab_sizes:
        tokenizer = xgrammar.TokenizerInfo(
            _synthetic_vocabulary(vocab_size, rng),
            vocab_type=xgrammar.VocabType.RAW,
            vocab_size=vocab_size,
            stop_token_ids=[0],
        )
        compiled = xgrammar.GrammarCompiler(tokenizer).compile_json_schema(schema)
        matchers = [xgrammar.GrammarMatcher(compiled) for _ in range(batch_size)]
        for num_nodes in draft_token_nums:
            trees = [_guided_draft_tree(matcher, num_nodes, vocab_size, rng) for matcher in matchers]
            row = _compare_on_trees(xgrammar, matchers, trees, vocab_size, repeats)
            results.append(
                {"vocab_size": vocab_size, "batch_size": batch_size, "draft_token_num": num_nodes, **row}
            )
    return results


class _Request:
    def __init__(self, grammar: Any) -> None:
        self.grammar = grammar


def _compare_on_trees(
    xgrammar: Any, matchers: list[Any], trees: list[tuple[list, list, list]], vocab_size: int, repeats: int
) -> dict[str, Any]:
    next_token, next_sibling, tokens = (
        torch.tensor(list(part), dtype=torch.int64) for part in zip(*trees, strict=True)
    )
    batch_size, num_nodes = next_token.shape
    reqs = [_Request(from_xgrammar(matcher)) for matcher in matchers]
    preallocated = torch.zeros((batch_size * num_nodes, math.ceil(vocab_size / 32)), dtype=torch.int32)

    def spec_hal_batch() -> None:
        generate_token_bitmask(reqs, next_token, next_sibling, tokens, vocab_size)

    def xgrammar_batch() -> None:
        xgrammar_walks(xgrammar.allocate_token_bitmask(batch_size * num_nodes, vocab_size))

    def spec_hal_walks(bitmask: Tensor = preallocated) -> None:
        for index, req in enumerate(reqs):
            rows = bitmask[index * num_nodes : (index + 1) * num_nodes]
            traverse_tree(
                next_token[index], next_sibling[index], tokens[index], req.grammar, rows, vocab_size
            )

    def xgrammar_walks(bitmask: Tensor = preallocated) -> None:
        for index, matcher in enumerate(matchers):
            rows = bitmask[index * num_nodes : (index + 1) * num_nodes]
            matcher.traverse_draft_tree(next_token[index], next_sibling[index], tokens[index], rows)

    runs = {"spec_hal": spec_hal_batch, "xgrammar": xgrammar_batch}
    runs.update({"spec_hal_walk": spec_hal_walks, "xgrammar_walk": xgrammar_walks})
    best = dict.fromkeys(runs, math.inf)
    for _ in range(repeats + 1):  # the first round warms up; rounds interleave to share the noise
        for name, run in runs.items():
            best[name] = min(best[name], _seconds(run))

    ours = torch.zeros_like(preallocated)
    theirs = torch.zeros_like(preallocated)
    spec_hal_walks(ours)
    xgrammar_walks(theirs)
    return {
        **{f"{name}_ms": seconds * 1e3 for name, seconds in best.items()},
        "ratio": best["spec_hal"] / best["xgrammar"],
        "walk_ratio": best["spec_hal_walk"] / best["xgrammar_walk"],
        "rows_filled": int(ours.ne(0).any(1).sum()),
        "rows_equal": bool(torch.equal(ours, theirs)),
    }


def _seconds(run: Any) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start
