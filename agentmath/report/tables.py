"""Load evaluation run directories and compare them in tables (rich, markdown, CSV).

A run directory holds ``config.json``, ``metrics.json`` and ``samples.jsonl``. The first two are
read eagerly and checked; samples are read lazily (they can be large) by :meth:`Run.samples`.
Every problem with the files is reported as a :class:`~agentmath.errors.DataError` that names
the file (and the line, for samples).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath.errors import DataError
from agentmath.eval.results import RunInfo, RunMetrics
from agentmath.jsonl import is_number
from agentmath.runs.files import CONFIG_FILE, METRICS_FILE, SAMPLES_FILE
from agentmath.runs.store import read_json_object

if TYPE_CHECKING:
    from rich.table import Table

    from agentmath.eval.records import SampleRecord

#: Metric keys a run must have; the rest of metrics.json is optional.
_REQUIRED_METRICS: tuple[tuple[str, ...], ...] = (
    ("n_problems",), ("n_samples",), ("k",), ("avg", "value"), ("maj", "value"), ("pass",),
)


@dataclass
class Run:
    """One evaluation run: its directory, config and metrics; samples are read on demand.

    ``config`` is what ``config.json`` says about the run; ``metrics`` and the samples are typed.
    """

    path: Path
    config: RunInfo
    metrics: RunMetrics
    _samples: list[SampleRecord] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The run's name from its config, else the directory name."""
        return self.config.name or self.path.name

    def iter_samples(self) -> Iterator[SampleRecord]:
        """Yield sample records from ``samples.jsonl`` one at a time (blank lines skipped);
        the trajectory types load on first use (``import agentmath.report`` stays light)."""
        from agentmath.eval.records import iter_samples

        return iter_samples(self.path)

    def samples(self) -> list[SampleRecord]:
        """All sample records, read once on first use and cached."""
        if self._samples is None:
            self._samples = list(self.iter_samples())
        return self._samples


def _check_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """Raise DataError naming the file and key when a required metric is absent or not numeric."""
    for keys in _REQUIRED_METRICS:
        node: Any = metrics
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                raise DataError(f"{path}: missing key {'.'.join(keys)!r}")
            node = node[key]
        expected_dict = keys == ("pass",)
        ok = isinstance(node, dict) if expected_dict else is_number(node)
        if not ok:
            kind = "an object" if expected_dict else "a number"
            raise DataError(f"{path}: key {'.'.join(keys)!r} must be {kind}, got {node!r}")


def load_run(path: str | Path) -> Run:
    """Load a run directory: read and check ``config.json`` and ``metrics.json``.

    Samples are not read here (see :meth:`Run.samples`). Raises :class:`DataError` naming the
    file when the directory or a file is missing or malformed.
    """
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{root}: not a run directory (expected {CONFIG_FILE}, {METRICS_FILE}, "
                        f"{SAMPLES_FILE})")
    config = read_json_object(root / CONFIG_FILE)
    metrics_path = root / METRICS_FILE
    metrics = read_json_object(metrics_path)
    _check_metrics(metrics_path, metrics)
    return Run(path=root, config=RunInfo.from_dict(config),
               metrics=RunMetrics.from_dict(metrics))


def _pass_keys(runs: Sequence[Run]) -> list[str]:
    """The pass@n keys present in any run, in numeric order."""
    keys = {key for run in runs for key in run.metrics.pass_at}
    return sorted(keys, key=lambda k: (int(k) if k.isdigit() else 10**9, k))


def comparison_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One flat dict per run, with the same keys for all runs (missing values are None).

    Accuracies and rates are fractions in [0, 1]; tokens are means per sample.
    """
    pass_keys = _pass_keys(runs)
    budgets = sorted({s.budget for run in runs for s in run.metrics.truncation})
    rows: list[dict[str, Any]] = []
    for run in runs:
        m, c = run.metrics, run.config
        avg = m.avg
        ci = avg.ci95 if avg is not None and avg.ci95 is not None else (None, None)
        row: dict[str, Any] = {
            "run": run.name, "model": c.model, "format": c.format,
            "dataset": c.dataset, "problems": m.n_problems, "k": m.k,
            "avg": avg.value if avg is not None else None,
            "avg_stderr": avg.stderr if avg is not None else None,
            "avg_ci95_lo": ci[0], "avg_ci95_hi": ci[1],
            "maj": m.maj.value if m.maj is not None else None,
        }
        for key in pass_keys:
            row[f"pass@{key}"] = m.pass_at.get(key)
        row.update({
            "model_tokens_mean": m.tokens.model_mean,
            "model_tokens_median": m.tokens.model_median,
            "total_tokens_mean": m.tokens.total_mean,
            "tool_calls_per_sample": m.tools.calls_per_sample,
            "tool_error_rate": m.tools.error_rate,
            "tool_timeout_rate": m.tools.timeout_rate,
            "duration_ms_mean": m.duration_ms_mean,
            "truncated_rate": m.truncated_rate,
        })
        rates = {s.budget: s.rate for s in m.truncation}
        for budget in budgets:
            row[f"truncated@{budget}"] = rates.get(budget)
        rows.append(row)
    return rows


_PERCENT_KEYS = {"avg", "avg_stderr", "avg_ci95_lo", "avg_ci95_hi", "maj", "tool_error_rate",
                 "tool_timeout_rate", "truncated_rate"}


def _percent(key: str) -> bool:
    """Whether a column holds a fraction shown in percent."""
    return key in _PERCENT_KEYS or key.startswith(("pass@", "truncated@"))


def format_cell(key: str, value: Any) -> str:
    """A value as people read it: accuracies and rates in percent, tokens rounded."""
    if value is None:
        return "-"
    if not is_number(value):
        return str(value)
    if _percent(key):
        return f"{100 * value:.1f}"
    if key in ("tool_calls_per_sample",):
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"
    return str(value)


def _headers(rows: Sequence[dict[str, Any]]) -> list[str]:
    return list(rows[0]) if rows else []


def column_label(key: str) -> str:
    """The column title shown to people: percent columns say so (``avg %``)."""
    return f"{key} %" if _percent(key) else key


def render_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """A GitHub-flavoured markdown table (accuracies and rates in percent)."""
    headers = _headers(rows)
    if not headers:
        return ""

    def cell(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(column_label(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(format_cell(h, row[h])) for h in headers) + " |")
    return "\n".join(lines) + "\n"


def render_csv(rows: Sequence[dict[str, Any]]) -> str:
    """CSV with a header line and raw values (fractions, not percent); None is empty."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=_headers(rows), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


#: Columns of the terminal table (the markdown and CSV files have them all), with short titles.
_COMPACT = {"run": "run", "k": "k", "avg": "avg %", "avg_stderr": "±", "maj": "maj %",
            "model_tokens_mean": "tokens", "tool_calls_per_sample": "calls",
            "tool_error_rate": "err %", "truncated_rate": "cut %"}


def render_rich_table(rows: Sequence[dict[str, Any]], title: str | None = None,
                      full: bool = False) -> Table:
    """A :class:`rich.table.Table` of the rows (accuracies and rates in percent).

    By default it shows a compact set of columns that fits a terminal (pass@k only for the
    largest k); ``full=True`` shows every column.
    """
    from rich.table import Table

    headers = _headers(rows)
    if full:
        columns = {h: column_label(h) for h in headers}
    else:
        passes = [h for h in headers if h.startswith("pass@")]
        columns = {}
        for header, label in _COMPACT.items():
            if header in headers:
                columns[header] = label
            if header == "maj" and passes:  # pass@k for the largest k, after maj
                columns[passes[-1]] = column_label(passes[-1])
    table = Table(title=title, show_lines=False)
    for header, label in columns.items():
        longest = max((len(format_cell(header, row[header])) for row in rows), default=0)
        if any(is_number(row[header]) for row in rows):  # values never wrap; titles may
            table.add_column(label, justify="right", min_width=longest)
        else:
            table.add_column(label, overflow="fold", min_width=min(longest, 16), max_width=40)
    for row in rows:
        table.add_row(*(format_cell(h, row[h]) for h in columns))
    return table
