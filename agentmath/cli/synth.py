"""``agentmath synth``: a text-CoT dataset -> verified tool-integrated SFT records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from agentmath import _loop as event_loop
from agentmath.cli._common import (
    JSON_OPTION,
    SET_OPTION,
    build_config,
    checked,
    config_option,
    err_console,
    out_console,
    print_json,
    usage_error,
)
from agentmath.cli._options import GENERATED, config_options

SYNTH_FIELDS = ("converter", "teacher.model", "teacher.base_url", "teacher.backend",
                "teacher_prompt", "judge.model", "judge.base_url", "checks.consistency",
                "format", "self_correction.rate", "problem_field", "answer_field",
                "solution_field", "id_field", "limit", "concurrency", "sandbox_url",
                "sandbox_token_file")
SYNTH_NAMES = {"teacher.model": "--teacher-model", "teacher.base_url": "--teacher-url",
               "teacher.backend": "--teacher-backend", "teacher_prompt": "--prompt",
               "judge.model": "--judge-model", "judge.base_url": "--judge-url",
               "self_correction.rate": "--self-correction"}


CONFIG_OPTION = config_option("SynthConfig", "synth")


@config_options("agentmath.synth.config:SynthConfig", SYNTH_FIELDS, names=SYNTH_NAMES,
                metavars={"teacher_prompt": "FILE", "teacher.model": "MODEL",
                          "judge.model": "MODEL"})
def synth(
    input: str = typer.Argument(..., metavar="INPUT", help=(
        "JSONL/JSON/Parquet file with problem, solution and answer fields (names set by the "
        "--*-field options), a built-in name, or synthetic:N[:SEED].")),
    out: Path = typer.Option(..., "--out", "-o", metavar="DIR",
                             help="Run directory (resumes if it exists)."),
    settings: dict[str, Any] = GENERATED,
    no_checks: list[str] = typer.Option(None, "--no-check", metavar="NAME", help=(
        "Turn a check off: ast, execute, outputs, answer (repeatable).")),
    retry_errors: bool = typer.Option(False, "--retry-errors", metavar="", help=(
        "Run again the tasks that failed for infrastructure reasons (teacher or judge "
        "requests, sandbox failures).")),
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Rewrite every text solution into a tool-integrated trajectory with a teacher model, run
    every snippet in the sandbox, check the result at named stages and write the kept records
    (OUT/sft.jsonl) and the funnel report (OUT/funnel.json); resumable after any kill. The
    teacher's and judge's servers (or model directories) are checked first: exit 1 naming
    what is wrong."""
    from agentmath.errors import AgentMathError

    unknown = set(no_checks or ()) - {"ast", "execute", "outputs", "answer"}
    if unknown:
        usage_error(f"--no-check: unknown check(s) {sorted(unknown)}; "
                    "choose from ast, execute, outputs, answer")
    checks: dict[str, Any] = {name: False for name in no_checks or ()}
    judge = settings.get("judge", {})
    if judge.get("model") and settings.get("checks", {}).get("consistency") is None:
        checks["consistency"] = True  # naming a judge turns its check on
    from agentmath.synth.config import SynthConfig

    config = build_config(SynthConfig, "synth", config_file, sets,
                          {"input": input, **settings,
                           "checks": {**settings.get("checks", {}), **checks}},
                          section="synth")
    if config.judge is not None and not config.judge.model:
        usage_error("a judge needs its model: --judge-model (or judge.model in the config)")
    for endpoint in (config.teacher if config.converter == "teacher" else None, config.judge):
        if endpoint is not None:
            _check_endpoint(endpoint)
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


def _check_endpoint(endpoint: Any) -> None:
    """A teacher's or judge's server (it answers and serves the model), or its local model
    directory and chat template, before any work; exit 1 naming what is wrong."""
    import os

    from agentmath.backends import BackendSettings
    from agentmath.backends.preflight import check_backend

    key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    checked(check_backend, endpoint.backend,
            BackendSettings(endpoint.model, endpoint.base_url, api_key=key))


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
