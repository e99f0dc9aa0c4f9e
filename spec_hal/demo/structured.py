"""Grammar-constrained mode of the demo: an xgrammar EBNF grammar over the tiny model's vocabulary.

xgrammar is optional (``pip install spec-hal[grammar]``): :func:`list_grammars` raises ImportError
without it, and the demo and its test skip this mode. Each request gets its own matcher, wrapped by
:func:`spec_hal.grammar.from_xgrammar` as a ``spec_hal.ops.Grammar``.
"""

from __future__ import annotations

from ..grammar import from_xgrammar

STOP_TOKEN = 0

#: a bracketed list of numbers, e.g. "[3, 14,15]"; the stop token may follow the closing bracket
LIST_OF_NUMBERS = r"""
root ::= "[" number ("," " "? number)* "]"
number ::= "0" | [1-9] [0-9]*
"""


def vocabulary(vocab_size: int) -> list[str]:
    """Token strings: the stop token, list punctuation, then the numbers 0, 1, 2, ..."""
    fixed = ["</s>", "[", "]", ",", " ", ", "]
    return fixed + [str(n) for n in range(vocab_size - len(fixed))]


def list_grammars(vocab_size: int, count: int) -> list:
    """``count`` fresh grammars (spec_hal Grammar protocol) for :data:`LIST_OF_NUMBERS`."""
    try:
        import xgrammar
    except ImportError as error:
        raise ImportError("the grammar mode needs xgrammar: pip install spec-hal[grammar]") from error
    tokenizer = xgrammar.TokenizerInfo(
        vocabulary(vocab_size), vocab_size=vocab_size, stop_token_ids=[STOP_TOKEN]
    )
    compiled = xgrammar.GrammarCompiler(tokenizer).compile_grammar(LIST_OF_NUMBERS)
    return [from_xgrammar(xgrammar.GrammarMatcher(compiled)) for _ in range(count)]
