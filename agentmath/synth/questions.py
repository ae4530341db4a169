"""The same story asking another question: a near-match that is not a duplicate.

A problem that tells a benchmark problem's story with its numbers and asks for another unknown
(the yellow marbles now instead of the blue ones before; the eraser's price instead of the
pencil's; the remainder instead of the quotient) reads as a near-copy to every detector: the
word N-grams and shingles are mostly shared, MiniLM puts such pairs at cosines of 0.81-0.96
(above many true paraphrases) and every number agrees. No rule over the texts alone separates
them from paraphrases (docs/benchmarks.md), and no model packaged offline here compares what
two problems ask. Their reference answers do: a paraphrase asks the same question and has the
same answer; a problem asking another unknown has another.

So a match is *spared* (not a removal) when both rows carry a reference answer, the answers
are not equivalent (:func:`agentmath.grading.check`, math-verify behind cheap shortcuts, asked
both ways: each answer must parse as the gold of the other), and the two texts differ in more
than their numbers. The last condition keeps a renumbered copy
(the same wording, other numbers, so another answer) what the detectors call it, contamination;
a copy whose answer field is wrong is likewise still removed when only its numbers differ. A row
without an answer, with an answer that holds neither a digit nor a LaTeX command (placeholders
such as "N/A", "TODO" or "see solution", which math-verify would call different from anything),
or whose answers cannot be compared (a check times out or fails, either answer does not
parse) is never spared: in doubt, a match stays a removal. The rule trusts the answer fields: a
reworded benchmark problem filed with a wrong answer of digits is spared, which is why the CLI
has ``--ignore-answers``.
"""

from __future__ import annotations

from typing import TypeGuard

from agentmath.grading import check
from agentmath.synth.normalize import masked_wording

__all__ = ["asks_another_question"]


def _checkable(answer: str | None) -> TypeGuard[str]:
    """An answer worth comparing: some digit or LaTeX command in it (not a placeholder)."""
    return answer is not None and ("\\" in answer or any(c.isdigit() for c in answer))


def asks_another_question(text: str, answer: str | None, ref_text: str,
                          ref_answer: str | None) -> bool:
    """Whether ``text`` (with reference ``answer``) asks another question than ``ref_text``
    (with ``ref_answer``), given that a detector matched the two: see the module docstring."""
    if not (_checkable(answer) and _checkable(ref_answer)):
        return False
    if masked_wording(text) == masked_wording(ref_text):
        return False  # the same wording, at most other numbers: a (renumbered) copy
    return _different(ref_answer, answer) and _different(answer, ref_answer)


def _different(gold: str, predicted: str) -> bool:
    """Whether ``predicted`` was checked against ``gold`` and found different: not when the
    check timed out or failed, nor when ``gold`` does not parse (``correct`` None)."""
    result = check(gold, predicted)
    return result.correct is False and not result.timed_out and result.error is None
