"""Shared by the benchmark scripts: printing a result table."""

from __future__ import annotations

from collections.abc import Sequence


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print ``rows`` under ``columns`` as a rich table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console(width=max(100, sum(len(c) + 6 for c in columns))).print(table)
