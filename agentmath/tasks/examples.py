"""Built-in example problems with scripted tool-integrated solutions.

A scripted solution has the shape of the trajectories agentmath's models will produce
(reasoning text interleaved with Python cells run in one sandbox session, then a
``\\boxed{}`` answer), but it is written by hand: it exercises the sandbox and the trajectory
format end to end before any model exists. ``agentmath demo`` runs one of these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentmath.tasks.task import Task


@dataclass(frozen=True, slots=True)
class Step:
    """One turn of a scripted trajectory: reasoning text, optionally followed by a code cell."""

    text: str
    code: str | None = None


@dataclass(frozen=True, slots=True)
class ScriptedExample:
    """A problem with its gold answer (a :class:`~agentmath.tasks.Task`, whose id is the
    example's name) and a hand-written tool-integrated solution.

    The value of the *last* code cell is the computed answer; ``final`` holds the closing text
    with the ``\\boxed{}`` answer. Both are checked against the task's answer.
    """

    task: Task
    steps: tuple[Step, ...]
    final: str

    @property
    def name(self) -> str:
        return self.task.id

    @property
    def problem(self) -> str:
        return self.task.problem

    @property
    def answer(self) -> str:
        return self.task.answer


GRANARIES = ScriptedExample(
    task=Task(id="chessboard-granaries", problem=(
        "A king rewards an inventor with rice: 1 grain on the first square of a chessboard, "
        "2 on the second, 4 on the third, doubling on each of the 64 squares. The whole reward "
        "is split between two granaries so that the first receives 3,000,000,000 grains more "
        "than twice what the second receives. How many grains does the second granary receive?"
    ), answer="6148914690236517205"),
    steps=(
        Step(
            text=(
                "The reward is a geometric series 1 + 2 + 4 + ... + 2^63. The numbers are far "
                "beyond mental arithmetic, so I compute the total exactly with Python integers "
                "and check it against the closed form 2^64 - 1."
            ),
            code=(
                "total = sum(2**k for k in range(64))\n"
                "print(total)\n"
                "total == 2**64 - 1"
            ),
        ),
        Step(
            text=(
                "Let a be the first granary and b the second. Then a + b = total and "
                "a = 2b + 3,000,000,000. I solve this linear system with sympy, reusing `total` "
                "from the previous cell (the session keeps its state)."
            ),
            code=(
                "import sympy as sp\n"
                "a, b = sp.symbols('a b', integer=True, nonnegative=True)\n"
                "equations = [sp.Eq(a + b, total), sp.Eq(a, 2*b + 3_000_000_000)]\n"
                "solution = sp.solve(equations, [a, b], dict=True)\n"
                "solution"
            ),
        ),
        Step(
            text=(
                "There is exactly one solution. I check that it is a valid split (whole, "
                "non-negative grains that add up to the total) and read off b."
            ),
            code=(
                "(sol,) = solution\n"
                "assert sol[a] + sol[b] == total and sol[a] == 2*sol[b] + 3_000_000_000\n"
                "assert sol[b] >= 0 and sol[b].is_integer\n"
                "int(sol[b])"
            ),
        ),
    ),
    final=(
        "The second granary receives 6,148,914,690,236,517,205 grains (and the first "
        "12,297,829,383,473,034,410).\n\n\\boxed{6148914690236517205}"
    ),
)

#: Built-in examples by name; the first is the default of ``agentmath demo``.
EXAMPLES: dict[str, ScriptedExample] = {GRANARIES.name: GRANARIES}
DEFAULT_EXAMPLE = GRANARIES.name


def extract_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` in ``text`` (nested braces allowed), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[begin:i]
            depth -= 1
    return None


def normalize_answer(answer: str | None) -> str | None:
    """Normalise a short numeric answer for comparison: strip spaces, quotes, thousands commas.

    Deliberately simple; the grading module (math-verify) will replace it for real answers.
    """
    if answer is None:
        return None
    text = answer.strip().strip("'\"")
    text = re.sub(r"(?<=\d)[,\s](?=\d{3}\b)", "", text)
    return re.sub(r"\s+", "", text)
