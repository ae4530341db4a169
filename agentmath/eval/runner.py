"""Evaluation runs: every sample of every problem through the rollout engine (request-level
scheduling, one backend or a router over several servers), recorded as it finishes,
resumable after any interruption.

``run_eval`` takes the run directory's lock (a second run on it is refused, naming the
holder), loads the tasks, saves (or checks) the run's config and the dataset's fingerprint,
skips the (problem, sample) pairs already in ``samples.jsonl`` (with ``retry_errors``, the
errored ones are dropped first and run again), runs the rest with at most ``concurrency`` in
flight, grades each response against the gold (extraction and math-verify under one hard
timeout), appends the record at once, and finally writes ``metrics.json``. Each sample's seed
derives from the run seed, the problem id and the sample index, so a resumed run samples the
same way as an uninterrupted one.

A sample that fails in any way (the model server, a malformed reply, a bug) is recorded as a
failed sample with the error's type and message; it never stops the run or loses the samples
already finished. Only cancellation (Ctrl-C) stops it.
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath import __version__
from agentmath.agent.trajectory import Trajectory
from agentmath.backends.base import Backend, SamplingParams
from agentmath.backends.registry import BackendSettings
from agentmath.config import LoopConfig, RolloutConfig, SandboxConfig
from agentmath.eval.config import EvalConfig
from agentmath.eval.records import SampleRecord, read_samples
from agentmath.eval.results import EvalProgress, EvalResult, RunMetrics
from agentmath.formats import get_format
from agentmath.grading.options import GradingOptions
from agentmath.rollout.records import GroupRequest, Sample
from agentmath.rollout.scheduler import RolloutEngine, SamplingFn
from agentmath.runs.files import EVAL_LOG_FILE
from agentmath.runs.fingerprint import dataset_fingerprint
from agentmath.runs.lock import RunLock
from agentmath.runs.store import (
    METRICS_FILE,
    SampleWriter,
    check_or_write_config,
    drop_errors,
    load_records,
    unique_records,
    write_json_atomic,
)
from agentmath.sandbox.client import SandboxClient
from agentmath.sandbox.factory import open_sandbox
from agentmath.seeding import eval_sample_seed
from agentmath.tasks import Task
from agentmath.tracking import MetricsSink, open_sink

if TYPE_CHECKING:
    from agentmath.distributed.engine import RayRolloutEngine
    from agentmath.distributed.worker import WorkerSpec

ProgressFn = Callable[[EvalProgress], None]
log = logging.getLogger(__name__)


def identity(config: EvalConfig) -> dict[str, Any]:
    """The config fields that determine results (what a resumed run must not change)."""
    data = config.model_dump(mode="json")
    out = {k: v for k, v in data.items() if k not in EvalConfig.RESUMABLE_FIELDS}
    out["sandbox"] = {k: v for k, v in out["sandbox"].items()
                      if k not in SandboxConfig.RESUMABLE_FIELDS}
    if not config.sandbox.fault_kill_rate:  # no fault injector: as runs saved before it
        for key in ("fault_kill_rate", "fault_seed"):
            out["sandbox"].pop(key, None)
    if config.grading == GradingOptions():  # the default grader: as runs saved before it
        out.pop("grading", None)
    out["loop"].pop("history_rewrite", None)  # what training does with a sample, not eval
    return out


def _versions() -> dict[str, str]:
    """Versions of the packages that shape results, read from package metadata: importing
    torch and transformers just to read ``__version__`` cost seconds per run."""
    out = {"agentmath": __version__, "python": platform.python_version()}
    for name, dist in (("torch", "torch"), ("transformers", "transformers"), ("vllm", "vllm"),
                       ("math_verify", "math-verify"), ("sympy", "sympy")):
        try:
            out[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


@dataclass
class _Run:
    config: EvalConfig
    writer: SampleWriter
    progress: ProgressFn | None
    sink: MetricsSink | None = None
    done: int = 0
    fresh: int = 0
    correct: int = 0
    errors: int = 0
    total: int = 0
    started: float = 0.0

    def report(self) -> None:
        """Progress to the caller (each sample) and the trackers (about every 1% of the run,
        and its last sample)."""
        elapsed = time.monotonic() - self.started
        progress = EvalProgress(done=self.done, total=self.total, fresh=self.fresh,
                                correct=self.correct, errors=self.errors,
                                rate=self.fresh / elapsed if elapsed else 0.0)
        if self.progress is not None:
            self.progress(progress)
        every = max(1, self.total // 100)
        if self.sink is not None and (self.done % every == 0 or self.done == self.total):
            log_progress(self.sink, progress)


def log_progress(sink: MetricsSink, progress: EvalProgress) -> None:
    """One progress record (``kind: progress``) at step ``done``; its scalars under
    ``progress/``."""
    scalars = progress.scalars()
    sink.log(progress.done, {"step": progress.done, "kind": "progress", **scalars},
             {f"progress/{k}": v for k, v in scalars.items()})


def log_metrics(sink: MetricsSink, step: int, metrics: RunMetrics) -> None:
    """The run's final metrics (``kind: metrics``) at step ``step`` (the samples recorded);
    their scalars under ``metrics/``."""
    scalars = metrics.scalars()
    sink.log(step, {"step": step, "kind": "metrics", **scalars},
             {f"metrics/{k}": v for k, v in scalars.items()})


async def _grade(run: _Run, task: Task, traj: Trajectory) -> SampleRecord:
    """Grade a finished sample through the grading seam (extraction and verification under
    one timeout; an ungradable row or a timeout is an error grade, recorded, never raised)."""
    from agentmath.grading import agrade_answer

    index = int(traj.sample_index)  # type: ignore[arg-type]  # None: a bug, an error record
    grade = await agrade_answer(task.answer, traj.model_text, answer=traj.answer,
                                timeout=run.config.grade_timeout_s,
                                options=run.config.grading)
    return SampleRecord.build(task, index, traj, grade)


def failed_record(task: Task, index: int, exc: BaseException) -> SampleRecord:
    """The record of a sample that raised instead of finishing: an error, never a crash."""
    from agentmath.grading import Grade

    traj = Trajectory(problem=task.problem, finish_reason="error",
                      error=f"{type(exc).__name__} (unexpected, while running this sample): "
                            f"{exc}",
                      problem_id=task.id, sample_index=index)
    return SampleRecord.build(task, index, traj, Grade.error("the sample did not finish"))


async def _record(run: _Run, task: Task, sample: Sample) -> None:
    """Grade, record (at once, durably) and count one finished sample."""
    try:
        record = await _grade(run, task, sample.trajectory)
        line = record.to_dict()
    except Exception as exc:  # noqa: BLE001 - one sample's failure is that sample's record
        log.debug("sample %s/%s failed", task.id, sample.index, exc_info=True)
        record = failed_record(task, sample.index, exc)
        line = record.to_dict()
    run.writer.append(line)
    run.done += 1
    run.fresh += 1
    run.correct += bool(record.correct)
    run.errors += record.is_error
    run.report()


def _load(config: EvalConfig) -> list[Any]:
    """The run's tasks (a DataError names the file, line and field of a bad row)."""
    from agentmath.tasks import load_tasks

    return load_tasks(config.dataset, data_dir=config.data_dir, limit=config.limit,
                      problem_field=config.problem_field, answer_field=config.answer_field,
                      id_field=config.id_field)


def make_sampling(config: EvalConfig) -> SamplingFn:
    """Each sample's sampling: the run's settings, the seed derived from (run seed, problem
    id, sample index), so neither scheduling order nor placement changes a sample."""
    def sampling(request: GroupRequest, index: int) -> SamplingParams:
        return SamplingParams(temperature=config.temperature, top_p=config.top_p,
                              top_k=config.top_k,
                              seed=eval_sample_seed(config.seed, request.task.id, index))

    return sampling


def make_engine(config: EvalConfig, backend: Backend, sandbox: SandboxClient) -> RolloutEngine:
    """The rollout engine of an evaluation: request-level scheduling, ``concurrency`` samples
    in flight, each sample's seed from :func:`make_sampling`."""
    return RolloutEngine(backend, sandbox, get_format(config.format), loop=config.loop,
                         config=RolloutConfig(max_in_flight=config.concurrency),
                         sampling=make_sampling(config))


async def _run_todo(run: _Run, engine: RolloutEngine | RayRolloutEngine,
                    todo: list[GroupRequest]) -> None:
    """Every pending sample through the engine, each recorded the moment it is graded.
    Should one fail to be recorded (a full disk), or the run be cancelled, the rest is
    cancelled and awaited before this returns, so nothing writes to the run directory after."""
    tasks = {request.group_id: request.task for request in todo}

    async def on_sample(sample: Sample) -> None:
        await _record(run, tasks[sample.group_id], sample)

    async for _group in engine.stream(todo, on_sample=on_sample):
        pass


def backend_settings(config: EvalConfig) -> BackendSettings:
    """What the run's backend is built from (by the CLI here, or by each Ray worker): the
    model, its server URLs, the HTTP retries, timeout and outage bound (a backend that talks to
    no server ignores those), the device of a model run in process and the offline vLLM
    engine's settings."""
    return BackendSettings(config.model, config.base_url, max_retries=config.http_retries,
                           timeout_s=config.http_timeout_s, max_outage_s=config.max_outage_s,
                           device=config.device, vllm=config.vllm)


def worker_spec(config: EvalConfig) -> WorkerSpec:
    """What each Ray rollout worker needs to run this evaluation's episodes."""
    from agentmath.distributed.worker import WorkerSpec

    return WorkerSpec(backend=config.backend, settings=backend_settings(config),
                      format=config.format, loop=config.loop,
                      sandbox=config.sandbox, sandbox_url=config.sandbox_url,
                      sandbox_token_file=(str(config.sandbox_token_file)
                                          if config.sandbox_token_file else None))


async def _run_todo_ray(run: _Run, todo: list[GroupRequest]) -> None:
    """Every pending sample on the Ray cluster of ``run.config.ray``; recorded here, on the
    driver, as each comes back (so a lost node or a killed driver loses no finished one)."""
    from agentmath.distributed.engine import RayRolloutEngine

    config = run.config
    assert config.ray is not None
    engine = RayRolloutEngine(worker_spec(config), config.ray, make_sampling(config),
                              max_in_flight=config.concurrency)
    try:
        await engine.start()
        await _run_todo(run, engine, todo)
    finally:
        await engine.close()


async def _run_pending(run: _Run, todo: list[GroupRequest], backend: Backend | None,
                       sandbox: SandboxClient | None) -> None:
    """The samples still to run: on the Ray cluster, or here on ``backend`` with ``sandbox``
    (None: the run's own sandbox, opened for it)."""
    config = run.config
    if todo and config.ray is not None:
        await _run_todo_ray(run, todo)
    elif todo and backend is None:
        raise ValueError("run_eval needs a backend unless config.ray is set")
    elif todo and sandbox is not None:
        await _run_todo(run, make_engine(config, backend, sandbox), todo)
    elif todo:
        async with open_sandbox(config.sandbox, config.sandbox_url,
                                config.sandbox_token_file) as client:
            await _run_todo(run, make_engine(config, backend, client), todo)


async def run_eval(config: EvalConfig, out_dir: str | Path, backend: Backend | None,
                   progress: ProgressFn | None = None,
                   sandbox: SandboxClient | None = None) -> EvalResult:
    """Run (or resume) an evaluation into ``out_dir``; returns its typed result (the run's
    metrics, and how many samples this call ran); ``progress`` gets an :class:`EvalProgress`
    after each recorded sample.

    ``backend`` may be one server or a router over several (None with ``config.ray``: the
    episodes run on the cluster's workers, each with its own client); ``sandbox`` is the run's
    shared sandbox client (None: the services of ``config.sandbox_url``, else a local sandbox
    pool from ``config.sandbox``, for this run).

    Raises :class:`~agentmath.runs.lock.RunLockedError` when another run holds the directory,
    :class:`~agentmath.errors.ConfigError` when the saved config or dataset differs, and
    :class:`~agentmath.errors.DataError` for a bad dataset; never for a failed sample.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    get_format(config.format)  # unknown format: fail before anything is written
    with RunLock(out):
        tasks = _load(config)
        full = {**config.model_dump(mode="json"), "versions": _versions(),
                "backend_name": backend.name if backend is not None else config.backend}
        check_or_write_config(out, identity(config), full, dataset_fingerprint(tasks))
        if config.retry_errors:
            drop_errors(out)
        done = {record.key for record in read_samples(out)}
        todo = [GroupRequest(t, config.samples, missing) for t in tasks
                if (missing := tuple(i for i in range(config.samples)
                                     if (t.id, i) not in done))]
        sink = open_sink(out, EVAL_LOG_FILE, config.trackers, resume_step=len(done),
                         wandb=config.wandb, config=full)
        try:
            writer = SampleWriter(out)
            run = _Run(config, writer, progress, sink, done=len(done),
                       total=len(tasks) * config.samples, started=time.monotonic())
            try:
                await _run_pending(run, todo, backend, sandbox)
            finally:
                writer.close()
            metrics = compute_run_metrics(out, config.grading, config.loop)
            log_metrics(sink, run.done, metrics)
        finally:
            sink.close()
    return EvalResult(run_dir=out, metrics=metrics, ran=run.fresh)


def compute_run_metrics(out: Path, grading: GradingOptions | None = None,
                        loop: LoopConfig | None = None) -> RunMetrics:
    """Metrics of the run directory's records (one per sample), also written to metrics.json
    (its one writer); ``n_errors`` counts the samples recorded as errors (``--retry-errors``
    runs them again). The majority vote groups answers with the run's ``grading`` options,
    which metrics.json repeats under ``grading``; with the run's ``loop``, ``truncation``
    counts the samples each of its budgets stopped (:mod:`agentmath.eval.truncation`)."""
    from agentmath.eval.metrics import compute_metrics, equivalence
    from agentmath.eval.truncation import truncation_stats

    grading = grading or GradingOptions()
    records = [SampleRecord.from_dict(r) for r in unique_records(load_records(out))]
    document = compute_metrics(records, equivalent=equivalence(grading))
    document["n_errors"] = sum(1 for r in records if r.is_error)
    document["grading"] = grading.model_dump(mode="json")
    if loop is not None:
        document["truncation"] = [s.to_dict() for s in truncation_stats(records, loop)]
    write_json_atomic(out / METRICS_FILE, document)
    return RunMetrics.from_dict(document)
