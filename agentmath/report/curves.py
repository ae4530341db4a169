"""Training curves of RL runs (``OUT/metrics.jsonl`` of ``agentmath rl``), one PNG.

A panel per quantity a researcher watches during agentic GRPO: reward (and each reward term),
accuracy, entropy, clip fraction and importance weights, KL, model tokens, tool calls, the
fraction of samples that called the tool at all (interaction collapse shows there) and the tool
error rate, truncation rate, dropped groups and throughput; stage changes are dashed vertical
lines on every panel. Several runs share the panels (one colour each), so an ablation is read
at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentmath.report.plots import _colors, _figure, _save
from agentmath.rl.records import StageMove, StepMetrics, read_steps
from agentmath.runs.steplog import is_training_run

__all__ = ["PANELS", "TRAINING_CURVES", "is_training_run", "plot_training_curves"]

TRAINING_CURVES = "training_curves.png"
PANELS: tuple[tuple[str, str], ...] = (
    ("reward_mean", "reward (mean)"), ("accuracy", "accuracy (rollouts)"),
    ("entropy", "entropy"), ("clip_frac", "clip fraction"), ("kl", "KL to reference"),
    ("model_tokens_mean", "model tokens / sample"), ("tool_calls_mean", "tool calls / sample"),
    ("tool_call_rate", "samples with a tool call"), ("tool_error_rate", "tool error rate"),
    ("truncation_rate", "truncation rate"),
    ("groups_dropped", "groups dropped (no signal)"), ("samples_per_s", "samples / s"),
    ("temperature", "temperature"),
)


def plot_training_curves(runs: dict[str, list[StepMetrics]], out_dir: str | Path,
                         name: str = TRAINING_CURVES) -> Path:
    """One figure of :data:`PANELS`, every run in its own colour; stage changes dashed."""
    cols = 3
    rows = -(-len(PANELS) // cols)
    fig = _figure(4.2 * cols, 2.6 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    colors = _colors(len(runs))
    for ax, (key, title) in zip(axes, PANELS, strict=False):
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
        for color, (label, records) in zip(colors, runs.items(), strict=False):
            points = [(r.step, v) for r in records
                      if (v := r.scalars().get(key)) is not None]  # absent in older lines
            if points:
                ax.plot(*zip(*points, strict=True), color=color, lw=1.2, label=label)
            for r in records:
                if any(isinstance(event, StageMove) for event in r.events):
                    ax.axvline(r.step, color=color, ls="--", lw=0.8)
    for ax in axes[len(PANELS):]:
        ax.axis("off")
    axes[0].legend(fontsize=7)
    fig.supxlabel("RL step", fontsize=9)
    return _save(fig, Path(out_dir) / name)


def curves_for_dirs(run_dirs: Sequence[str | Path], out_dir: str | Path) -> Path:
    """Load the training runs in ``run_dirs`` (named by their directory) and plot them."""
    runs = {Path(p).name or str(p): read_steps(p) for p in run_dirs}
    return plot_training_curves(runs, out_dir)
