"""Reporting on evaluation runs: comparison tables, PNG plots and a static trajectory viewer.

``load_run`` reads a run directory (``config.json``, ``metrics.json``, ``samples.jsonl``);
``comparison_rows`` flattens runs into table rows, rendered by ``render_markdown``,
``render_csv`` or ``render_rich_table``; ``make_plots`` (matplotlib, imported lazily) and
``write_viewer`` write files; ``write_report`` writes all of them, as ``agentmath report``
does from the command line.
"""

from __future__ import annotations

from agentmath.report.bundle import ReportResult, write_report
from agentmath.report.plots import make_plots
from agentmath.report.tables import (
    Run,
    comparison_rows,
    load_run,
    render_csv,
    render_markdown,
    render_rich_table,
)
from agentmath.report.viewer import write_viewer

__all__ = ["ReportResult", "Run", "comparison_rows", "load_run", "make_plots", "render_csv",
           "render_markdown", "render_rich_table", "write_report", "write_viewer"]
