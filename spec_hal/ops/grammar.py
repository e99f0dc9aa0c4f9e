"""Family F: grammar-constrained verify . Host functions over CPU tensors.

Before the target model verifies a draft tree, each node whose path is still valid under a request's
grammar gets a vocabulary bitmask (bit ``t % 32`` of word ``t // 32``, LSB first, 1 = allowed): row
``k`` masks the target logits of node ``k``. The traversal walks the tree depth first with one
stateful grammar, accepting a node's token on the way down and rolling it back on the way up, so the
grammar ends each call in the state it started in.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from ..validation import ANY_SIZE, check_index, check_positive_int, check_tensor

__all__ = ["Grammar", "traverse_tree", "generate_token_bitmask"]

logger = logging.getLogger("spec_hal")

#: A bitmask generation slower than this is logged (sglang's threshold, there per request).
SLOW_TRAVERSAL_SECONDS = 1.0


@runtime_checkable
class Grammar(Protocol):
    """A stateful grammar matcher, as sglang's grammar backends expose it.

    ``spec_hal.grammar.from_xgrammar(matcher)`` adapts an xgrammar ``GrammarMatcher``; any object with
    these five methods works (docs/ops/grammar.md shows an adapter for another engine).
    """

    def accept_token(self, token: int) -> None:
        """Advance by ``token``; raise (leaving the state unchanged) if the grammar rejects it."""

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""

    def fill_vocab_mask(self, bitmask: Tensor, row: int) -> None:
        """Write the mask of tokens allowed next into ``bitmask[row]``, without changing state."""

    def is_terminated(self) -> bool:
        """Whether the grammar accepted its stop token (no further token is allowed)."""

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> Tensor:
        """A ``[batch_size, ceil(vocab_size / 32)]`` int32 bitmask, all tokens allowed."""


_GRAMMAR_METHODS = ("accept_token", "rollback", "fill_vocab_mask", "is_terminated", "allocate_vocab_mask")


def _check_grammar(name: str, grammar: object) -> None:
    missing = [method for method in _GRAMMAR_METHODS if not callable(getattr(grammar, method, None))]
    if missing:
        hint = " (wrap an xgrammar GrammarMatcher with spec_hal.grammar.from_xgrammar)"
        raise ValueError(
            f"{name}: expected a Grammar with methods {', '.join(_GRAMMAR_METHODS)}; "
            f"{type(grammar).__name__} lacks {', '.join(missing)}{hint}"
        )


def _check_host(name: str, tensor: Tensor) -> None:
    if tensor.device.type != "cpu":
        raise ValueError(
            f"{name}: expected a CPU tensor (grammar traversal runs on the host), got {tensor.device}"
        )


def _check_tree_tensors(
    retrieve_next_token: Tensor, retrieve_next_sibling: Tensor, draft_tokens: Tensor
) -> None:
    """Shapes and devices of ``[..., D]`` tree tensors (index dtypes are checked by the caller)."""
    shape = tuple(retrieve_next_token.shape)
    check_tensor("retrieve_next_sibling", retrieve_next_sibling, shape=shape)
    check_tensor("draft_tokens", draft_tokens, shape=shape)
    _check_host("retrieve_next_token", retrieve_next_token)
    _check_host("retrieve_next_sibling", retrieve_next_sibling)
    _check_host("draft_tokens", draft_tokens)


def _check_tree_values(
    next_token: list[int], next_sibling: list[int], tokens: list[int], request: int | None
) -> None:
    """Value checks of one tree, on the lists the walk reads (cheaper than tensor ops at these sizes).

    Every node reachable from the root must be reached once: each node is the target of at most one
    link and the root of none. That rules out cycles (a reachable cycle would give one of its nodes
    two incoming links), so the walk always ends.
    """
    of_request = "" if request is None else f" of request {request}"
    num_nodes = len(next_token)
    if num_nodes == 0:
        return
    if next_sibling[0] != -1:
        raise ValueError(
            f"retrieve_next_sibling: the root (node 0){of_request} cannot have a sibling; expected -1"
        )
    linked = bytearray(num_nodes)
    linked[0] = 1  # the walk enters the root itself
    for name, links in (("retrieve_next_token", next_token), ("retrieve_next_sibling", next_sibling)):
        for target in links:
            if target == -1:
                continue
            if not 0 <= target < num_nodes:
                raise ValueError(
                    f"{name}: values must lie in [0, {num_nodes}) or -1; found {target}{of_request}"
                )
            if linked[target]:
                raise ValueError(
                    f"retrieve_next_token/retrieve_next_sibling: node {target}{of_request} is linked to more "
                    "than once (or the root is linked to); expected a tree (first child / next sibling lists)"
                )
            linked[target] = 1
    lowest = min(tokens[1:], default=0)  # node 0's token is committed, never read
    if lowest < 0:
        raise ValueError(f"draft_tokens: expected non-negative token ids, found {lowest}{of_request}")


class _MaskWords:
    """Reads single words of a CPU int32 bitmask straight from its memory.

    The walk reads one word per child it tests; a tensor ``.item()`` costs about 9 µs, a read from
    this view about 0.2 µs. It sees what the grammar's ``fill_vocab_mask`` writes, since both use the
    same memory.
    """

    def __init__(self, bitmask: Tensor) -> None:
        self._bitmask = bitmask  # keeps the memory alive
        self._row_stride, self._word_stride = bitmask.stride()
        span = (bitmask.shape[0] - 1) * self._row_stride + (bitmask.shape[1] - 1) * self._word_stride + 1
        self._words = (ctypes.c_int32 * span).from_address(bitmask.data_ptr()) if bitmask.numel() else ()

    def allows(self, row: int, token: int) -> bool:
        word = self._words[row * self._row_stride + (token >> 5) * self._word_stride]
        return (word >> (token & 31)) & 1 == 1


def _walk(
    next_token: list[int],
    next_sibling: list[int],
    tokens: list[int],
    grammar: Grammar,
    bitmask: Tensor,
    token_limit: int,
) -> None:
    """The F1 depth-first walk, iterative (a chain of any depth needs no Python recursion).

    ``path`` holds the accepted nodes below the root, i.e. the tokens the grammar has taken in this
    call; whatever raises, the ``finally`` rolls exactly those back.
    """
    # bound once: the loop runs a few method calls per node, and attribute lookups add up
    accept_token, rollback, is_terminated = grammar.accept_token, grammar.rollback, grammar.is_terminated
    fill_vocab_mask = grammar.fill_vocab_mask
    if is_terminated():
        return
    fill_vocab_mask(bitmask, 0)
    allows = _MaskWords(bitmask).allows
    path: list[int] = []
    parent, node = 0, next_token[0]
    try:
        while True:
            if node == -1:  # the sibling list under `parent` is done: go back up
                if not path:
                    return
                finished = path.pop()
                rollback(1)
                parent = path[-1] if path else 0
                node = next_sibling[finished]
                continue
            token = tokens[node]
            if token < token_limit and allows(parent, token):
                accept_token(token)
                path.append(node)
                if not is_terminated():
                    fill_vocab_mask(bitmask, node)
                    child = next_token[node]
                    if child != -1:
                        parent, node = node, child
                        continue
                path.pop()
                rollback(1)
            node = next_sibling[node]  # a rejected node's subtree is never entered
    finally:
        if path:
            rollback(len(path))


def traverse_tree(
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
    draft_tokens: Tensor,
    grammar: Grammar,
    bitmask: Tensor,
    vocab_size: int | None = None,
) -> Tensor:
    """Fill the grammar bitmask row of every node of one request's draft tree whose path is valid.

    Node 0 (the last committed token) gets the grammar's current mask. A node is visited when its
    token is below the vocabulary limit and allowed by its parent's row; its token is accepted, its
    row filled unless the grammar terminated there, its children visited, and the token rolled back.
    Rows of rejected subtrees, of nodes after a terminating token and of unreachable nodes are left as
    the caller had them. The grammar ends in the state it started in, also when one of its methods
    raises.

    Args:
        retrieve_next_token: ``[D]`` int32/int64 CPU, first child of each node, -1 = none.
        retrieve_next_sibling: ``[D]`` int32/int64 CPU, next sibling, -1 = none (-1 for the root).
        draft_tokens: ``[D]`` int32/int64 CPU, token of each node (node 0's is not read).
        grammar: a :class:`Grammar` in the state after the committed tokens.
        bitmask: ``[>=D, ceil(V/32)]`` int32 CPU, in-out; row ``k`` is node ``k``'s mask.
        vocab_size: V. A draft token ``>= vocab_size`` is a rejected node. None: the bitmask's
            ``32 * width`` is the limit.

    Returns:
        ``bitmask``.
    """
    check_index("retrieve_next_token", retrieve_next_token)
    check_index("retrieve_next_sibling", retrieve_next_sibling)
    check_index("draft_tokens", draft_tokens)
    _check_tree_tensors(retrieve_next_token, retrieve_next_sibling, draft_tokens)
    next_token, next_sibling, tokens = (
        retrieve_next_token.tolist(),
        retrieve_next_sibling.tolist(),
        draft_tokens.tolist(),
    )
    _check_tree_values(next_token, next_sibling, tokens, None)
    _check_grammar("grammar", grammar)
    num_nodes = retrieve_next_token.shape[0]
    check_tensor("bitmask", bitmask, dtype=torch.int32, ndim=2)
    _check_host("bitmask", bitmask)
    if bitmask.shape[0] < num_nodes:
        raise ValueError(
            f"bitmask: expected at least {num_nodes} rows (one per draft node), got {bitmask.shape[0]}"
        )
    if vocab_size is None:
        token_limit = 32 * bitmask.shape[1]
    else:
        token_limit = check_positive_int("vocab_size", vocab_size)
        _check_mask_width("bitmask", bitmask, vocab_size)
    if num_nodes:
        _walk(next_token, next_sibling, tokens, grammar, bitmask, token_limit)
    return bitmask


def _check_mask_width(name: str, bitmask: Tensor, vocab_size: int) -> None:
    words = (vocab_size + 31) // 32
    if bitmask.shape[1] != words:
        raise ValueError(
            f"{name}: expected {words} int32 words per row (ceil(vocab_size / 32), vocab_size = {vocab_size}), "
            f"got {bitmask.shape[1]}"
        )


def generate_token_bitmask(
    reqs: Sequence[Any],
    retrieve_next_token: Tensor,
    retrieve_next_sibling: Tensor,
    draft_tokens: Tensor,
    vocab_size: int,
) -> tuple[Tensor | None, Grammar | None]:
    """The verify-step grammar bitmask of a batch: one :func:`traverse_tree` per grammar request.

    The bitmask is allocated by the first request's grammar (``allocate_vocab_mask``, on the CPU);
    request ``b`` owns rows ``[b*D, (b+1)*D)``. Rows of requests without a grammar stay as allocated
    (all tokens allowed). A call taking over 1 s is logged as a warning on the ``spec_hal`` logger,
    naming the slowest request.

    Args:
        reqs: ``bs`` requests, each with a ``.grammar`` attribute (a :class:`Grammar` or None).
        retrieve_next_token: ``[bs, D]`` int32/int64 CPU (copied from the device by the engine).
        retrieve_next_sibling: ``[bs, D]`` int32/int64 CPU.
        draft_tokens: ``[bs, D]`` int32/int64 CPU.
        vocab_size: V, the target vocabulary size.

    Returns:
        ``(bitmask[bs*D, ceil(V/32)] int32, last grammar)``, or ``(None, None)`` when no request has
        a grammar.
    """
    check_index("retrieve_next_token", retrieve_next_token, ndim=2)
    check_index("retrieve_next_sibling", retrieve_next_sibling, ndim=2)
    check_index("draft_tokens", draft_tokens, ndim=2)
    _check_tree_tensors(retrieve_next_token, retrieve_next_sibling, draft_tokens)
    next_token = retrieve_next_token.tolist()
    next_sibling = retrieve_next_sibling.tolist()
    tokens = draft_tokens.tolist()
    for request in range(len(next_token)):
        _check_tree_values(next_token[request], next_sibling[request], tokens[request], request)
    check_positive_int("vocab_size", vocab_size)
    batch_size, num_nodes = retrieve_next_token.shape
    if isinstance(reqs, (str, bytes)) or not hasattr(reqs, "__len__"):
        raise ValueError(f"reqs: expected a sequence of requests, got {type(reqs).__name__}")
    if len(reqs) != batch_size:
        raise ValueError(
            f"reqs: expected {batch_size} requests (retrieve_next_token.shape[0]), got {len(reqs)}"
        )
    grammars: list[tuple[int, Grammar]] = []
    for index, req in enumerate(reqs):
        if not hasattr(req, "grammar"):
            raise ValueError(
                f"reqs[{index}]: expected a request with a .grammar attribute, got {type(req).__name__}"
            )
        if req.grammar is not None:
            _check_grammar(f"reqs[{index}].grammar", req.grammar)
            grammars.append((index, req.grammar))
    if not grammars:
        return None, None

    call_start = time.perf_counter()
    first_index, first_grammar = grammars[0]
    bitmask = first_grammar.allocate_vocab_mask(
        vocab_size=vocab_size, batch_size=batch_size * num_nodes, device="cpu"
    )
    allocator = f"reqs[{first_index}].grammar.allocate_vocab_mask"
    check_tensor(allocator, bitmask, dtype=torch.int32, shape=(batch_size * num_nodes, ANY_SIZE))
    _check_host(allocator, bitmask)
    _check_mask_width(allocator, bitmask, vocab_size)

    slowest_seconds, slowest_index = 0.0, first_index
    for index, grammar in grammars:
        start = time.perf_counter()
        if num_nodes:
            rows = bitmask[index * num_nodes : (index + 1) * num_nodes]
            _walk(next_token[index], next_sibling[index], tokens[index], grammar, rows, vocab_size)
        slowest_seconds, slowest_index = max(
            (slowest_seconds, slowest_index), (time.perf_counter() - start, index)
        )
    total_seconds = time.perf_counter() - call_start
    if total_seconds > SLOW_TRAVERSAL_SECONDS:
        logger.warning(
            "grammar bitmask generation took %.2f s for %d grammar requests of %d draft tokens; "
            "slowest: request %d, %.2f s (grammar %r)",
            total_seconds,
            len(grammars),
            num_nodes,
            slowest_index,
            slowest_seconds,
            reqs[slowest_index].grammar,
        )
    return bitmask, grammars[-1][1]
