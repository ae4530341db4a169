"""The grader's leniencies as options: what agentmath accepts beyond math-verify's own reading.

agentmath grades more answers right than math-verify alone: it reads number words
(``\\boxed{\\text{ten}}`` = 10, :mod:`.words`), plain-text and Unicode math (``pi/4``,
``sqrt2``, ``√2``, ``90°``, ``12 cm``, :mod:`.plaintext`), a word against the same word in
another case (``\\text{True}`` = ``true``), multiple-choice letters as sets (``(B)`` = ``B``,
``(B) 42`` = ``B``), and it finds an answer that is not boxed ("The answer is 5", ``<answer>``
tags, ``#### 5``: :mod:`.extract`). Each is right for a dataset written that way, but a paper
graded with math-verify alone would score such answers wrong, so a run that reproduces a
paper's numbers turns them off (:meth:`GradingOptions.math_verify_only`). The structural
readings that only match math-verify's intent (a column vector against a tuple, an interval
against its inequality, ``\\textbf{(025)}`` as a number) stay on.

One grader takes these options (:func:`agentmath.grading.verify.check`,
:func:`~agentmath.grading.verify.grade`, :func:`~agentmath.grading.answer.grade_answer`);
the defaults are agentmath's behaviour.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from agentmath.config import StrictModel
from agentmath.errors import GradingError
from agentmath.grading.extract import DEFAULT_STRATEGIES, check_strategies

__all__ = ["GradingOptions"]


class GradingOptions(StrictModel):
    """Which of agentmath's leniencies beyond math-verify grading applies (module doc)."""

    number_words: bool = Field(True, description=(
        "Read an answer written as English number words as its number (\\boxed{\\text{ten}} "
        "= 10, twenty-five = 25); math-verify alone grades them wrong."))
    plaintext_math: bool = Field(True, description=(
        "Spell plain-text and Unicode math in LaTeX before parsing (pi/4, sqrt2, √2, x**2, "
        "90°, ½, 1e3, 12 cm); math-verify alone misreads them."))
    word_case: bool = Field(True, description=(
        "A word equals the same word in another case (\\text{True} = true); math-verify "
        "alone compares words case-sensitively."))
    multiple_choice: bool = Field(True, description=(
        "Compare multiple-choice answers by their letters ((B) = B, \\text{(A), (C)} = C, A, "
        "(B) 42 = B)."))
    extraction: list[str] = Field(list(DEFAULT_STRATEGIES), min_length=1, description=(
        "Where the final answer is looked for in a response, in order: boxed (the last "
        "\\boxed{}), answer_tag (<answer>...</answer>), phrase ('the answer is X'), gsm8k "
        "('#### X'), last_number (the last number: a guess)."))

    @field_validator("extraction")
    @classmethod
    def _known_strategies(cls, value: list[str]) -> list[str]:
        try:
            check_strategies(value)
        except GradingError as exc:  # as a ValueError: pydantic names the field with it
            raise ValueError(str(exc)) from exc
        return value

    @classmethod
    def math_verify_only(cls) -> GradingOptions:
        """Every leniency off and only boxed answers read: a paper's math-verify grader."""
        return cls(number_words=False, plaintext_math=False, word_case=False,
                   multiple_choice=False, extraction=["boxed"])
