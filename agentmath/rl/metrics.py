"""Per-step metrics of an RL run: a typed record, written as JSONL and to TensorBoard.

``OUT/metrics.jsonl`` gets one JSON object per step (line-buffered, so a kill loses none; on
resume the lines past the checkpoint are cut). ``OUT/tensorboard`` gets the same scalars when
the ``tensorboard`` package is installed (``pip install tensorboard``); ``agentmath report``
draws the curves from the JSONL, so TensorBoard is optional.
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentmath.rl.batch import ScoredGroup, ScoredSample
from agentmath.runs.files import STEP_METRICS_FILE
from agentmath.runs.steplog import read_step_log
from agentmath.train.plumbing import truncate_log

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StepMetrics:
    """Everything logged for one RL step."""

    step: int
    policy_version: int
    stage: int
    temperature: float
    lr: float
    reward_mean: float
    reward_terms: dict[str, float]  # mean of each (unweighted) term
    accuracy: float
    advantage_mean: float
    advantage_std: float
    advantage_abs_mean: float
    loss: float
    clip_frac: float
    is_weight_mean: float
    is_capped_frac: float
    kl: float
    entropy: float
    grad_norm: float
    model_tokens_mean: float
    tool_tokens_mean: float
    loss_tokens: int
    tool_calls_mean: float
    tool_error_rate: float  # errored tool calls / tool calls
    truncation_rate: float
    groups_trained: int
    groups_dropped: int  # dynamic sampling: no reward variance
    samples: int
    samples_per_s: float
    rollout_s: float
    train_s: float
    step_s: float
    stale_dropped: int = 0
    regenerated: int = 0
    parked: int = 0
    # defaults: records written before these existed still load
    tool_call_rate: float = 0.0  # samples with at least one tool call / samples
    pass_rate_dropped: int = 0  # groups: measured pass rate out of bounds (filters)
    void_dropped: int = 0  # samples with a void turn, left out (filters)
    void_groups_dropped: int = 0  # groups left with < 2 samples or no variance by it
    roc_dropped: int = 0  # samples resample-on-correct left out (filters)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_stats(samples: list[ScoredSample]) -> dict[str, Any]:
    """Reward, accuracy, token and tool figures (calls per sample, the fraction of samples
    that made any call, the error rate) over the samples of a step."""
    if not samples:
        return {"reward_mean": 0.0, "reward_terms": {}, "accuracy": 0.0,
                "model_tokens_mean": 0.0, "tool_tokens_mean": 0.0, "tool_calls_mean": 0.0,
                "tool_call_rate": 0.0, "tool_error_rate": 0.0, "truncation_rate": 0.0}
    terms: dict[str, list[float]] = {}
    for s in samples:
        for key, value in s.terms.items():
            terms.setdefault(key, []).append(value)
    calls = sum(len(s.trajectory.tool_calls) for s in samples)
    errors = sum(s.trajectory.num_tool_errors for s in samples)
    return {
        "reward_mean": statistics.fmean(s.reward for s in samples),
        "reward_terms": {k: statistics.fmean(v) for k, v in terms.items()},
        "accuracy": statistics.fmean(float(s.correct) for s in samples),
        "model_tokens_mean": statistics.fmean(s.trajectory.model_tokens for s in samples),
        "tool_tokens_mean": statistics.fmean(s.trajectory.tool_tokens for s in samples),
        "tool_calls_mean": calls / len(samples),
        # interaction collapse (ASTER, arXiv 2602.01204): the policy drifting off the tool
        # shows here first, even while a few samples still make many calls
        "tool_call_rate": statistics.fmean(float(bool(s.trajectory.tool_calls))
                                           for s in samples),
        "tool_error_rate": errors / calls if calls else 0.0,
        "truncation_rate": statistics.fmean(float(s.truncated) for s in samples),
    }


def advantage_stats(groups: list[ScoredGroup]) -> dict[str, float]:
    adv = [s.advantage for g in groups for s in g.samples]
    if not adv:
        return {"advantage_mean": 0.0, "advantage_std": 0.0, "advantage_abs_mean": 0.0}
    return {"advantage_mean": statistics.fmean(adv), "advantage_std": statistics.pstdev(adv),
            "advantage_abs_mean": statistics.fmean(abs(a) for a in adv)}


class MetricsWriter:
    """Appends StepMetrics to ``metrics.jsonl`` and (optionally) TensorBoard."""

    def __init__(self, out_dir: Path, *, tensorboard: bool, resume_step: int) -> None:
        self.path = out_dir / STEP_METRICS_FILE
        truncate_log(self.path, resume_step)
        self._file = self.path.open("a", encoding="utf-8", buffering=1)
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # the package is optional: say so once, keep the JSONL
                log.warning("tensorboard is not installed (pip install tensorboard); "
                            "metrics go to %s only", self.path)
            else:
                self._tb = SummaryWriter(str(out_dir / "tensorboard"), purge_step=resume_step + 1)

    def write(self, metrics: StepMetrics, events: list[dict[str, Any]] | None = None) -> None:
        record = metrics.to_dict()
        if events:
            record["events"] = events
        self._file.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in record.items():
                if isinstance(value, int | float) and key != "step":
                    self._tb.add_scalar(key, value, metrics.step)
            for key, value in metrics.reward_terms.items():
                self._tb.add_scalar(f"reward/{key}", value, metrics.step)
            self._tb.flush()

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl, through the one reader
    (:func:`agentmath.runs.steplog.read_step_log`)."""
    return read_step_log(path)
