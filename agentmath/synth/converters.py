"""The rule-based converter: a synthetic problem's steps become one snippet each.

It needs the structured steps that :func:`agentmath.tasks.synthetic.generate_problems` puts in
``task.meta["steps"]``; it is the converter of the demo and of the test model, and a baseline
beside the teacher (:class:`agentmath.synth.teacher.TeacherConverter`), which implements the
same :class:`~agentmath.synth.pieces.Converter` protocol for any text solution.
"""

from __future__ import annotations

from agentmath.synth.pieces import Piece, Rejected
from agentmath.tasks import Task
from agentmath.tasks.synthetic import Step, steps_of


class RuleBasedConverter:
    """One snippet per step: a lead sentence (without the result), then ``name = expr``.

    Snippets use the names of earlier steps, so they rely on the session's state; each one's
    simulated output is its step's value, and the trajectory ends with
    ``The answer is \\boxed{VALUE}`` of the last step (so a gold answer that disagrees with the
    steps is caught by the answer check).
    """

    name = "rule_based"

    def lead(self, step: Step) -> str:
        """The step's sentence with the computed number left out: what is computed and why."""
        premise, sep, _ = step.text.rpartition(", so ")
        what = step.what or f"the value of {step.name}"
        return f"{premise}, so I compute {what}." if sep else f"I compute {what}."

    def code(self, step: Step) -> str:
        """The snippet of one step: assign it, then print it."""
        return f"{step.name} = {step.expr}\nprint({step.name})"

    async def convert(self, task: Task) -> list[Piece]:
        """Lead and code for each step, then the last step's value as the boxed answer."""
        steps = steps_of(task)
        if not steps:
            raise Rejected("convert", "no_plan", "the rule-based converter needs the "
                           "structured steps of a synthetic problem (task.meta['steps'])")
        pieces: list[Piece] = []
        for step in steps:
            pieces.append(Piece("text", self.lead(step) + "\n"))
            pieces.append(Piece("code", self.code(step), simulated=str(step.value)))
        pieces.append(Piece("text", f"The answer is \\boxed{{{steps[-1].value}}}."))
        return pieces
