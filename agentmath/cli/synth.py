"""``agentmath synth``: a text-CoT dataset -> verified tool-integrated SFT records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from agentmath import _loop as event_loop
from agentmath.cli._common import (
    JSON_OPTION,
    SANDBOX_TOKEN_OPTION,
    SANDBOX_URL_OPTION,
    build_config,
    err_console,
    out_console,
    print_json,
    usage_error,
)


def synth(
    input: str = typer.Argument(..., help=(
        "JSONL/JSON/Parquet file with problem, solution and answer fields (names set by the "
        "--*-field options), a built-in name, or synthetic:N[:SEED].")),
    out: Path = typer.Option(..., "--out", "-o", help="Run directory (resumes if it exists)."),
    converter: str = typer.Option(None, help="teacher (default) | rule_based."),
    teacher_model: str = typer.Option(None, "--teacher-model", help="Teacher model name/path."),
    teacher_url: str = typer.Option(None, "--teacher-url", help=(
        "OpenAI-compatible server of the teacher (any hosted or local server).")),
    teacher_backend: str = typer.Option(None, "--teacher-backend", help="openai | hf | vllm."),
    prompt: Path = typer.Option(None, "--prompt", help=(
        "Teacher prompt file (TOML/YAML/JSON: system, user, examples).")),
    judge_model: str = typer.Option(None, "--judge-model", help=(
        "Consistency judge (turns the consistency check on); default: the teacher.")),
    judge_url: str = typer.Option(None, "--judge-url", help="Server of the judge."),
    consistency: bool = typer.Option(None, "--consistency/--no-consistency", help=(
        "Ask the judge whether the reasoning follows from each real output (default off).")),
    fmt: str = typer.Option(None, "--format", help=(
        "Tool format of the records (default code_interpreter), or 'native' for chat records.")),
    self_correction: float = typer.Option(None, "--self-correction", metavar="RATE", help=(
        "Fraction of trajectories given a self-correction turn (default 0).")),
    no_checks: list[str] = typer.Option(None, "--no-check", help=(
        "Turn a check off: ast, execute, outputs, answer (repeatable).")),
    problem_field: str = typer.Option(None, "--problem-field", help="Default: problem."),
    answer_field: str = typer.Option(None, "--answer-field", help="Default: answer."),
    solution_field: str = typer.Option(None, "--solution-field", help="Default: solution."),
    id_field: str = typer.Option(None, "--id-field", help="Default: id (else the row index)."),
    limit: int = typer.Option(None, help="Only the first N rows."),
    concurrency: int = typer.Option(None, help="Tasks in flight (default 16)."),
    retry_errors: bool = typer.Option(False, "--retry-errors", help=(
        "Run again the tasks that failed for infrastructure reasons (teacher or judge "
        "requests, sandbox failures).")),
    sandbox_url: list[str] = SANDBOX_URL_OPTION,
    sandbox_token_file: Path = SANDBOX_TOKEN_OPTION,
    config_file: Path = typer.Option(None, "--config", "-c", help="SynthConfig file."),
    sets: list[str] = typer.Option(None, "--set", "-s", help="Override a field: key=value."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Rewrite every text solution into a tool-integrated trajectory with a teacher model, run
    every snippet in the sandbox, check the result at named stages and write the kept records
    (OUT/sft.jsonl) and the funnel report (OUT/funnel.json); resumable after any kill."""
    from agentmath.errors import AgentMathError
    from agentmath.synth.config import SynthConfig

    unknown = set(no_checks or ()) - {"ast", "execute", "outputs", "answer"}
    if unknown:
        usage_error(f"--no-check: unknown check(s) {sorted(unknown)}; "
                    "choose from ast, execute, outputs, answer")
    checks: dict[str, Any] = {name: False for name in no_checks or ()}
    if consistency is not None or judge_model:
        checks["consistency"] = True if consistency is None else consistency
    judge = {"model": judge_model, "base_url": judge_url} if judge_model else None
    config = build_config(SynthConfig, "synth", config_file, sets, {
        "input": input, "converter": converter, "teacher_prompt": str(prompt) if prompt else None,
        "teacher": {"model": teacher_model, "base_url": teacher_url, "backend": teacher_backend},
        "judge": judge, "format": fmt, "checks": checks,
        "self_correction": {"rate": self_correction}, "problem_field": problem_field,
        "answer_field": answer_field, "solution_field": solution_field, "id_field": id_field,
        "limit": limit, "concurrency": concurrency,
        "sandbox_url": list(sandbox_url) if sandbox_url else None,
        "sandbox_token_file": str(sandbox_token_file) if sandbox_token_file else None})
    try:
        result = event_loop.run(_run(config, out, retry_errors, quiet=json_out))
    except AgentMathError as exc:
        usage_error(str(exc))
    except OSError as exc:
        usage_error(f"{out}: {exc.strerror or exc}", code=1)
    funnel = result.funnel
    if json_out:
        print_json({**funnel.to_json(), "records": str(result.records_path),
                    "resumed": result.resumed, "ran": result.ran})
        return
    from agentmath.synth.funnel import funnel_table

    out_console().print(funnel_table(funnel))
    out_console().print(f"{funnel.kept} records: {result.records_path} "
                        f"(funnel: {out / 'funnel.json'})")


async def _run(config: Any, out: Path, retry_errors: bool, quiet: bool) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from agentmath.synth.run import make_endpoint, run_synth

    teacher = make_endpoint(config.teacher) if config.converter == "teacher" else None
    judge = make_endpoint(config.judge) if config.judge is not None else None
    progress = Progress(TextColumn("[bold]synth"), BarColumn(), MofNCompleteColumn(),
                        console=err_console(), disable=quiet)
    bar = progress.add_task("synth", total=None)
    try:
        with progress:
            return await run_synth(config, out, teacher=teacher, judge=judge,
                                   retry_errors=retry_errors,
                                   progress=lambda done, total: progress.update(
                                       bar, completed=done, total=total))
    finally:
        for backend in {id(b): b for b in (teacher, judge) if b is not None}.values():
            await backend.aclose()
