"""``agentmath synth`` on disk: resumable after kill -9, with nothing lost or duplicated.

A run directory holds ``config.json`` (the config, its identity and the input's fingerprint),
``outcomes.jsonl`` (one line per finished task, appended with one ``write`` each: the record
when kept, else the stage, reason and detail), and, written atomically at the end of every run,
``sft.jsonl`` (the kept records, in input order) and ``funnel.json``. A resumed run skips the
tasks already in ``outcomes.jsonl`` (a line torn by the kill is cut off and its task runs
again), so each task ends up exactly once; ``retry_errors`` runs again the tasks that failed
for infrastructure reasons (:data:`~agentmath.synth.pipeline.RETRYABLE`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmath.backends.base import Backend, SamplingParams
from agentmath.errors import ConfigError, DataError
from agentmath.formats import get_format
from agentmath.runs.fingerprint import dataset_fingerprint
from agentmath.runs.lock import RunLock
from agentmath.runs.store import (
    SampleWriter,
    check_or_write_config,
    load_records,
    write_json_atomic,
    write_jsonl_atomic,
)
from agentmath.sandbox.factory import open_sandbox
from agentmath.synth.config import NATIVE, EndpointConfig, SynthConfig
from agentmath.synth.funnel import Funnel, build_funnel
from agentmath.synth.judge import ConsistencyJudge
from agentmath.synth.pieces import Converter
from agentmath.synth.pipeline import RETRYABLE, Outcome, Pipeline
from agentmath.tasks import Task, load_tasks

OUTCOMES_FILE = "outcomes.jsonl"
RECORDS_FILE = "sft.jsonl"
FUNNEL_FILE = "funnel.json"


@dataclass
class SynthResult:
    """A finished run: its funnel, where the records are, and what this invocation did."""

    funnel: Funnel
    records_path: Path
    resumed: int  # tasks already done before this invocation
    ran: int  # tasks run by this invocation


def load_input(config: SynthConfig) -> list[Task]:
    """The tasks of ``config.input``; ``synthetic:N[:SEED]`` generates them (with steps)."""
    if config.input.startswith("synthetic:"):
        from agentmath.tasks.synthetic import generate_problems

        parts = config.input.split(":")
        try:
            n, seed = int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
        except (IndexError, ValueError):
            raise ConfigError(f"input {config.input!r}: expected synthetic:N[:SEED]") from None
        tasks = generate_problems(n, seed)
        return tasks[: config.limit] if config.limit else tasks
    tasks = load_tasks(config.input, problem_field=config.problem_field,
                       answer_field=config.answer_field, id_field=config.id_field,
                       limit=config.limit, allow_hub=False)
    if config.solution_field != "solution":
        tasks = [Task(t.id, t.problem, t.answer,
                      {**t.meta, "solution": t.meta.get(config.solution_field, "")})
                 for t in tasks]
    return tasks


def make_endpoint(endpoint: EndpointConfig) -> Backend:
    """The backend of a teacher or judge endpoint."""
    from agentmath.backends import make_backend

    if endpoint.backend != "openai":  # a local model (vllm: with its engine settings)
        return make_backend(endpoint.backend, endpoint.model, vllm=endpoint.vllm)
    key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    if endpoint.api_key_env and not key:
        raise ConfigError(f"the environment variable {endpoint.api_key_env} (api_key_env) "
                          "is not set")
    return make_backend("openai", endpoint.model, base_url=endpoint.base_url, api_key=key,
                        timeout_s=endpoint.http_timeout_s, max_retries=endpoint.http_retries,
                        max_concurrency=endpoint.max_concurrency,
                        max_outage_s=endpoint.max_outage_s)


def make_converter(config: SynthConfig, teacher: Backend | None) -> Converter:
    """The converter the config names (the teacher needs its backend)."""
    from agentmath.formats.base import DelimitedFormat
    from agentmath.synth.converters import RuleBasedConverter
    from agentmath.synth.teacher import TeacherConverter, TeacherPrompt

    if config.converter == "rule_based":
        return RuleBasedConverter()
    if teacher is None:
        raise ConfigError("the teacher converter needs a teacher backend")
    fmt = get_format(config.teacher_format)
    if not isinstance(fmt, DelimitedFormat):
        raise ConfigError(f"teacher_format {config.teacher_format!r} is not a text format "
                          "with output blocks")
    prompt = TeacherPrompt.load(config.teacher_prompt) if config.teacher_prompt else None
    return TeacherConverter(teacher, prompt, fmt=fmt, max_tokens=config.teacher.max_tokens,
                            sampling=SamplingParams(temperature=config.teacher.temperature,
                                                    logprobs=False))


def _identity(config: SynthConfig) -> dict[str, Any]:
    identity = config.identity()
    if config.teacher_prompt:  # the prompt's content, not its path, makes the records
        try:
            data = Path(config.teacher_prompt).read_bytes()
        except OSError as exc:
            raise ConfigError(f"teacher_prompt {config.teacher_prompt}: {exc.strerror}") from exc
        identity["teacher_prompt"] = hashlib.sha256(data).hexdigest()[:16]
    return identity


def _load_done(out: Path, retry_errors: bool) -> list[Outcome]:
    done = [Outcome.from_json(r) for r in load_records(out, OUTCOMES_FILE, ("id",))]
    if retry_errors and any(o.reason in RETRYABLE for o in done):
        done = [o for o in done if o.reason not in RETRYABLE]
        write_jsonl_atomic((o.to_json() for o in done), out / OUTCOMES_FILE)
    return done


def _finish(out: Path, tasks: list[Task], outcomes: dict[str, Outcome],
            enabled: tuple[str, ...]) -> Funnel:
    """Write sft.jsonl (kept records in input order) and funnel.json, both atomically."""
    ordered = [outcomes[t.id] for t in tasks if t.id in outcomes]
    write_jsonl_atomic((o.record for o in ordered if o.record is not None), out / RECORDS_FILE)
    funnel = build_funnel(ordered, enabled)
    write_json_atomic(out / FUNNEL_FILE, funnel.to_json())
    return funnel


async def run_synth(config: SynthConfig, out: Path, *, teacher: Backend | None = None,
                    judge: Backend | None = None, retry_errors: bool = False,
                    progress: Callable[[int, int], None] | None = None) -> SynthResult:
    """Run (or resume) the pipeline over ``config.input`` into the directory ``out``.

    ``teacher``/``judge``: the backends (built from the config by the CLI; the judge defaults
    to the teacher). ``progress(done, total)`` is called after every task.
    """
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):
        tasks = load_input(config)
        if len({t.id for t in tasks}) != len(tasks):
            raise DataError(f"{config.input}: duplicate ids")
        check_or_write_config(out, _identity(config), config.model_dump(mode="json"),
                              dataset_fingerprint(tasks))
        done = {o.id: o for o in _load_done(out, retry_errors)}
        todo = [t for t in tasks if t.id not in done]
        fmt = None if config.format == NATIVE else get_format(config.format)
        consistency = None
        if config.checks.consistency:
            consistency = ConsistencyJudge(judge or teacher) if (judge or teacher) else None
            if consistency is None:
                raise ConfigError("checks.consistency is on but no judge backend was given")
        writer = SampleWriter(out, OUTCOMES_FILE)

        def record(task: Task, outcome: Outcome) -> None:
            writer.append(outcome.to_json())
            done[task.id] = outcome
            if progress is not None:
                progress(len(done), len(tasks))

        try:
            async with open_sandbox(config.sandbox, config.sandbox_url,
                                    config.sandbox_token_file) as pool:
                pipeline = Pipeline(make_converter(config, teacher), pool, fmt, config.checks,
                                    consistency, config.system_prompt, config.max_output_chars,
                                    config.snippet_timeout_s, config.self_correction.rate,
                                    config.self_correction.seed)
                if progress is not None:
                    progress(len(done), len(tasks))
                await pipeline.run(todo, concurrency=config.concurrency, on_outcome=record)
        finally:
            writer.close()
        funnel = _finish(out, tasks, done, pipeline.enabled())
    return SynthResult(funnel, out / RECORDS_FILE, len(tasks) - len(todo), len(todo))
