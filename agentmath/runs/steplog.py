"""Which run directories are RL runs: those holding a step log, ``metrics.jsonl`` (one JSON
object per step, written by the RL trainer through its metrics sink, :mod:`agentmath.tracking`,
and read back, typed, by its one reader :func:`agentmath.rl.records.read_steps`)."""

from __future__ import annotations

from pathlib import Path

from agentmath.runs.files import METRICS_FILE, STEP_METRICS_FILE


def is_training_run(path: str | Path) -> bool:
    """A directory written by ``agentmath rl`` (metrics.jsonl, no evaluation metrics.json)."""
    path = Path(path)
    return (path / STEP_METRICS_FILE).is_file() and not (path / METRICS_FILE).is_file()
