"""The one grading seam below evaluation and RL: a response against a gold, as a typed grade.

``agentmath eval`` records a grade per sample and the RL accuracy reward pays for one; both
call :func:`grade_answer` / :func:`agrade_answer`, so "correct" means the same thing in a
benchmark table and in a reward curve. A :class:`Grade` is one of three verdicts:

* ``correct`` - the extracted answer equals the gold (math-verify or an exact shortcut);
* ``wrong`` - it was checked and differs, or nothing could be extracted;
* ``error`` - it could not be checked, with the ``reason``: grading timed out, the verifier
  crashed, the gold answer cannot be parsed, or the grader refused the input
  (:class:`~agentmath.errors.GradingError`).

Callers decide what an error is worth: the reward pays 0 for it (as for wrong), eval records it
(``samples.jsonl``'s ``correct`` is ``null`` when the row itself is ungradable and ``false``
when this answer could not be checked in time: :attr:`Grade.correct`, the on-disk value).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from agentmath.errors import GradingError
from agentmath.grading.verify import DEFAULT_TIMEOUT_S, GradeResult, agrade, grade

if TYPE_CHECKING:
    from agentmath.grading.options import GradingOptions


class Verdict(StrEnum):
    """What grading concluded about one response."""

    CORRECT = "correct"
    WRONG = "wrong"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Grade:
    """The grade of one response: the verdict, the answer graded and, for an error, why.

    ``ungradable`` marks an error of the row rather than of this answer (an unparsable gold, a
    refused input): eval stores such a sample's ``correct`` as null, so metrics that skip
    unknown grades skip it. ``timed_out`` says grading ran out of time.
    """

    verdict: Verdict
    extracted: str | None = None
    reason: str | None = None
    timed_out: bool = False
    ungradable: bool = False

    @property
    def is_correct(self) -> bool:
        """True only for a correct verdict (what a reward pays for)."""
        return self.verdict is Verdict.CORRECT

    @property
    def correct(self) -> bool | None:
        """The on-disk ``correct`` of a sample record: True, False, or None (ungradable)."""
        if self.verdict is Verdict.CORRECT:
            return True
        return None if self.ungradable else False

    @classmethod
    def error(cls, reason: str, extracted: str | None = None, *,
              ungradable: bool = False) -> Grade:
        """An error grade (nothing was checked) with its reason."""
        return cls(Verdict.ERROR, extracted, reason, ungradable=ungradable)

    @classmethod
    def from_result(cls, result: GradeResult) -> Grade:
        """The typed grade of a :class:`~agentmath.grading.verify.GradeResult`."""
        if result.correct is True:
            return cls(Verdict.CORRECT, result.extracted, timed_out=result.timed_out)
        if result.correct is None:
            return cls(Verdict.ERROR, result.extracted,
                       result.error or "the gold answer could not be parsed",
                       result.timed_out, ungradable=True)
        if result.timed_out or result.error:
            return cls(Verdict.ERROR, result.extracted, result.error or "grading timed out",
                       result.timed_out)
        return cls(Verdict.WRONG, result.extracted)

    @classmethod
    def from_record(cls, correct: Any, extracted: str | None, timed_out: bool = False,
                    reason: str | None = None) -> Grade:
        """The grade as a stored record holds it (``correct``: true, false or null)."""
        if correct is True:
            return cls(Verdict.CORRECT, extracted, timed_out=timed_out)
        if correct is None:
            return cls(Verdict.ERROR, extracted, reason or "ungradable", timed_out,
                       ungradable=True)
        if timed_out or reason:
            return cls(Verdict.ERROR, extracted, reason or "grading timed out", timed_out)
        return cls(Verdict.WRONG, extracted)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a trajectory's ``grade``)."""
        return {"verdict": self.verdict.value, "extracted": self.extracted,
                "reason": self.reason, "timed_out": self.timed_out,
                "ungradable": self.ungradable}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Grade:
        """Inverse of :meth:`to_dict`."""
        return cls(Verdict(data["verdict"]), data.get("extracted"), data.get("reason"),
                   bool(data.get("timed_out", False)), bool(data.get("ungradable", False)))


def _finish(result: GradeResult, answer: str | None) -> Grade:
    """A timed-out grade keeps the loop's ``answer`` as what was answered (still ungraded)."""
    if result.extracted is None and result.timed_out:
        result = GradeResult(answer, result.correct, result.timed_out, result.error,
                             result.method)
    return Grade.from_result(result)


def grade_answer(gold: str, response: str | None, *, answer: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S,
                 options: GradingOptions | None = None) -> Grade:
    """Grade ``response`` (what the model wrote) against ``gold``, extraction and verification
    under one ``timeout``; ``answer`` is the agent loop's own extracted answer, reported as the
    graded answer when grading fails before extracting one; ``options`` says which of
    agentmath's leniencies apply (None: all). Never raises for bad input."""
    try:
        result = grade(gold, response, timeout=timeout, options=options)
    except GradingError as exc:  # an ungradable row is graded as such, not raised
        return Grade.error(str(exc), answer, ungradable=True)
    return _finish(result, answer)


async def agrade_answer(gold: str, response: str | None, *, answer: str | None = None,
                        timeout: float = DEFAULT_TIMEOUT_S,
                        options: GradingOptions | None = None) -> Grade:
    """:func:`grade_answer` for asyncio: anything slow runs in a thread, the loop stays free."""
    try:
        result = await agrade(gold, response, timeout=timeout, options=options)
    except GradingError as exc:
        return Grade.error(str(exc), answer, ungradable=True)
    return _finish(result, answer)
