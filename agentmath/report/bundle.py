"""Write a whole report for some runs: comparison.md/.csv, PNG plots and viewer.html."""

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
    out = Path(out)
    runs = [load_run(path) for path in run_dirs]
    rows = comparison_rows(runs)
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "comparison.md"
    markdown.write_text(render_markdown(rows), encoding="utf-8")
    csv = out / "comparison.csv"
    csv.write_text(render_csv(rows), encoding="utf-8")
    plots = make_plots(runs, out)
    viewer = write_viewer(runs, out, max_chars=max_chars)
    return {"rows": rows, "markdown": markdown, "csv": csv, "plots": plots, "viewer": viewer}


def report_files(written: dict[str, Any]) -> dict[str, Any]:
    """The paths of :func:`write_report`'s result as JSON-ready strings (``plots`` a list)."""
    return {"markdown": str(written["markdown"]), "csv": str(written["csv"]),
            "plots": [str(p) for p in written["plots"]], "viewer": str(written["viewer"])}
