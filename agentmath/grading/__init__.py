"""Grading: extract a final answer from a response and check it against the gold answer.

Public API::

    extract_answer(text, strategies=DEFAULT_STRATEGIES) -> str | None
    verify(gold, predicted, timeout=5.0) -> bool | None      # None: gold unparsable
    grade(gold, response, timeout=5.0) -> GradeResult         # extracted, correct, timed_out, error
    grade_answer(gold, response, answer=None, timeout) -> Grade  # the seam eval and RL use:
                                                               # correct / wrong / error + reason
    averify / agrade / acheck                                  # the same, awaitable
    GradingOptions                       # agentmath's leniencies beyond math-verify, as options

Checking runs math-verify in spawned worker processes with a hard, kill-on-overrun timeout
(:mod:`agentmath.grading.pool`), after cheap string/number shortcuts that never give a wrong
True (:mod:`agentmath.grading.fastpath`). Importing this package does not import sympy.
"""

from agentmath.grading.answer import Grade, Verdict, agrade_answer, grade_answer
from agentmath.grading.extract import (
    ALL_STRATEGIES,
    BOXED_ONLY,
    DEFAULT_STRATEGIES,
    clean_answer,
    extract_answer,
)
from agentmath.grading.options import GradingOptions
from agentmath.grading.verify import (
    DEFAULT_TIMEOUT_S,
    GradeResult,
    acheck,
    agrade,
    averify,
    check,
    configure_pool,
    get_pool,
    grade,
    shutdown_pool,
    verify,
)

__all__ = [
    "ALL_STRATEGIES",
    "BOXED_ONLY",
    "DEFAULT_STRATEGIES",
    "DEFAULT_TIMEOUT_S",
    "Grade",
    "GradeResult",
    "GradingOptions",
    "acheck",
    "agrade",
    "agrade_answer",
    "averify",
    "check",
    "clean_answer",
    "configure_pool",
    "extract_answer",
    "get_pool",
    "grade",
    "grade_answer",
    "shutdown_pool",
    "verify",
    "Verdict",
]
