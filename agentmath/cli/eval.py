"""``agentmath eval``: evaluate a model with tools on a benchmark, resumably."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from agentmath.eval.results import EvalProgress, EvalResult

from agentmath import _loop as event_loop
from agentmath.cli._common import (
    ERRORED_SAMPLES_EXIT,
    JSON_OPTION,
    RAY_OPTION,
    RAY_WORKERS_OPTION,
    SET_OPTION,
    build_config,
    checked,
    config_option,
    err_console,
    out_console,
    print_json,
    ray_section,
    stdout_for_json,
    usage_error,
    with_trained_prompt,
)
from agentmath.cli._options import GENERATED, VLLM_FIELDS, config_options

EVAL_FIELDS = (
    "dataset", "model", "backend", "base_url", "device", "format", "samples", "concurrency",
    "temperature", "top_p", "top_k", "seed", "limit", "data_dir", "problem_field",
    "answer_field", "id_field", "loop.max_tool_calls", "loop.max_model_tokens",
    "loop.max_total_tokens", "loop.max_tokens_per_turn", "loop.tool_timeout_s",
    "loop.time_limit_s", "loop.system_prompt", "retry_errors", "http_retries",
    "http_timeout_s", "max_outage_s", "grade_timeout_s", "sandbox_url", "sandbox_token_file",
    # grading: agentmath's leniencies beyond math-verify (agentmath.grading.options)
    "grading.number_words", "grading.plaintext_math", "grading.word_case",
    "grading.multiple_choice", "grading.extraction",
    "truncation_warn_rate", *VLLM_FIELDS)


CONFIG_OPTION = config_option("EvalConfig")


@config_options("agentmath.eval.config:EvalConfig", EVAL_FIELDS)
def eval_command(
    out: Path = typer.Option(..., "--out", "-o", metavar="DIR", help=(
        "Run directory (resumes if it exists).")),
    settings: dict[str, Any] = GENERATED,
    ray: str = RAY_OPTION,
    ray_workers: int = RAY_WORKERS_OPTION,
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Run every sample of every problem through the agent loop and the sandbox; write
    samples.jsonl (resumable after any interruption), config.json and metrics.json. The
    settings marked (identity) must be the same when a run resumes. Before the first sample
    the server (or the model directory and its chat template) is checked: exit 1 naming
    what is wrong. A run that ends with samples recorded as errors exits 3, after writing
    everything (and --json's output); --retry-errors runs them again."""
    from agentmath.backends import build_backend
    from agentmath.backends.preflight import check_backend
    from agentmath.errors import AgentMathError
    from agentmath.eval.config import EvalConfig
    from agentmath.eval.runner import backend_settings

    config = build_config(EvalConfig, "eval", config_file, sets,
                          {**settings, "ray": ray_section(ray, ray_workers)})
    served = config.backend == "openai"
    if not served:  # a local model: checked before it loads (a missing one fails fast)
        checked(check_backend, config.backend, backend_settings(config))
    if config.backend in ("hf", "vllm"):  # a local model directory (a served name has none)
        config = with_trained_prompt(config)
    try:  # with --ray the workers build their own clients (an hf model is not loaded here)
        engine = None if config.ray is not None else build_backend(
            config.backend, backend_settings(config))
    except (AgentMathError, ValueError) as exc:
        usage_error(str(exc))
    if served:  # servers: after the build, which checks their URLs (no request sent yet)
        checked(check_backend, config.backend, backend_settings(config))
    try:
        with stdout_for_json(json_out):
            metrics = event_loop.run(_run(config, out, engine, quiet=json_out)).metrics
    except AgentMathError as exc:
        usage_error(str(exc))
    except OSError as exc:  # the run directory cannot be written: say so, no traceback
        usage_error(f"{out}: {exc.strerror or exc}", code=1)
    _report(config, out, metrics, json_out)
    if metrics.n_errors:
        raise typer.Exit(ERRORED_SAMPLES_EXIT)


def _report(config: Any, out: Path, metrics: Any, json_out: bool) -> None:
    """The run's metrics (a table, or one JSON document with ``warnings``) and a warning on
    stderr for each budget that stopped more than ``truncation_warn_rate`` of the samples."""
    from agentmath.eval.truncation import over_rate, warning_text

    cut = over_rate(metrics.truncation, config.truncation_warn_rate)
    for stop in cut:
        err_console().print(f"[bold yellow]warning:[/] {warning_text(stop)}", highlight=False,
                            soft_wrap=True)
    if json_out:
        print_json({**metrics.to_dict(), "warnings": [
            {"kind": "truncation", **stop.to_dict(), "message": warning_text(stop)}
            for stop in cut]})
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
