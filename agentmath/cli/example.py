"""``agentmath example``: a built-in *scripted* tool-integrated solution, run in the sandbox.

It runs the hand-written solution of :mod:`agentmath.tasks.examples` through one sandbox session,
shows the trajectory, and checks the computed answer against the known one: a one-second look
at the sandbox with no model involved (``agentmath demo`` trains real models).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from agentmath.cli._common import (
    JSON_OPTION,
    load_sandbox_config,
    out_console,
    print_json,
    start_sandbox,
    usage_error,
)

DEFAULT_OUT = Path("runs/example")
OUT_OPTION = typer.Option(DEFAULT_OUT, "--out", "-o", metavar="DIR",
                          help="Directory for trajectory.json (created if missing).")
SCRIPTED_NOTE = ("Scripted example: the reasoning and code were written by hand (no model); "
                 "every code cell really runs in the sandbox and the answer is checked.")


def run_example(example: Any, sandbox: Any) -> list[dict[str, Any]]:
    """Run every code cell of ``example`` in one session of ``sandbox``; return the steps."""
    steps: list[dict[str, Any]] = []
    with sandbox.session() as session:
        for step in example.steps:
            result = session.run(step.code).to_dict() if step.code is not None else None
            steps.append({"text": step.text, "code": step.code, "result": result})
    return steps


def summarize(example: Any, steps: list[dict[str, Any]], sandbox: Any,
              timings: dict[str, float]) -> dict[str, Any]:
    """The machine-readable summary of an example run (also written to ``--out``)."""
    from agentmath.tasks.examples import extract_boxed, normalize_answer

    results = [s["result"] for s in steps if s["result"] is not None]
    computed = results[-1]["value"] if results else None
    boxed = extract_boxed(example.final)
    cells_ok = all(r["error"] is None and not r["timed_out"] for r in results)
    expected = normalize_answer(example.answer)
    correct = (cells_ok and normalize_answer(computed) == expected
               and normalize_answer(boxed) == expected)
    cell_ms = [round(r["duration_ms"], 2) for r in results]
    return {
        "example": example.name, "scripted": True, "note": SCRIPTED_NOTE,
        "problem": example.problem, "expected": example.answer, "computed": computed,
        "boxed": boxed, "correct": correct, "steps": steps, "final": example.final,
        "timings_ms": {"sandbox_start": round(timings["start"], 1), "cells": cell_ms,
                       "cells_total": round(sum(cell_ms), 2),
                       "total": round(timings["total"], 1)},
        "protections": sandbox.protections, "notes": sandbox.notes,
    }


def _render_step(console: Any, index: int, step: dict[str, Any]) -> None:
    """Print one step: reasoning text, highlighted code, and what the sandbox returned."""
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.text import Text

    console.print(Text(step["text"]), "")
    if step["code"] is None:
        return
    console.print(Panel(Syntax(step["code"], "python", theme="ansi_dark", word_wrap=True),
                        title=f"cell {index}", title_align="left", border_style="blue"))
    result = step["result"]
    out = Text()
    if result["stdout"]:
        out.append(result["stdout"].rstrip("\n") + "\n")
    if result["stderr"]:
        out.append(result["stderr"].rstrip("\n") + "\n", style="yellow")
    if result["value"] is not None:
        out.append("=> ", style="dim").append(result["value"] + "\n", style="bold")
    if result["error"] is not None:
        out.append(result["error"] + "\n", style="red")
    out.rstrip()
    console.print(Panel(out or Text("(no output)", style="dim"), title="sandbox output",
                        title_align="left", subtitle=f"{result['duration_ms']:.1f} ms",
                        subtitle_align="right", border_style="green" if result["error"] is None
                        and not result["timed_out"] else "red"))


def render(summary: dict[str, Any]) -> None:
    """Show the trajectory, the answer check, timings and protections to a person."""
    from rich.panel import Panel
    from rich.rule import Rule
    from rich.text import Text

    console = out_console()
    console.print(Rule(f"agentmath example: {summary['example']}"))
    console.print(Text(summary["note"], style="italic yellow"), "")
    console.print(Panel(Text(summary["problem"]), title="problem", title_align="left"))
    code_index = 0
    for step in summary["steps"]:
        _render_step(console, code_index, step)
        code_index += step["code"] is not None
    console.print(Panel(Text(summary["final"]), title="final answer", title_align="left",
                        border_style="magenta"))
    verdict = "[bold green]correct[/]" if summary["correct"] else "[bold red]WRONG[/]"
    console.print(f"check: expected {summary['expected']}, computed {summary['computed']}, "
                  f"boxed {summary['boxed']} -> {verdict}", highlight=False)
    t = summary["timings_ms"]
    console.print(f"timings: sandbox start {t['sandbox_start']:.0f} ms, cells "
                  f"{', '.join(f'{ms:.1f}' for ms in t['cells'])} ms "
                  f"(sum {t['cells_total']:.1f} ms), total {t['total']:.0f} ms", highlight=False)
    active = [n for n, on in summary["protections"].items() if on]
    missing = [n for n, on in summary["protections"].items() if not on]
    console.print(f"protections active ({len(active)}/{len(summary['protections'])}): "
                  f"{', '.join(active) or 'none'}", highlight=False)
    if missing:
        console.print(f"[yellow]not active:[/] {', '.join(missing)} (see "
                      "`agentmath sandbox info`)", highlight=False)
    if summary.get("out"):
        console.print(f"trajectory written to {summary['out']}", highlight=False)


def _write(out: Path, summary: dict[str, Any]) -> Path:
    """Write the summary to ``out/trajectory.json``; exit 1 with a message if that fails."""
    path = out / "trajectory.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n",
                        encoding="utf-8")
    except OSError as exc:
        usage_error(f"cannot write the trajectory to {path}: {exc.strerror or exc}", code=1)
    return path


def example(
    out: Path = OUT_OPTION,
    no_out: bool = typer.Option(False, "--no-out", metavar="", help="Write no files."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Solve a built-in example problem with the sandbox and check the answer.

    The solution is a scripted, hand-written tool-integrated trajectory (no model): each code
    cell runs in one sandbox session, then the computed and boxed answers are checked against
    the known answer. Exits 1 if the answer is wrong.
    """
    from agentmath.tasks.examples import DEFAULT_EXAMPLE, EXAMPLES

    example = EXAMPLES[DEFAULT_EXAMPLE]
    config = load_sandbox_config(None, None)
    began = time.perf_counter()
    with start_sandbox(config) as sandbox:
        started = time.perf_counter()
        steps = run_example(example, sandbox)
        timings = {"start": (started - began) * 1000.0,
                   "total": (time.perf_counter() - began) * 1000.0}
        summary = summarize(example, steps, sandbox, timings)
    summary["out"] = None if no_out else str(_write(out, summary))
    if as_json:
        print_json(summary)
    else:
        render(summary)
    if not summary["correct"]:
        raise typer.Exit(1)
