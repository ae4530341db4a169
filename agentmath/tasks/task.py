"""The task record: a problem with its gold answer, the one such type in agentmath. Dataset
loaders (:mod:`agentmath.tasks.datasets`), the synthetic problems and the scripted examples make
them; eval, RL, synth and the rollout engine's requests carry them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    """A problem with a gold answer, the one such type in agentmath (benchmarks, training
    data, synthetic problems, examples): a unique id, the problem text, the reference answer
    as text, and every other field in ``meta`` (level, subject, year, solution, ...).

    ``meta`` is left out of the hash so that tasks can be put in sets and used as dict keys.
    """

    id: str
    problem: str
    answer: str
    meta: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def solution(self) -> str:
        """The reference text solution (``meta["solution"]``), or "" when there is none."""
        value = self.meta.get("solution")
        return value if isinstance(value, str) else ""
