"""``agentmath eval``: evaluate a model with tools on a benchmark, resumably."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from agentmath.eval.results import EvalProgress, EvalResult

from agentmath import _loop as event_loop
from agentmath.cli._common import (
    JSON_OPTION,
    RAY_OPTION,
    RAY_WORKERS_OPTION,
    SANDBOX_TOKEN_OPTION,
    SANDBOX_URL_OPTION,
    build_config,
    err_console,
    out_console,
    print_json,
    ray_section,
    stdout_for_json,
    usage_error,
    with_trained_prompt,
)


def eval_command(
    dataset: str = typer.Option(None, help="math500 | aime24 | aime25 | hmmt25 | gsm8k | amc23, "
                                "a JSONL/JSON/Parquet file, or a hub id (required here or in "
                                "--config)."),
    model: str = typer.Option(None, help="Served model name (openai) or model directory "
                              "(required here or in --config)."),
    out: Path = typer.Option(..., "--out", "-o", help="Run directory (resumes if it exists)."),
    backend: str = typer.Option(None, help="openai | hf | vllm (default openai)."),
    base_url: list[str] = typer.Option(None, "--base-url", help=(
        "OpenAI-compatible server URL; repeat it to spread samples over several servers "
        "(prefix-aware router).")),
    fmt: str = typer.Option(None, "--format", help="Tool format (default code_interpreter)."),
    samples: int = typer.Option(None, help="Samples per problem (default 1)."),
    concurrency: int = typer.Option(None, help="Samples in flight (default 32)."),
    temperature: float = typer.Option(None, help="Sampling temperature (default 0.7)."),
    top_p: float = typer.Option(None, "--top-p", help="Nucleus sampling (default 1.0)."),
    seed: int = typer.Option(None, help="Base seed (default 0)."),
    limit: int = typer.Option(None, help="Only the first N problems."),
    data_dir: str = typer.Option(None, "--data-dir", help="Where built-in datasets live."),
    problem_field: str = typer.Option(None, "--problem-field", help="Custom data field."),
    answer_field: str = typer.Option(None, "--answer-field", help="Custom data field."),
    id_field: str = typer.Option(None, "--id-field", help="Custom data field."),
    max_tool_calls: int = typer.Option(None, "--max-tool-calls", help="Per episode."),
    max_model_tokens: int = typer.Option(None, "--max-model-tokens", help="Per episode."),
    system_prompt: str = typer.Option(None, "--system-prompt", help="Default: the format's."),
    retry_errors: bool = typer.Option(None, "--retry-errors/--no-retry-errors", help=(
        "Run again the samples recorded as errors (e.g. during a server outage); the new "
        "records replace the old ones.")),
    http_retries: int = typer.Option(None, "--http-retries", metavar="N", help=(
        "Retries of a failed server request, with backoff and Retry-After (default 4).")),
    http_timeout: float = typer.Option(None, "--http-timeout", metavar="SECONDS", help=(
        "Time limit of one server request (default 120).")),
    max_outage: float = typer.Option(None, "--max-outage", metavar="SECONDS", help=(
        "How long samples wait for an unreachable model server to come back before they "
        "fail (default 300; 0: no waiting).")),
    grade_timeout: float = typer.Option(None, "--grade-timeout", metavar="SECONDS", help=(
        "Grading limit per sample, extraction and verification together (default 10).")),
    sandbox_url: list[str] = SANDBOX_URL_OPTION,
    sandbox_token_file: Path = SANDBOX_TOKEN_OPTION,
    ray: str = RAY_OPTION,
    ray_workers: int = RAY_WORKERS_OPTION,
    config_file: Path = typer.Option(None, "--config", "-c", help="EvalConfig file (TOML/YAML)."),
    sets: list[str] = typer.Option(None, "--set", "-s", help="Override a field: key=value."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Run every sample of every problem through the agent loop and the sandbox; write
    samples.jsonl (resumable after any interruption), config.json and metrics.json."""
    from agentmath.backends import build_backend
    from agentmath.errors import AgentMathError
    from agentmath.eval.config import EvalConfig
    from agentmath.eval.runner import backend_settings

    config = build_config(EvalConfig, "eval", config_file, sets, {
        "dataset": dataset, "model": model, "backend": backend,
        "base_url": (base_url[0] if len(base_url) == 1 else list(base_url)) if base_url else None,
        "format": fmt, "samples": samples, "concurrency": concurrency,
        "temperature": temperature, "top_p": top_p, "seed": seed, "limit": limit,
        "data_dir": data_dir, "problem_field": problem_field, "answer_field": answer_field,
        "id_field": id_field, "retry_errors": retry_errors, "http_retries": http_retries,
        "http_timeout_s": http_timeout, "max_outage_s": max_outage,
        "grade_timeout_s": grade_timeout,
        "sandbox_url": list(sandbox_url) if sandbox_url else None,
        "sandbox_token_file": str(sandbox_token_file) if sandbox_token_file else None,
        "loop": {"max_tool_calls": max_tool_calls, "max_model_tokens": max_model_tokens,
                 "system_prompt": system_prompt},
        "ray": ray_section(ray, ray_workers)})
    if config.backend in ("hf", "vllm"):  # a local model directory (a served name has none)
        config = with_trained_prompt(config)
    try:  # with --ray the workers build their own clients (an hf model is not loaded here)
        engine = None if config.ray is not None else build_backend(
            config.backend, backend_settings(config))
    except (AgentMathError, ValueError) as exc:
        usage_error(str(exc))
    try:
        with stdout_for_json(json_out):
            metrics = event_loop.run(_run(config, out, engine, quiet=json_out)).metrics
    except AgentMathError as exc:
        usage_error(str(exc))
    except OSError as exc:  # the run directory cannot be written: say so, no traceback
        usage_error(f"{out}: {exc.strerror or exc}", code=1)
    if json_out:
        print_json(metrics.to_dict())
        return
    from rich.table import Table

    from agentmath.eval.metrics import metrics_table_rows

    table = Table(title=f"{config.dataset} · {config.model} · {config.format}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics_table_rows(metrics):
        table.add_row(name, value)
    out_console().print(table)
    errors = metrics.n_errors
    if errors:
        out_console().print(f"{errors} sample(s) ended in an error (see 'error' in "
                            f"samples.jsonl); run again with --retry-errors to retry them")
    out_console().print(f"run directory: {out}")


async def _run(config: Any, out: Path, engine: Any, quiet: bool) -> EvalResult:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from agentmath.eval.runner import run_eval

    progress = Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[stats]}"), console=err_console(),
                        disable=quiet, transient=False)
    task = progress.add_task("eval", total=None, stats="")

    def update(p: EvalProgress) -> None:
        errors = f" · {p.errors} errors" if p.errors else ""
        progress.update(task, completed=p.done, total=p.total,
                        stats=f"acc {p.accuracy:.1%} · {p.rate:.2f} samples/s{errors}")

    try:
        with progress:
            return await run_eval(config, out, engine, progress=update)
    finally:
        if engine is not None:
            await engine.aclose()
