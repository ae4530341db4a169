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
    # wide enough that no cell wraps (rich otherwise squeezes to 80 columns off a terminal)
    needed = sum(max([len(str(c))] + [len(str(r[i])) for r in rows]) + 3
                 for i, c in enumerate(columns)) + 1
    console = Console()
    if console.width < needed:
        console = Console(width=needed)
    console.print(table)


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
