"""The pipeline of the data engine: plan -> checks -> execution -> checks -> SFT record.

For each task (a problem with a gold answer and, for the teacher, a text solution), in order:

========== ============================================================================
stage      what leaves here (``reason``)
========== ============================================================================
convert    the converter made no plan: ``no_plan``, ``no_solution``, ``request_failed``,
           ``truncated``, ``unparseable``, ``no_code``
format     the agent loop would not replay it: ``malformed``, ``no_code``
ast        ``syntax_error``, ``trivial``, ``restates_text``, ``too_long``, ``too_deep``
execute    a snippet failed unplanned: ``error``, ``timeout``, ``crashed``,
           ``sandbox_error``, ``self_correction_failed``
outputs    a real output disagrees with the simulated one: ``output_mismatch``
answer     the final answer no longer matches the gold: ``no_answer``, ``wrong_answer``,
           ``ungradable``
consistency the judge finds reasoning that does not follow from a real output:
           ``inconsistent``, ``judge_unclear``, ``judge_failed``
========== ============================================================================

Every stage but ``convert`` and ``format`` can be turned off (:class:`ChecksConfig`; the
consistency stage runs when the pipeline is given a judge); execution
itself always happens, since real outputs must replace simulated ones. Optional
self-correction turns are planned before execution and written around a real error. Each task
ends as one :class:`Outcome`: its record, or the stage, reason and detail of its rejection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentmath.formats.base import ToolFormat, output_text
from agentmath.formats.openai_tools import OPENAI_TOOLS
from agentmath.grading import averify, extract_answer
from agentmath.sandbox.client import SandboxClient
from agentmath.synth.checks import check_snippets, outputs_agree
from agentmath.synth.config import ChecksConfig
from agentmath.synth.execute import execute
from agentmath.synth.judge import ConsistencyJudge
from agentmath.synth.pieces import Converter, Rejected
from agentmath.synth.records import Event, build_record, check_plan, final_text
from agentmath.synth.selfcorrect import plan_corrections
from agentmath.tasks import Task

STAGES = ("convert", "format", "ast", "execute", "outputs", "answer", "consistency")
#: Reasons that say the infrastructure failed, not the data: a resumed run may retry them.
RETRYABLE = frozenset({"request_failed", "judge_failed", "sandbox_error"})


@dataclass
class Outcome:
    """What became of one task: kept (``record``) or left at ``stage`` for ``reason``."""

    id: str
    stage: str | None = None
    reason: str | None = None
    detail: str = ""
    record: dict[str, Any] | None = None
    tool_calls: int = 0
    self_corrections: int = 0
    seconds: float = 0.0

    @property
    def kept(self) -> bool:
        return self.stage is None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def check_outputs(events: Sequence[Event]) -> None:
    """Raise Rejected (stage ``outputs``) at the first real output that disagrees with its
    simulated one (snippets without a simulated output, or that failed as planned, pass)."""
    index = 0
    for event in events:
        if event.result is None or not event.planned:
            continue
        index += 1
        simulated = event.piece.simulated
        if simulated is None or not event.result.ok:
            continue
        real = output_text(event.result)
        if not outputs_agree(simulated, real):
            raise Rejected("outputs", "output_mismatch", f"snippet {index}: simulated "
                           f"{simulated[:200]!r}, but it printed {real[:200]!r}")


async def check_answer(task: Task, events: Sequence[Event]) -> None:
    """Raise Rejected (stage ``answer``) unless the final text's answer verifies as the gold."""
    predicted = extract_answer(final_text(events))
    if predicted is None:
        raise Rejected("answer", "no_answer", "the final text states no answer")
    verdict = await averify(task.answer, predicted)
    if verdict is None:
        raise Rejected("answer", "ungradable", f"the gold answer {task.answer!r} does not parse")
    if not verdict:
        raise Rejected("answer", "wrong_answer",
                       f"final answer {predicted!r} != gold {task.answer!r}")


@dataclass
class Pipeline:
    """Turns tasks into verified SFT records with one converter (see the module doc).

    ``fmt``: the tool format of the records (None: native chat records with tool calls);
    ``system_prompt`` and ``max_output_chars`` must match what the agent loop uses at
    inference; ``timeout``: seconds per snippet; ``correction_rate``: the fraction of tasks
    that get a self-correction turn.
    """

    converter: Converter
    pool: SandboxClient
    fmt: ToolFormat | None
    checks: ChecksConfig = field(default_factory=ChecksConfig)
    judge: ConsistencyJudge | None = None
    system_prompt: str | None = None
    max_output_chars: int = 4000
    timeout: float = 10.0
    correction_rate: float = 0.0
    correction_seed: int = 0

    def enabled(self) -> tuple[str, ...]:
        """The stages that run, in order."""
        off = {name for name in ("ast", "execute", "outputs", "answer")
               if not getattr(self.checks, name)}
        if self.judge is None:
            off.add("consistency")
        return tuple(s for s in STAGES if s not in off)

    async def _events(self, task: Task) -> list[Event]:
        pieces = await self.converter.convert(task)
        if not pieces:
            raise Rejected("convert", "no_plan", f"converter {self.converter.name!r} gave none")
        check_plan(pieces, self.fmt or OPENAI_TOOLS)
        if self.checks.ast:
            check_snippets(pieces, self.checks.limits())
        corrections = plan_corrections(pieces, task.id, rate=self.correction_rate,
                                       seed=self.correction_seed)
        events = await execute(pieces, self.pool, timeout=self.timeout,
                               require_ok=self.checks.execute, corrections=corrections)
        if self.checks.outputs:
            check_outputs(events)
        if self.checks.answer:
            await check_answer(task, events)
        if self.judge is not None:
            await self.judge.check(task, events)
        return events

    async def run_one(self, task: Task) -> Outcome:
        """The outcome of one task; never raises for bad data or a failed tool or model."""
        started = time.perf_counter()
        try:
            events = await self._events(task)
        except Rejected as exc:
            return Outcome(task.id, exc.stage, exc.reason, exc.detail,
                           seconds=time.perf_counter() - started)
        record = build_record(task, events, self.fmt, system_prompt=self.system_prompt,
                              max_output_chars=self.max_output_chars)
        return Outcome(task.id, record=record,
                       tool_calls=sum(e.result is not None for e in events),
                       self_corrections=sum(not e.planned and e.result is not None
                                            for e in events),
                       seconds=time.perf_counter() - started)

    async def run(self, tasks: Sequence[Task], *, concurrency: int = 16,
                  on_outcome: Callable[[Task, Outcome], None] | None = None) -> list[Outcome]:
        """Every task's outcome, in input order; ``concurrency`` tasks in flight (teacher
        requests and sandbox sessions); ``on_outcome`` is called as each one finishes."""
        outcomes: list[Outcome | None] = [None] * len(tasks)
        queue = iter(range(len(tasks)))  # workers pull from one iterator: memory stays flat

        async def worker() -> None:
            for i in queue:
                outcomes[i] = outcome = await self.run_one(tasks[i])
                if on_outcome is not None:
                    on_outcome(tasks[i], outcome)

        await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(tasks))))))
        return [o for o in outcomes if o is not None]
