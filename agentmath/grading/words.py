"""Answers written as English number words: ``\\boxed{three}``, ``twenty-five``, ``\\text{six}``.

Models trained on word problems sometimes box the answer in words. math-verify reads
``three`` as the product of five symbols and grades it wrong against ``3``; the fast path asks
this module first. Parsing number words is text2num's job (a maintained parser of written
numbers, cardinals only, so ``fourth`` or ``three apples`` are not numbers); this module only
decides which answers are worth asking it about: letters, spaces and hyphens, after the
LaTeX text wrappers are taken off.
"""

from __future__ import annotations

import re
from decimal import Decimal

_WRAPPER_RE = re.compile(r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
# Words of three letters or more: every English cardinal word is ("one", "six", "ten"), and
# text2num reads a lone "o" as 0, which as an answer is a point's name, not a number.
_WORDS_RE = re.compile(r"[a-z]{3,}(?:[ -]+[a-z]{3,})*")
#: Longer phrases are not answers but sentences; they are not parsed.
MAX_WORDS_CHARS = 80


def unwrap_text(answer: str) -> str:
    """``answer`` without its LaTeX text wrappers (``\\text{...}``, ``\\textbf{...}``,
    ``\\mathrm{...}``, ...), nested ones too; the one unwrapping grading uses."""
    previous = None
    while answer != previous:
        previous = answer
        answer = _WRAPPER_RE.sub(r"\1", answer)
    return answer


def number_from_words(answer: str) -> Decimal | None:
    """The value of an answer that is nothing but an English cardinal (``"Twenty-five"`` ->
    25, ``"\\text{zero}"`` -> 0), else None. Negative words (``minus four``) and fractions
    (``a half``) are not read: they are left to math-verify, which grades them wrong."""
    text = unwrap_text(answer.strip().strip("$")).strip()
    text = text.rstrip(".").strip().lower()
    if len(text) > MAX_WORDS_CHARS or not _WORDS_RE.fullmatch(text):
        return None
    from text_to_num import text2num  # lazily: only a word answer pays for the import

    try:
        return Decimal(text2num(text, "en"))
    except ValueError:  # not a cardinal: "odd", "fourth", "three apples"
        return None
