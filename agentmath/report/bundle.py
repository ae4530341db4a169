"""Write a whole report for some runs: comparison.md/.csv, PNG plots and viewer.html, and the
training curves of RL runs (agentmath/report/curves.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmath.report.plots import make_plots
from agentmath.report.tables import comparison_rows, load_run, render_csv, render_markdown
from agentmath.report.viewer import write_viewer


@dataclass(frozen=True, slots=True)
class ReportResult:
    """What :func:`write_report` wrote: the comparison rows (one per evaluation run, the
    table's columns as keys) and the files (None: not written, e.g. no evaluation runs)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    markdown: Path | None = None
    csv: Path | None = None
    plots: list[Path] = field(default_factory=list)
    viewer: Path | None = None

    @property
    def paths(self) -> list[Path]:
        """Every file written, in the order they are listed to a user."""
        return [p for p in (self.markdown, self.csv, *self.plots, self.viewer) if p is not None]

    def files(self) -> dict[str, Any]:
        """The paths as JSON-ready strings (``plots`` a list), for ``--json`` and summaries."""
        def text(path: Path | None) -> str | None:
            return None if path is None else str(path)

        return {"markdown": text(self.markdown), "csv": text(self.csv),
                "plots": [str(p) for p in self.plots], "viewer": text(self.viewer)}


def write_report(run_dirs: Sequence[str | Path], out: str | Path,
                 max_chars: int = 20_000) -> ReportResult:
    """Load the runs and write every report file into ``out``; returns rows and paths.

    Raises :class:`~agentmath.errors.DataError` for a malformed run and ``OSError`` when the
    files cannot be written.
    """
    from agentmath.report.curves import curves_for_dirs, is_training_run

    out = Path(out)
    training = [p for p in run_dirs if is_training_run(p)]
    runs = [load_run(path) for path in run_dirs if path not in training]
    curves = [curves_for_dirs(training, out)] if training else []
    if not runs:  # training runs only: their curves are the report
        return ReportResult(plots=curves)
    rows = comparison_rows(runs)
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "comparison.md"
    markdown.write_text(render_markdown(rows), encoding="utf-8")
    csv = out / "comparison.csv"
    csv.write_text(render_csv(rows), encoding="utf-8")
    plots = make_plots(runs, out) + curves
    viewer = write_viewer(runs, out, max_chars=max_chars)
    return ReportResult(rows=rows, markdown=markdown, csv=csv, plots=plots, viewer=viewer)
