"""Cheap comparisons tried before math-verify, in the calling process.

Most graded pairs are easy (``"18"`` vs ``"18"``, ``"025"`` vs ``"25"``, ``"(B)"`` vs ``"B"``);
deciding them here skips a round trip to a worker process. The rule is one-sided: this module
answers True only when the two answers are certainly equal, and False only for two plain
integers (digits or number words: ``three``, :mod:`.words`) or two sets of multiple-choice
letters (``(B)``, ``\\text{(A), (C)}``) that differ. Everything else is left to math-verify
(``None`` = undecided).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from agentmath.grading.words import number_from_words

_WRAPPER_RE = re.compile(r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_REMOVE_RE = re.compile(
    r"\\left(?![A-Za-z])|\\right(?![A-Za-z])|\\[!,;: ]|~"
    r"|\^\s*\{?\s*\\circ\s*\}?|\\circ(?![A-Za-z])|\\degree(?![A-Za-z])|\\?%|\\\$"
)
_THOUSANDS_RE = re.compile(r"^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_INTEGER_RE = re.compile(r"^[+-]?\d+$")
_DECIMAL_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_CHOICE_RE = re.compile(r"^\(?([A-E])\)?$")


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
    previous = None
    while text != previous:
        previous = text
        text = _WRAPPER_RE.sub(r"\1", text)
    text = _REMOVE_RE.sub("", text)
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


def quick_compare(gold: str, predicted: str) -> bool | None:
    """True/False when the answer is certain from the strings alone, else None (ask math-verify)."""
    g, p = normalize(gold), normalize(predicted)
    if not g or not braces_balanced(g):
        return None  # the gold may be unparsable: math-verify decides (and says None)
    if g == p:
        return True
    g_choices, p_choices = _choices(g), _choices(p)
    if g_choices and p_choices:
        return g_choices == p_choices
    g_num, p_num = _number(g), _number(p)
    if (g_num is None) != (p_num is None):  # a numeral against a phrase: number words?
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
