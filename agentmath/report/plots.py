"""PNG plots comparing runs: accuracy vs tokens, accuracy by level, tool calls per sample.

matplotlib is imported inside the functions (it is slow to import) and used through its
object-oriented API with the Agg canvas, so no GUI backend or pyplot global state is involved.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath.report.tables import Run
from agentmath.runs.files import SAMPLES_FILE

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from agentmath.eval.results import Score

ACCURACY_VS_TOKENS = "accuracy_vs_tokens.png"
ACCURACY_BY_LEVEL = "accuracy_by_level.png"
TOOL_CALLS_HIST = "tool_calls_hist.png"


def _figure(width: float, height: float) -> Figure:
    """A new figure on an Agg canvas (no pyplot, no GUI backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def plot_accuracy_vs_tokens(runs: Sequence[Run], out_dir: Path) -> Path:
    """Scatter of avg@k and maj@k accuracy against mean model tokens, one labelled point each.

    avg points carry a 95% interval (from ``avg.ci95`` when present, else 1.96 stderr).
    """
    fig = _figure(7.0, 4.8)
    ax = fig.add_subplot()
    colors = _colors(len(runs))
    for run, color in zip(runs, colors, strict=True):
        x = run.metrics.tokens.model_mean or 0.0
        avg, maj = run.metrics.avg, run.metrics.maj
        assert avg is not None and maj is not None  # load_run checked both
        err = _interval(avg)
        ax.errorbar([x], [100 * avg.value], yerr=[[100 * err[0]], [100 * err[1]]],
                    fmt="o", color=color, capsize=3, markersize=7)
        ax.plot([x], [100 * maj.value], marker="^", linestyle="none", color=color,
                markersize=8)
        ax.annotate(run.name, (x, 100 * avg.value), textcoords="offset points",
                    xytext=(6, 6), fontsize=8, color=color)
    ax.plot([], [], "o", color="gray", label="avg@k (95% CI)")
    ax.plot([], [], "^", color="gray", label="maj@k")
    ax.legend(loc="best", fontsize=8)
    ax.set_xlabel("mean model tokens per sample")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy vs model tokens")
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.25, y=0.2)
    return _save(fig, out_dir / ACCURACY_VS_TOKENS)


def _interval(stat: Score) -> tuple[float, float]:
    """(below, above) error-bar lengths for an accuracy statistic, as fractions."""
    if stat.ci95 is not None:
        return max(0.0, stat.value - stat.ci95[0]), max(0.0, stat.ci95[1] - stat.value)
    return 1.96 * stat.stderr, 1.96 * stat.stderr


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def level_accuracy(run: Run) -> dict[str, float]:
    """avg accuracy per difficulty level: from ``metrics.by_level``, else from the samples."""
    if run.metrics.by_level:
        return {level: stats.avg.value for level, stats in run.metrics.by_level.items()
                if stats.avg is not None}
    if not (run.path / SAMPLES_FILE).is_file():
        return {}
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for sample in run.iter_samples():
        level = sample.problem_meta.get("level")
        if level is not None:
            totals[str(level)][0] += bool(sample.correct)
            totals[str(level)][1] += 1
    return {level: hit / n for level, (hit, n) in totals.items() if n}


def _level_key(level: str) -> tuple[int, float, str]:
    match = re.search(r"\d+(\.\d+)?", level)
    return (0, float(match.group()), level) if match else (1, 0.0, level)


def plot_accuracy_by_level(runs: Sequence[Run], out_dir: Path) -> Path | None:
    """Grouped bars of avg accuracy per level, one bar per run; None when no run has levels."""
    per_run = [level_accuracy(run) for run in runs]
    levels = sorted({level for acc in per_run for level in acc}, key=_level_key)
    if not levels:
        return None
    fig = _figure(max(6.0, 1.1 * len(levels) * max(1, len(runs)) ** 0.5 + 2), 4.5)
    ax = fig.add_subplot()
    width = 0.8 / len(runs)
    for i, (run, acc, color) in enumerate(zip(runs, per_run, _colors(len(runs)), strict=True)):
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(levels))]
        ys = [100 * acc.get(level, float("nan")) for level in levels]
        ax.bar(xs, ys, width=width, label=run.name, color=color)
    ax.set_xticks(range(len(levels)), [f"level {lv}" for lv in levels])
    ax.set_ylabel("avg accuracy (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Accuracy by level")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, out_dir / ACCURACY_BY_LEVEL)


def tool_call_counts(run: Run) -> Counter[int]:
    """How many samples made 0, 1, 2, ... tool calls."""
    counts: Counter[int] = Counter()
    for sample in run.iter_samples():
        counts[sample.tool_calls] += 1
    return counts


def plot_tool_calls_hist(runs: Sequence[Run], out_dir: Path) -> Path:
    """One histogram of tool calls per sample for each run, stacked vertically, shared x axis."""
    counts = [tool_call_counts(run) for run in runs]
    top = max((max(c) for c in counts if c), default=0)
    fig = _figure(7.0, 1.0 + 2.0 * len(runs))
    axes = fig.subplots(len(runs), 1, sharex=True, squeeze=False)[:, 0]
    for ax, run, count, color in zip(axes, runs, counts, _colors(len(runs)), strict=True):
        xs = list(range(top + 1))
        total = sum(count.values()) or 1
        ax.bar(xs, [100 * count.get(x, 0) / total for x in xs], color=color, width=0.8)
        ax.set_title(f"{run.name}  (n={sum(count.values())})", fontsize=9)
        ax.set_ylabel("% samples")
        ax.grid(True, axis="y", alpha=0.3)
    axes[-1].set_xlabel("tool calls per sample")
    if top <= 25:
        axes[-1].set_xticks(range(top + 1))
    return _save(fig, out_dir / TOOL_CALLS_HIST)


def make_plots(runs: Sequence[Run], out_dir: str | Path) -> list[Path]:
    """Write every plot that applies to ``out_dir``; return the paths of the PNG files."""
    out = Path(out_dir)
    paths = [plot_accuracy_vs_tokens(runs, out)]
    by_level = plot_accuracy_by_level(runs, out)
    if by_level is not None:
        paths.append(by_level)
    paths.append(plot_tool_calls_hist(runs, out))
    return paths
