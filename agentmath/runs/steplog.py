"""The one reader of an RL run's ``metrics.jsonl`` (one JSON object per step, written by
the RL trainer through its metrics sink, :mod:`agentmath.tracking`): the report's training
curves, the tests and the benchmarks all read step records through :func:`read_step_log`
(typed: :func:`agentmath.rl.records.read_steps`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentmath.errors import DataError
from agentmath.runs.files import METRICS_FILE, STEP_METRICS_FILE


def is_training_run(path: str | Path) -> bool:
    """A directory written by ``agentmath rl`` (metrics.jsonl, no evaluation metrics.json)."""
    path = Path(path)
    return (path / STEP_METRICS_FILE).is_file() and not (path / METRICS_FILE).is_file()


def read_step_log(path: str | Path) -> list[dict[str, Any]]:
    """The step records of ``path`` (a ``metrics.jsonl``, or the run directory holding one);
    a bad line is a DataError naming the file and line. The records stay JSON objects: their
    keys are the step metrics' field names (:class:`agentmath.rl.metrics.StepMetrics`) plus
    ``events`` and the reward terms, which vary by run."""
    file = Path(path)
    if file.is_dir():
        file = file / STEP_METRICS_FILE
    rows = []
    for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{file}:{lineno}: not JSON: {exc.msg}") from exc
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise DataError(f"{file}:{lineno}: field 'step': a step record needs an integer")
        rows.append(row)
    return rows
