"""The typed record of one evaluated sample: one line of ``samples.jsonl``, its one writer and
its one reader.

Built from the rollout engine's trajectory and its grade (:meth:`SampleRecord.build`), written
as :meth:`SampleRecord.to_dict` (the field names are the file format), and read back by every
stage through :meth:`SampleRecord.from_dict` (:func:`read_samples`, :func:`iter_samples`):
the run's resume and metrics, the report's tables, plots and viewer. ``from_dict`` reads every
version of the file written so far: a missing or null count is 0, a record without a
trajectory (hand-written, or trimmed) has ``trajectory=None``, and an older trajectory's meta
keys are read by :meth:`~agentmath.agent.trajectory.Trajectory.from_dict`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agentmath.agent.trajectory import Trajectory
from agentmath.errors import DataError
from agentmath.grading.answer import Grade
from agentmath.jsonl import parse_line
from agentmath.runs.files import RECORD_KEY, SAMPLES_FILE
from agentmath.runs.store import load_records
from agentmath.tasks import Task

_COUNTS = ("model_tokens", "tool_tokens", "prompt_tokens", "total_tokens", "tool_calls",
           "tool_errors", "tool_timeouts", "output_truncations")


@dataclass(slots=True)
class SampleRecord:
    """A graded sample: the grade, the counts metrics need, and the whole trajectory.

    ``correct`` is the grade as stored (true, false, or null for an ungradable row: see
    :attr:`agentmath.grading.Grade.correct`); ``problem_meta`` holds the dataset's own fields
    (level, subject, ...), free-form by nature.
    """

    problem_id: str
    sample_index: int
    gold: str | None = None
    extracted: str | None = None
    correct: bool | None = None
    grade_timed_out: bool = False
    model_tokens: int = 0
    tool_tokens: int = 0
    prompt_tokens: int = 0
    total_tokens: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    tool_timeouts: int = 0
    output_truncations: int = 0
    finish_reason: str | None = None
    error: str | None = None
    duration_ms: float = 0.0
    problem: str | None = None
    problem_meta: dict[str, Any] = field(default_factory=dict)
    trajectory: Trajectory | None = None

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
            # a sandbox failure that was not the model's is an error (retried by
            # --retry-errors), never a wrong answer
            finish_reason=traj.finish_reason, error=traj.error or traj.infra_failure,
            duration_ms=traj.duration_ms,
            problem=task.problem,
            problem_meta={k: v for k, v in task.meta.items() if k != "solution"},
            trajectory=traj)

    @property
    def key(self) -> tuple[str, int]:
        """(problem id, sample index): what identifies a sample in its run."""
        return (self.problem_id, self.sample_index)

    @property
    def is_error(self) -> bool:
        """Whether the sample failed (the episode ended in an error): ``--retry-errors``
        runs it again. Same rule as :func:`agentmath.runs.store.is_error`."""
        return self.finish_reason == "error" or bool(self.error)

    @property
    def grade(self) -> Grade:
        """The grade as recorded (a record keeps the on-disk fields, not the reason)."""
        return Grade.from_record(self.correct, self.extracted, self.grade_timed_out)

    def to_dict(self) -> dict[str, Any]:
        """The JSONL line (the fields in file order; the trajectory as its JSON form)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["problem_meta"] = dict(self.problem_meta)
        data["trajectory"] = self.trajectory.to_dict() if self.trajectory is not None else {}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SampleRecord:
        """A record from its JSON form (any version written so far; see the module doc).

        Raises :class:`DataError` for a record without a problem id or with a malformed
        trajectory."""
        if not isinstance(data, dict) or data.get("problem_id") is None:
            raise DataError("a sample record has no problem_id")
        traj = data.get("trajectory")
        try:
            trajectory = Trajectory.from_dict(traj) if traj else None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise DataError(f"sample {data['problem_id']}#{data.get('sample_index')}: "
                            f"malformed trajectory ({exc})") from exc
        meta = data.get("problem_meta")
        return cls(
            problem_id=str(data["problem_id"]),
            sample_index=int(data["sample_index"]) if data.get("sample_index") is not None
            else -1,
            gold=data.get("gold"), extracted=data.get("extracted"),
            correct=data.get("correct"), grade_timed_out=bool(data.get("grade_timed_out")),
            **{k: int(data.get(k) or 0) for k in _COUNTS},
            finish_reason=data.get("finish_reason"), error=data.get("error"),
            duration_ms=float(data.get("duration_ms") or 0.0), problem=data.get("problem"),
            problem_meta=dict(meta) if isinstance(meta, dict) else {}, trajectory=trajectory)


def read_samples(run_dir: Path) -> list[SampleRecord]:
    """Every record of a run directory's samples.jsonl (a line torn by a kill is cut off, as
    :func:`agentmath.runs.store.load_records` does)."""
    return [SampleRecord.from_dict(r) for r in load_records(run_dir)]


def iter_samples(run_dir: Path) -> Iterator[SampleRecord]:
    """The records one at a time, read-only (for reports over large runs); a malformed line
    is a DataError naming the file and line."""
    path = run_dir / SAMPLES_FILE
    if not path.is_file():
        raise DataError(f"{path}: missing (every run directory needs {SAMPLES_FILE})")
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield SampleRecord.from_dict(parse_line(path, lineno, line, RECORD_KEY))
                except DataError as exc:
                    if str(exc).startswith(str(path)):
                        raise
                    raise DataError(f"{path}:{lineno}: {exc}") from exc
