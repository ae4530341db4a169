"""What every converter produces: a plan of text and code pieces, with simulated outputs.

A converter (rule-based, or a teacher LLM) turns a :class:`~agentmath.tasks.Task` (a problem
with a gold answer) into a list of :class:`Piece`: model text and code snippets, in order.
A code piece may carry the output its author *expected* (the teacher's simulated output, or
the rule-based converter's step value); the pipeline runs every snippet for real, replaces the
simulated outputs with the real ones and checks that they agree.

A converter that cannot plan raises :class:`Rejected` naming the reason, so that the funnel
report can say why a task left at the ``convert`` stage.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from agentmath.errors import AgentMathError
from agentmath.tasks import Task


@dataclass(frozen=True)
class Piece:
    """One planned piece of a trajectory: model ``text``, or a ``code`` snippet to run.

    ``simulated``: for code, the output its author expected (None: none was written).
    """

    kind: Literal["text", "code"]
    text: str
    simulated: str | None = None


class Rejected(AgentMathError):
    """A task left the pipeline at ``stage`` for ``reason`` (a short snake_case word);
    ``detail`` says what exactly, for the funnel report's examples."""

    def __init__(self, stage: str, reason: str, detail: str) -> None:
        super().__init__(f"{stage}: {reason}: {detail}")
        self.stage, self.reason, self.detail = stage, reason, detail


class Converter(Protocol):
    """Plans a tool trajectory for a problem with a gold answer (one step of the pipeline)."""

    name: str

    async def convert(self, task: Task) -> list[Piece]:
        """Text and code pieces in order (tool outputs are filled in by execution).

        Raises :class:`Rejected` (stage ``convert``) when no plan can be made.
        """
        ...


def model_turns(pieces: Sequence[Piece]) -> Iterator[tuple[int, str, Piece | None]]:
    """The plan as the loop sees it: for each snippet, ``(index, lead, snippet)`` with its
    1-based index and the text written since the previous snippet; then ``(n + 1, tail,
    None)`` with the text after the last one."""
    lead, index = "", 0
    for piece in pieces:
        if piece.kind == "text":
            lead += piece.text
            continue
        index += 1
        yield index, lead, piece
        lead = ""
    yield index + 1, lead, None
