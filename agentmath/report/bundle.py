"""Write a whole report for some runs: comparison.md/.csv, PNG plots and viewer.html, and the
training curves of RL runs (agentmath/report/curves.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentmath.report.plots import make_plots
from agentmath.report.tables import comparison_rows, load_run, render_csv, render_markdown
from agentmath.report.viewer import write_viewer


def write_report(run_dirs: Sequence[str | Path], out: str | Path,
                 max_chars: int = 20_000) -> dict[str, Any]:
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
        return {"rows": [], "markdown": None, "csv": None, "plots": curves, "viewer": None}
    rows = comparison_rows(runs)
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "comparison.md"
    markdown.write_text(render_markdown(rows), encoding="utf-8")
    csv = out / "comparison.csv"
    csv.write_text(render_csv(rows), encoding="utf-8")
    plots = make_plots(runs, out) + curves
    viewer = write_viewer(runs, out, max_chars=max_chars)
    return {"rows": rows, "markdown": markdown, "csv": csv, "plots": plots, "viewer": viewer}


def report_files(written: dict[str, Any]) -> dict[str, Any]:
    """The paths of :func:`write_report`'s result as JSON-ready strings (``plots`` a list)."""
    def text(path: Any) -> str | None:
        return None if path is None else str(path)

    return {"markdown": text(written["markdown"]), "csv": text(written["csv"]),
            "plots": [str(p) for p in written["plots"]], "viewer": text(written["viewer"])}
