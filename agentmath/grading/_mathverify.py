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

from agentmath.grading.plaintext import latex_spelling

# Once per process math-verify warns that its timeout is off; that is on purpose here.
logging.getLogger("math_verify").setLevel(logging.CRITICAL)

# ``\textbf{(025)}`` (AoPS style) would parse as the *text* "025"; unwrap numeric text.
_NUMERIC_TEXT_RE = re.compile(
    r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{\s*\(?\s*"
    r"([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)\s*\)?\s*\}"
)
_CONFIG = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())


def parse_answer(answer: str) -> list[Any]:
    """Parse one bare answer (no surrounding prose) into math-verify's candidate list.

    The answer is wrapped in ``\\boxed{}`` so that math-verify treats all of it as the target
    instead of hunting for a sub-expression; plain-text and Unicode math (``pi/4``, ``√2``,
    ``x**2``) is spelled in LaTeX first (:mod:`.plaintext`). An empty list means it could not
    be parsed.
    """
    answer = latex_spelling(_NUMERIC_TEXT_RE.sub(r"\1", answer))
    return parse("\\boxed{" + answer + "}", extraction_config=_CONFIG, parsing_timeout=None)


def verify_answers(gold: str, predicted: str) -> bool | None:
    """Compare two bare answers.

    None if the gold does not parse (ungradable), False if the prediction does not.
    """
    gold_parsed = parse_answer(gold)
    if not gold_parsed:
        return None
    predicted_parsed = parse_answer(predicted)
    if not predicted_parsed:
        return False
    return bool(verify(gold_parsed, predicted_parsed, timeout_seconds=None))


# One pair per code path that sympy loads lazily (simplify alone costs ~1 s the first time).
_WARM_UP_PAIRS = (
    (r"\frac{1}{2}", "0.5"), (r"2\sqrt{2}", r"\sqrt{8}"), ("(0, 1]", "(0,1]"),
    (r"\{1,2\}", r"\{2,1\}"), ("x=3", "3"), ("x^2+2x+1", "(x+1)^2"), ("(1, 2)", "(1,2)"),
    (r"50\%", "0.5"), (r"\text{(B)}", "B"), (r"\begin{pmatrix}1\\2\end{pmatrix}", "(1,2)"),
)  # fmt: skip


def warm_up() -> None:
    """Run one comparison of each common kind, so that the first real call in a fresh worker
    is not charged sympy's lazy imports and caches against its timeout."""
    for gold, predicted in _WARM_UP_PAIRS:
        verify_answers(gold, predicted)
