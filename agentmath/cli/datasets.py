"""``agentmath datasets``: list the built-in benchmarks, where each was found, and its hub id."""

from __future__ import annotations

from pathlib import Path

import typer

from agentmath.cli._common import JSON_OPTION, out_console, print_json

#: ``--data-dir``, declared once so that commands loading datasets spell it the same way.
DATA_DIR_OPTION = typer.Option(
    None, "--data-dir", "-d", metavar="DIR",
    help="Directory searched first for built-in dataset files (before $AGENTMATH_DATA_DIR).")


def datasets(
    json_out: bool = JSON_OPTION,
    data_dir: Path | None = DATA_DIR_OPTION,
) -> None:
    """List the built-in benchmarks: row count, the local file found (or missing), hub id.

    Directories are searched in order: `--data-dir`, `$AGENTMATH_DATA_DIR`, `../shared/data`
    next to the repository, `./data`. A missing built-in is loaded from the Hugging Face hub
    when it is used. `--json` prints `{"data_dirs": [...], "datasets": [...]}`.
    """
    from rich.table import Table

    from agentmath.tasks import data_dirs, dataset_summary

    summary = dataset_summary(data_dir)
    searched = [str(d) for d in data_dirs(data_dir)]
    if json_out:
        print_json({"data_dirs": searched, "datasets": summary})
        return
    table = Table(title="Built-in datasets")
    table.add_column("name", style="bold")
    table.add_column("rows", justify="right")
    table.add_column("where found")
    table.add_column("hub id")
    for record in summary:
        rows = "-" if record["rows"] is None else str(record["rows"])
        where = record["path"] or "[yellow]missing[/] (loaded from the hub when used)"
        table.add_row(record["name"], rows, where, record["hub_id"])
    console = out_console()
    console.print(table)
    console.print("searched: " + ", ".join(searched), highlight=False, soft_wrap=True)
