"""The typed record of one evaluated sample: one line of ``samples.jsonl``.

Built from the rollout engine's :class:`~agentmath.rollout.records.Sample` and its grade; the
JSONL line is :meth:`SampleRecord.to_dict` (field names are the file format, which metrics,
reports and the viewer read).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agentmath.agent.trajectory import Trajectory
from agentmath.datasets import Task
from agentmath.grading.answer import Grade


@dataclass(slots=True)
class SampleRecord:
    """A graded sample: the grade, the counts metrics need, and the whole trajectory."""

    problem_id: str
    sample_index: int
    gold: str
    extracted: str | None
    correct: bool | None
    grade_timed_out: bool
    model_tokens: int
    tool_tokens: int
    prompt_tokens: int
    total_tokens: int
    tool_calls: int
    tool_errors: int
    tool_timeouts: int
    output_truncations: int
    finish_reason: str
    error: str | None
    duration_ms: float
    problem: str
    problem_meta: dict[str, Any]
    trajectory: dict[str, Any]

    @classmethod
    def build(cls, task: Task, index: int, traj: Trajectory, grade: Grade) -> SampleRecord:
        """The record of ``traj`` (sample ``index`` of ``task``) graded as ``grade``."""
        results = [s.result for s in traj.tool_calls if s.result is not None]
        return cls(
            problem_id=task.id, sample_index=index, gold=task.answer,
            extracted=grade.extracted, correct=grade.correct,
            grade_timed_out=grade.timed_out, model_tokens=traj.model_tokens,
            tool_tokens=traj.tool_tokens, prompt_tokens=traj.prompt_length,
            total_tokens=traj.total_tokens, tool_calls=len(results),
            tool_errors=sum(1 for r in results if r.error and not r.timed_out),
            tool_timeouts=sum(1 for r in results if r.timed_out),
            output_truncations=sum(1 for r in results if r.truncated),
            finish_reason=traj.finish_reason, error=traj.error, duration_ms=traj.duration_ms,
            problem=task.problem,
            problem_meta={k: v for k, v in task.meta.items() if k != "solution"},
            trajectory=traj.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The JSONL line."""
        return asdict(self)
