"""Shared by the benchmark scripts: printing a result table, quantiles, the tool model's
evaluation data, an older commit's checkout."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path


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


def tool_model_dataset(model_root: Path, path: Path, n: int) -> Path:
    """A JSONL of ``n`` rows cycling over a grown tool model's held-out problems
    (``model_root/test.jsonl``), ids made unique; written to ``path``."""
    from agentmath.jsonl import read_jsonl

    rows = [{"id": r["id"], "problem": r["problem"], "answer": r["answer"]}
            for r in read_jsonl(model_root / "test.jsonl")]
    rows = [rows[i % len(rows)] | {"id": f"{rows[i % len(rows)]['id']}-{i}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def worktree(rev: str, root: Path) -> Path:
    """A detached git worktree of ``rev`` under ``root`` (made once): an older commit's
    package, run as a baseline by putting the worktree first on PYTHONPATH."""
    path = root / f"worktree-{rev}"
    if not (path / "agentmath").is_dir():
        repo = Path(__file__).resolve().parent.parent
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--force",
                        str(path), rev], check=True, capture_output=True)
    return path
