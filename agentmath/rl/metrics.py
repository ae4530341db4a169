"""Per-step figures of an RL run: the sample and advantage statistics of a step.

The step's record is :class:`~agentmath.rl.records.StepMetrics` (re-exported here); it leaves
the run through the run's metrics sink (:mod:`agentmath.tracking`: ``OUT/metrics.jsonl``
always, TensorBoard and W&B when configured) and is read back by
:func:`~agentmath.rl.records.read_steps`.
"""

from __future__ import annotations

import statistics
from typing import Any

from agentmath.rl.batch import ScoredGroup, ScoredSample, trainable
from agentmath.rl.records import StepMetrics

__all__ = ["StepMetrics", "advantage_stats", "sample_stats", "staleness_stats"]


def sample_stats(samples: list[ScoredSample]) -> dict[str, Any]:
    """Reward, accuracy, token and tool figures (calls per sample, the fraction of samples
    that made any call, the error rate) over the samples of a step, and how many of them a
    chat template rewrote the history of (``rewritten_episodes``) or training refuses
    (``refused_episodes``: rewritten under ``history_rewrite = "refuse"``, or ids that are
    not what the sampler saw)."""
    if not samples:
        return {"reward_mean": 0.0, "reward_terms": {}, "accuracy": 0.0,
                "model_tokens_mean": 0.0, "tool_tokens_mean": 0.0, "tool_calls_mean": 0.0,
                "tool_call_rate": 0.0, "tool_error_rate": 0.0, "truncation_rate": 0.0,
                "rewritten_episodes": 0, "refused_episodes": 0}
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
        "rewritten_episodes": sum(s.trajectory.history_rewrite is not None for s in samples),
        "refused_episodes": sum(not trainable(s.trajectory) for s in samples),
    }


def advantage_stats(groups: list[ScoredGroup]) -> dict[str, float]:
    adv = [s.advantage for g in groups for s in g.samples]
    if not adv:
        return {"advantage_mean": 0.0, "advantage_std": 0.0, "advantage_abs_mean": 0.0}
    return {"advantage_mean": statistics.fmean(adv), "advantage_std": statistics.pstdev(adv),
            "advantage_abs_mean": statistics.fmean(abs(a) for a in adv)}


def staleness_stats(samples: list[ScoredSample], version: int) -> tuple[int, float]:
    """(largest, mean) staleness of the trained ``samples`` at policy ``version``: how many
    versions behind it the oldest turn of each sample was sampled (0: on-policy). A sample
    whose turns carry no version (a backend that does not say) counts as 0."""
    lags = [version - min(s.trajectory.policy_versions) if s.trajectory.policy_versions else 0
            for s in samples]
    if not lags:
        return 0, 0.0
    return max(lags), statistics.fmean(lags)
