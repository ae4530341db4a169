"""``agentmath report``: compare evaluation runs; write tables, plots and a trajectory viewer.

Prints the comparison table (``--style table|markdown|csv``, or one JSON document with
``--json``) and writes ``comparison.md``, ``comparison.csv``, the PNG plots and ``viewer.html``
into ``--out``. Exit codes: 0 done; 2 a run directory is missing or malformed, or bad usage.
"""

from __future__ import annotations

from pathlib import Path

import typer

from agentmath.cli._common import JSON_OPTION, out_console, print_json, usage_error

STYLES = ("table", "markdown", "csv")
RUN_DIRS_ARGUMENT = typer.Argument(
    ..., metavar="RUN_DIR", help=(
        "Evaluation run directories (config.json, metrics.json, samples.jsonl) and/or RL run "
        "directories (metrics.jsonl: drawn as training curves)."))
OUT_OPTION = typer.Option(
    Path("reports/latest"), "--out", "-o", metavar="DIR",
    help="Directory for the report files (created if needed).")
STYLE_OPTION = typer.Option("table", "--style", metavar="NAME", help=(
    "How the comparison is printed: table, markdown or csv."))
MAX_CHARS_OPTION = typer.Option(
    20_000, "--max-chars", min=200, metavar="N",
    help="Cap on the characters of each text in viewer.html.")


def report(
    run_dirs: list[Path] = RUN_DIRS_ARGUMENT,
    out: Path = OUT_OPTION,
    style: str = STYLE_OPTION,
    max_chars: int = MAX_CHARS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Compare runs: print a table; write comparison.md/.csv, PNG plots and viewer.html."""
    from agentmath.errors import DataError
    from agentmath.report import render_csv, render_markdown, render_rich_table, write_report

    if style not in STYLES:
        usage_error(f"--style must be one of {', '.join(STYLES)}, not {style!r}")
    try:
        written = write_report(run_dirs, out, max_chars=max_chars)
    except DataError as exc:
        usage_error(str(exc))
    except OSError as exc:
        usage_error(f"cannot write the report into {out}: {exc}", code=1)
    rows = written.rows
    if json_out:
        print_json({"rows": rows, "files": written.files()})
        return
    console = out_console()
    if not rows:
        pass
    elif style == "table":
        console.print(render_rich_table(rows, title="Run comparison"))
    else:
        typer.echo(render_markdown(rows) if style == "markdown" else render_csv(rows), nl=False)
    for path in written.paths:
        typer.echo(f"wrote {path}")
