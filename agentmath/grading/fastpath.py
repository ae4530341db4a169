"""Cheap comparisons tried before math-verify, in the calling process.

Most graded pairs are easy (``"18"`` vs ``"18"``, ``"025"`` vs ``"25"``, ``"(B)"`` vs ``"B"``);
deciding them here skips a round trip to a worker process. The rule is one-sided: this module
answers True only when the two answers are certainly equal, and False only for two plain
integers (digits or number words: ``three``, :mod:`.words`) or two sets of multiple-choice
letters (``(B)``, ``\\text{(A), (C)}``; an answer may give its letter with the value after
it, ``(B) 42``) that differ. Everything else is left to math-verify
(``None`` = undecided).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from agentmath.grading.words import number_from_words, unwrap_text

if TYPE_CHECKING:
    from agentmath.grading.options import GradingOptions

_REMOVE_RE = re.compile(
    r"\\left(?![A-Za-z])|\\right(?![A-Za-z])|\\[!,;: ]|~"
    r"|\^\s*\{?\s*\\circ\s*\}?|\\circ(?![A-Za-z])|\\degree(?![A-Za-z])|\\?%|\\\$"
)
_THOUSANDS_RE = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_INTEGER_RE = re.compile(r"^[+-]?\d+$")
_DECIMAL_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_CHOICE_RE = re.compile(r"^\(?([A-E])\)?$")
# A choice letter written with its value after it: "(B) 42", "\textbf{(B) }42" (AMC style).
_LEADING_CHOICE_RE = re.compile(
    r"^\s*\$?\s*(\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{\s*)?\(([A-E])\)(.*?)\$?\s*$",
    re.S)
_WORD_RE = re.compile(r"[A-Za-z]{2,}")


def braces_balanced(text: str) -> bool:
    """True when every ``{`` has its ``}`` (escaped ``\\{``/``\\}`` do not count)."""
    depth = 0
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth < 0:
                return False
        i += 1
    return depth == 0


def normalize(answer: str) -> str:
    """A canonical spelling for string comparison: no spacing, ``\\left``/``\\right``, degree or
    percent marks, ``\\text{}``-style wrappers; ``\\dfrac``/``\\tfrac`` become ``\\frac``."""
    text = answer.strip().rstrip(".").strip().strip("$")
    text = text.replace("{,}", ",").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = _REMOVE_RE.sub("", unwrap_text(text))
    text = re.sub(r"\s+", "", text)
    return text.rstrip(".")


def _number(text: str) -> Decimal | None:
    """The value of a plain decimal numeral (``025``, ``1,000``, ``(113)``, ``-.5``), else None."""
    if len(text) > 2 and text[0] == "(" and text[-1] == ")" and "," not in text:
        text = text[1:-1]
    if _THOUSANDS_RE.match(text):
        text = text.replace(",", "")
    if not _DECIMAL_RE.match(text):
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def choice_letters(answer: str) -> frozenset[str] | None:
    """The letters of a multiple-choice answer (``B``, ``(B)``, ``\\text{(A), (C)}``), else
    None; the order of a list does not matter."""
    return _choices(normalize(answer))


def _choices(text: str) -> frozenset[str] | None:
    """:func:`choice_letters` of :func:`normalize`'s output."""
    letters = []
    for part in text.split(","):
        match = _CHOICE_RE.match(part)
        if match is None:
            return None
        letters.append(match.group(1))
    return frozenset(letters)


def choice_with_value(answer: str) -> tuple[str, str] | None:
    """``(B) 42`` -> ``("B", "42")``: a multiple-choice letter with the value it stands for
    written after it (``\\textbf{(B) }42``, ``\\textbf{(B)} 42``); None for anything else,
    a bare letter included."""
    match = _LEADING_CHOICE_RE.match(answer)
    if match is None:
        return None
    rest = match.group(3).strip()
    if match.group(1):  # the wrapper closes after the letter or after the value
        if rest.startswith("}"):
            rest = rest[1:].strip()
        elif rest.endswith("}") and not braces_balanced(rest):
            rest = rest[:-1].strip()
    if not rest or not braces_balanced(rest):
        return None
    return match.group(2), rest


def same_word(gold: str, predicted: str) -> bool:
    """True when both answers are the same word but for case (``\\text{True}`` and ``true``,
    ``\\text{Monday}`` and ``monday``): math-verify reads words as products of symbols or as
    sympy's booleans, and compares them case-sensitively."""
    return _same_word(normalize(gold), normalize(predicted))


def _same_word(g: str, p: str) -> bool:
    """:func:`same_word` of :func:`normalize`'s outputs."""
    return bool(_WORD_RE.fullmatch(g)) and g.lower() == p.lower()


def quick_compare(gold: str, predicted: str,
                  options: GradingOptions | None = None) -> bool | None:
    """True/False when the answer is certain from the strings alone, else None (ask
    math-verify); ``options`` turns agentmath's leniencies off (default: all on)."""
    g, p = normalize(gold), normalize(predicted)
    if not g or not braces_balanced(g):
        return None  # the gold may be unparsable: math-verify decides (and says None)
    if g == p:
        return True
    if (options is None or options.word_case) and _same_word(g, p):
        return True
    if options is None or options.multiple_choice:
        g_choices, p_choices = _choices(g), _choices(p)
        if g_choices and p_choices:
            return g_choices == p_choices
        if g_choices and (split := choice_with_value(predicted)) is not None:
            return g_choices == frozenset(split[0])
    g_num, p_num = _number(g), _number(p)
    if (g_num is None) != (p_num is None) and (options is None or options.number_words):
        # a numeral against a phrase: number words?
        if g_num is None:
            g_num = number_from_words(gold)
        else:
            p_num = number_from_words(predicted)
    if g_num is None or p_num is None:
        return None
    if g_num == p_num:
        return True
    if _INTEGER_RE.match(g_num.to_eng_string()) and _INTEGER_RE.match(p_num.to_eng_string()):
        return False
    return None
