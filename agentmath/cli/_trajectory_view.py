"""Readable terminal rendering of a trajectory: reasoning, highlighted code, outputs, answer."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text


def render_trajectory(traj: Any, console: Console, gold: str | None = None) -> None:
    """Print a trajectory: the model's text, each code call with its output, then a summary."""
    for seg in traj.segments:
        if seg.source == "model":
            console.print(Text(seg.text.rstrip(), style="white"))
        elif seg.source == "tool" and seg.result is not None:
            res = seg.result
            parts: list[Any] = [Syntax(seg.code or "", "python", theme="ansi_dark",
                                       line_numbers=False)]
            body = seg.text.strip()
            style = "red" if res.error else "green"
            parts.append(Text(body, style=style))
            title = f"tool call · {res.duration_ms:.1f} ms" + (" · timed out" if
                                                              res.timed_out else "")
            console.print(Panel(Group(*parts), title=title, border_style=style))
    answer = traj.answer if traj.answer is not None else "(none)"
    line = (f"[bold]answer:[/] {answer}   [bold]finish:[/] {traj.finish_reason}   "
            f"[bold]model tokens:[/] {traj.model_tokens}   [bold]tool tokens:[/] "
            f"{traj.tool_tokens}   [bold]tool calls:[/] {len(traj.tool_calls)}   "
            f"[bold]time:[/] {traj.duration_ms / 1000:.2f} s")
    if gold is not None:
        line += f"   [bold]gold:[/] {gold}"
    if traj.error:
        line += f"\n[bold red]error:[/] {traj.error}"
    console.print(line)
