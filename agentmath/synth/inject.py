"""In-memory code injection: tasks -> verified SFT records, with counts of what was dropped.

The convenience the recipes use (the demo, the test model): :func:`inject` runs the
:class:`~agentmath.synth.pipeline.Pipeline` over a list of tasks with any converter and returns
the kept records in input order and every drop with its reason. ``agentmath synth`` runs the
same pipeline resumably on disk (:mod:`agentmath.synth.run`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmath.config import LoopConfig
from agentmath.formats.base import ToolFormat
from agentmath.sandbox.client import SandboxClient
from agentmath.synth.config import ChecksConfig
from agentmath.synth.pieces import Converter
from agentmath.synth.pipeline import Pipeline
from agentmath.tasks import Task

TEXT_SYSTEM_PROMPT = ("Solve the problem step by step. Put the final answer in \\boxed{}.")


@dataclass
class ConversionReport:
    """What :func:`inject` produced: kept records and every drop with its reason."""

    records: list[dict[str, Any]] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, str]] = field(default_factory=list)  # id, stage, reason, detail
    seconds: float = 0.0

    @property
    def kept(self) -> int:
        return len(self.records)

    @property
    def total(self) -> int:
        return self.kept + sum(self.dropped.values())

    def summary(self) -> str:
        """One line: kept / total, then the count of each drop reason."""
        reasons = ", ".join(f"{r}={n}" for r, n in sorted(self.dropped.items()))
        return (f"kept {self.kept}/{self.total} ({reasons or 'none dropped'}) "
                f"in {self.seconds:.1f}s")


async def inject(tasks: Sequence[Task], converter: Converter, fmt: ToolFormat,
                 pool: SandboxClient, *, concurrency: int = 8, system_prompt: str | None = None,
                 timeout: float = 10.0, max_output_chars: int | None = None,
                 native: bool = False, checks: ChecksConfig | None = None,
                 correction_rate: float = 0.0) -> ConversionReport:
    """Convert, execute and verify every task; keep only fully verified trajectories.

    ``system_prompt`` (default: the format's instructions) and ``max_output_chars`` (default:
    :class:`LoopConfig`'s) must match what the agent loop uses at inference. ``native``: chat
    records for native tool calling (``fmt`` is then ignored).
    """
    started = time.perf_counter()
    pipeline = Pipeline(converter, pool, None if native else fmt, checks or ChecksConfig(),
                        system_prompt=system_prompt, timeout=timeout,
                        max_output_chars=max_output_chars or LoopConfig().max_output_chars,
                        correction_rate=correction_rate)
    report = ConversionReport()
    for outcome in await pipeline.run(tasks, concurrency=concurrency):
        if outcome.record is not None:
            report.records.append(outcome.record)
        else:
            report.dropped[str(outcome.reason)] += 1
            report.failures.append({"id": outcome.id, "stage": str(outcome.stage),
                                    "reason": str(outcome.reason), "detail": outcome.detail})
    report.seconds = time.perf_counter() - started
    return report


def text_only_example(task: Task, system_prompt: str = TEXT_SYSTEM_PROMPT) -> dict[str, Any]:
    """A record whose completion is the task's text solution (the text-only baseline).

    Evaluate such a model with the same ``system_prompt`` set explicitly: the loop's default
    prompt is a tool format's instructions.
    """
    if not system_prompt:
        raise ValueError("text_only_example needs a non-empty system prompt")
    if not task.solution:
        raise ValueError(f"task {task.id!r} has no text solution")
    messages = [{"role": "system", "content": system_prompt},
                {"role": "user", "content": task.problem}]
    return {"id": task.id, "messages": messages,
            "completion": [{"text": task.solution, "train": True}], "answer": task.answer}
