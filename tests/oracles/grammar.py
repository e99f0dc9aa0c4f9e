"""Oracle for family F (grammar masks over draft trees), and a tiny pure-Python grammar for tests.

The oracle shares no walk with the implementation: for every node it rebuilds the root-to-node path
from the first-child / next-sibling links, replays that path on a fresh grammar (never rolling back),
and fills the node's row if every token on the way was allowed by the previous mask.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch


def links_from_parents(parents: list[int]) -> tuple[list[int], list[int]]:
    """First-child / next-sibling lists of a tree given each node's parent (root: -1)."""
    num_nodes = len(parents)
    next_token, next_sibling = [-1] * num_nodes, [-1] * num_nodes
    for parent in range(num_nodes):
        children = [node for node in range(num_nodes) if parents[node] == parent]
        if children:
            next_token[parent] = children[0]
            for left, right in zip(children, children[1:], strict=False):
                next_sibling[left] = right
    return next_token, next_sibling


def random_parents(num_nodes: int, rng: random.Random) -> list[int]:
    """EAGLE-style: every node hangs under a random earlier node."""
    return [-1] + [rng.randrange(node) for node in range(1, num_nodes)]


def guided_draft_tokens(
    parents: list[int],
    make_grammar: Callable[[], object],
    vocab_size: int,
    rng: random.Random,
    valid_share: float = 0.8,
) -> list[int]:
    """Draft tokens for a tree, mostly allowed by the grammar after their path (so that paths run
    deep), otherwise arbitrary (so that subtrees get rejected). Node 0's token is 0 (never read)."""
    tokens = [0] * len(parents)
    row = torch.zeros((1, (vocab_size + 31) // 32), dtype=torch.int32)
    for node in range(1, len(parents)):
        path, ancestor = [], parents[node]
        while ancestor > 0:
            path.append(tokens[ancestor])
            ancestor = parents[ancestor]
        grammar = make_grammar()
        allowed: list[int] = []
        if not grammar.is_terminated():
            grammar.fill_vocab_mask(row, 0)
            for token in reversed(path):
                if not mask_allows(row[0], token):
                    break
                grammar.accept_token(token)
                if grammar.is_terminated():
                    break
                grammar.fill_vocab_mask(row, 0)
            else:
                allowed = [token for token in range(vocab_size) if mask_allows(row[0], token)]
        use_valid = allowed and rng.random() < valid_share
        tokens[node] = rng.choice(allowed) if use_valid else rng.randrange(vocab_size)
    return tokens


def parents_from_links(next_token: list[int], next_sibling: list[int]) -> list[int | None]:
    """Parent of each node reachable from the root (root: -1, unreachable: None)."""
    parents: list[int | None] = [None] * len(next_token)
    parents[0] = -1
    pending = [0]
    while pending:
        parent = pending.pop()
        child = next_token[parent]
        while child != -1:
            parents[child] = parent
            pending.append(child)
            child = next_sibling[child]
    return parents


def mask_allows(row: torch.Tensor, token: int) -> bool:
    return bool((int(row[token // 32]) >> (token % 32)) & 1)


def traverse_tree_oracle(
    next_token: list[int],
    next_sibling: list[int],
    draft_tokens: list[int],
    make_grammar: Callable[[], object],
    bitmask: torch.Tensor,
    vocab_size: int | None = None,
    nodes: list[int] | None = None,
) -> torch.Tensor:
    """Fill ``bitmask`` rows as F1 defines them (``nodes``: only these rows), each from a fresh grammar."""
    token_limit = 32 * bitmask.shape[1] if vocab_size is None else vocab_size
    parents = parents_from_links(next_token, next_sibling)
    scratch = torch.zeros((1, bitmask.shape[1]), dtype=torch.int32)
    for node in range(len(next_token)) if nodes is None else nodes:
        if parents[node] is None:
            continue
        path = [node]
        while parents[path[-1]] != -1:
            path.append(parents[path[-1]])
        path.reverse()  # root first
        grammar = make_grammar()
        if grammar.is_terminated():
            continue
        grammar.fill_vocab_mask(scratch, 0)
        reached = True
        for step in path[1:]:
            token = draft_tokens[step]
            if token >= token_limit or not mask_allows(scratch[0], token):
                reached = False
                break
            grammar.accept_token(token)
            if grammar.is_terminated():  # a terminated node gets no row, its descendants no visit
                reached = False
                break
            grammar.fill_vocab_mask(scratch, 0)
        if reached:
            bitmask[node] = scratch[0]
    return bitmask


class ToyGrammar:
    """A pure-Python Grammar over tokens ``0 .. vocab_size-1``; token 0 is the stop token.

    Token ``t > 0`` is allowed when ``(t + sum(history)) % 3 != 0``; the stop token once at least
    ``min_length`` tokens were accepted (it terminates the grammar). Counters record every call so
    tests can see what a traversal touched. ``permissive`` fills all-ones rows (every bit of the
    bitmask, also past ``vocab_size``) to test the traversal's own vocabulary limit.
    """

    def __init__(self, vocab_size: int = 70, min_length: int = 2, permissive: bool = False) -> None:
        self.vocab_size = vocab_size
        self.min_length = min_length
        self.permissive = permissive
        self.history: list[int] = []
        self._history_sum = 0  # kept incrementally: a deep chain must not cost O(depth) per token
        self.accepted: list[int] = []  # every token accept_token took, in order
        self.filled_rows: list[int] = []
        self.fail_on_fill_after: int | None = None  # raise in fill_vocab_mask at this history length
        self.max_history = 0

    def allows(self, token: int) -> bool:
        if self.is_terminated() or not 0 <= token < self.vocab_size:
            return False
        if token == 0:
            return len(self.history) >= self.min_length
        return self.permissive or (token + self._history_sum) % 3 != 0

    def accept_token(self, token: int) -> None:
        if not self.allows(token):
            raise ValueError(f"ToyGrammar: token {token} not allowed after {self.history[-5:]}")
        self.history.append(token)
        self._history_sum += token
        self.accepted.append(token)
        self.max_history = max(self.max_history, len(self.history))

    def rollback(self, num_tokens: int) -> None:
        if not 0 <= num_tokens <= len(self.history):
            raise ValueError(f"ToyGrammar: cannot roll back {num_tokens} of {len(self.history)} tokens")
        for _ in range(num_tokens):
            self._history_sum -= self.history.pop()

    def fill_vocab_mask(self, bitmask: torch.Tensor, row: int) -> None:
        if self.is_terminated():
            raise RuntimeError("ToyGrammar: fill_vocab_mask after termination")
        if self.fail_on_fill_after is not None and len(self.history) >= self.fail_on_fill_after:
            raise RuntimeError("ToyGrammar: injected failure")
        self.filled_rows.append(row)
        if self.permissive:
            bitmask[row] = -1
            return
        words = [0] * bitmask.shape[1]
        for token in range(min(self.vocab_size, 32 * len(words))):
            if self.allows(token):
                words[token // 32] |= 1 << (token % 32)
        bitmask[row] = torch.tensor([word - (1 << 32) if word >= 1 << 31 else word for word in words])

    def is_terminated(self) -> bool:
        return bool(self.history) and self.history[-1] == 0

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: object) -> torch.Tensor:
        return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32, device=device)

    def copy_state(self) -> ToyGrammar:
        """A fresh grammar in this one's state (same rules, own counters)."""
        twin = ToyGrammar(self.vocab_size, self.min_length, self.permissive)
        for token in self.history:
            twin.accept_token(token)
        twin.accepted.clear()
        return twin

    def allowed_tokens(self) -> list[int]:
        return [token for token in range(self.vocab_size) if self.allows(token)]
