"""The math-verify calls that run inside grading worker processes (see :mod:`.pool`).

This module imports math-verify (and so sympy) at import time; only workers import it, so the
parent process stays light. math-verify's own signal-based timeouts are disabled here
(``parsing_timeout=None``, ``timeout_seconds=None``): the pool enforces a hard limit instead.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from sympy import And, FiniteSet, MatrixBase, Union
from sympy.core.relational import Relational

from agentmath.grading.fastpath import choice_letters, choice_with_value, same_word
from agentmath.grading.options import GradingOptions
from agentmath.grading.plaintext import latex_spelling
from agentmath.grading.words import number_from_words

# Once per process math-verify warns that its timeout is off; that is on purpose here.
logging.getLogger("math_verify").setLevel(logging.CRITICAL)

# ``\textbf{(025)}`` (AoPS style) would parse as the *text* "025"; unwrap numeric text.
_NUMERIC_TEXT_RE = re.compile(
    r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{\s*\(?\s*"
    r"([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)\s*\)?\s*\}"
)
_CONFIG = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
# An interval, or a union of them, that cannot be read as a point: a square bracket, an infinite
# end or a union. ``(1, 2)`` alone may be a coordinate pair, so it does not count.
_SPACING_RE = re.compile(r"\\left(?![A-Za-z])|\\right(?![A-Za-z])|\s+")
_PIECE_RE = re.compile(r"[\[(][^,]+,[^,]+[\])]")


def is_interval(answer: str) -> bool:
    """True when ``answer`` is certainly an interval or a union of intervals (see above)."""
    pieces = _SPACING_RE.sub("", answer).split("\\cup")
    if not all(_PIECE_RE.fullmatch(piece) for piece in pieces):
        return False
    return len(pieces) > 1 or "\\infty" in answer or "[" in answer or "]" in answer


def _as_union(candidates: list[Any]) -> list[Any]:
    """Add the union reading of ``x < 2 \\text{ or } x > 3``, which math-verify parses as a
    set of two inequalities, to its candidates (only when every element is an inequality)."""
    extra = []
    for candidate in candidates:
        if isinstance(candidate, FiniteSet) and candidate.args and all(
                isinstance(element, (Relational, And)) for element in candidate.args):
            try:
                extra.append(Union(*(element.as_set() for element in candidate.args)))
            except (NotImplementedError, TypeError, ValueError):  # not one variable's set
                continue
    return extra + candidates


def _vector(parsed: list[Any]) -> MatrixBase | None:
    """The vector a parsed answer is, when it is a matrix of one column or one row."""
    if parsed and isinstance(parsed[0], MatrixBase) and 1 in parsed[0].shape and len(parsed[0]) > 1:
        return parsed[0]
    return None


def _entries(answer: str) -> list[str] | None:
    """The entries of a tuple or list written as one (``(1, 2, 3)``, ``[1,2,3]``), split at
    its top-level commas; None for anything else."""
    text = _SPACING_RE.sub(" ", answer).strip().strip("$").strip()
    if len(text) < 2 or (text[0], text[-1]) not in (("(", ")"), ("[", "]")):
        return None
    entries, depth, start = [], 0, 1
    for i, char in enumerate(text[1:-1], start=1):
        if char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
        elif char == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
    entries.append(text[start:-1])
    return entries if len(entries) > 1 and all(e.strip() for e in entries) else None


def _same_vector(vector: MatrixBase, answer: str,
                 options: GradingOptions | None = None) -> bool | None:
    """Whether ``answer``, a tuple written in text, has ``vector``'s entries in order; None when
    it is no tuple. A model writes the column vector ``\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}``
    as ``(1, 2)``, which math-verify reads as an interval and never equates with a matrix."""
    entries = _entries(answer)
    if entries is None:
        return None
    if len(entries) != len(vector):
        return False
    return all(verify([element], parse_answer(entry, options), timeout_seconds=None)
               for element, entry in zip(vector, entries, strict=True))


def parse_answer(answer: str, options: GradingOptions | None = None) -> list[Any]:
    """Parse one bare answer (no surrounding prose) into math-verify's candidate list.

    The answer is wrapped in ``\\boxed{}`` so that math-verify treats all of it as the target
    instead of hunting for a sub-expression; plain-text and Unicode math (``pi/4``, ``√2``,
    ``x**2``) is spelled in LaTeX first (:mod:`.plaintext`), and number words (``three``) as
    digits (:mod:`.words`), each unless ``options`` turns it off. An empty list means it
    could not be parsed.
    """
    value = number_from_words(answer) if options is None or options.number_words else None
    if value is not None:
        answer = str(value)
    answer = _NUMERIC_TEXT_RE.sub(r"\1", answer)
    if options is None or options.plaintext_math:
        answer = latex_spelling(answer)
    return parse("\\boxed{" + answer + "}", extraction_config=_CONFIG, parsing_timeout=None)


def verify_answers(gold: str, predicted: str,
                   options: GradingOptions | None = None) -> bool | None:
    """Compare two bare answers; ``options`` turns agentmath's leniencies off (default: on).

    None if the gold does not parse (ungradable), False if the prediction does not. Two
    multiple-choice answers are compared as sets of letters (``\\text{(A), (C)}`` and ``C, A``),
    a letter written with its value (``(B) 42``) by the letter, or by the value against a
    gold that is no letter; one word against another ignoring case (``\\text{True}``,
    ``true``); a vector against a tuple entry by entry.
    """
    if (options is None or options.word_case) and same_word(gold, predicted):
        return True
    if options is None or options.multiple_choice:
        gold_letters, predicted_letters = choice_letters(gold), choice_letters(predicted)
        if gold_letters and predicted_letters:
            return gold_letters == predicted_letters
        split = choice_with_value(predicted)
        if split is not None:  # "(B) 42": the letter against a letter, else the value
            if gold_letters:
                return gold_letters == frozenset(split[0])
            predicted = split[1]
    gold_parsed = parse_answer(gold, options)
    if not gold_parsed:
        return None
    predicted_parsed = parse_answer(predicted, options)
    if not predicted_parsed:
        return False
    for vector, text in ((_vector(gold_parsed), predicted), (_vector(predicted_parsed), gold)):
        same = None if vector is None else _same_vector(vector, text, options)
        if same is not None:
            return same
    if is_interval(gold):
        # An interval may be answered as the inequality it stands for (``x \le 3`` for
        # ``(-\infty, 3]``): math-verify compares the two when told to.
        return bool(verify(gold_parsed, _as_union(predicted_parsed), timeout_seconds=None,
                           allow_set_relation_comp=True))
    return bool(verify(gold_parsed, predicted_parsed, timeout_seconds=None))


# One pair per code path that sympy loads lazily (simplify alone costs ~1 s the first time).
_WARM_UP_PAIRS = (
    (r"\frac{1}{2}", "0.5"), (r"2\sqrt{2}", r"\sqrt{8}"), ("(0, 1]", "(0,1]"),
    (r"\{1,2\}", r"\{2,1\}"), ("x=3", "3"), ("x^2+2x+1", "(x+1)^2"), ("(1, 2)", "(1,2)"),
    (r"50\%", "0.5"), (r"\text{(B)}", "B"), (r"\begin{pmatrix}1\\2\end{pmatrix}", "(1,2)"),
    (r"(-\infty, 2) \cup (3, \infty)", r"x < 2 \text{ or } x > 3"),
)  # fmt: skip


def warm_up() -> None:
    """Run one comparison of each common kind, so that the first real call in a fresh worker
    is not charged sympy's lazy imports and caches against its timeout."""
    for gold, predicted in _WARM_UP_PAIRS:
        verify_answers(gold, predicted)
