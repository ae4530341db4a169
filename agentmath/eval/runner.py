"""Evaluation runs: every sample of every problem through the agent loop, concurrently,
recorded as it finishes, resumable after any interruption.

``run_eval`` loads the tasks, saves (or checks) the run's config, skips the (problem, sample)
pairs already in ``samples.jsonl``, runs the rest with at most ``concurrency`` in flight, grades
each answer against the gold with math-verify, appends the record at once, and finally writes
``metrics.json``. Each sample's seed derives from the run seed, the problem id and the sample
index, so a resumed run samples the same way as an uninterrupted one.
"""

from __future__ import annotations

import asyncio
import hashlib
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmath import __version__
from agentmath.backends.base import Backend, SamplingParams
from agentmath.config import EvalConfig
from agentmath.errors import GradingError
from agentmath.eval.store import (
    METRICS_FILE,
    SampleWriter,
    check_or_write_config,
    load_records,
    write_json_atomic,
)
from agentmath.formats import get_format
from agentmath.loop import run_episode
from agentmath.sandbox.pool import SandboxPool
from agentmath.trajectory import Trajectory

ProgressFn = Callable[[dict[str, Any]], None]


def sample_seed(seed: int, problem_id: str, index: int) -> int:
    """A per-sample seed that does not depend on scheduling order."""
    digest = hashlib.sha256(f"{seed}\0{problem_id}\0{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def identity(config: EvalConfig) -> dict[str, Any]:
    """The config fields that determine results (what a resumed run must not change)."""
    data = config.model_dump(mode="json")
    return {k: v for k, v in data.items() if k not in EvalConfig.RESUMABLE_FIELDS}


def _versions() -> dict[str, str]:
    out = {"agentmath": __version__, "python": platform.python_version()}
    for name in ("torch", "transformers", "vllm", "math_verify", "sympy"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        out[name] = str(getattr(module, "__version__", "?"))
    return out


def make_record(task: Any, index: int, traj: Trajectory, grade: Any) -> dict[str, Any]:
    """One line of samples.jsonl: the grade, the counts metrics need, and the trajectory."""
    results = [s.result for s in traj.tool_calls if s.result is not None]
    meta = {k: v for k, v in task.meta.items() if k != "solution"}
    return {
        "problem_id": task.id, "sample_index": index, "gold": task.answer,
        "extracted": grade.extracted, "correct": grade.correct,
        "grade_timed_out": grade.timed_out, "model_tokens": traj.model_tokens,
        "tool_tokens": traj.tool_tokens, "prompt_tokens": traj.prompt_length,
        "total_tokens": traj.total_tokens, "tool_calls": len(results),
        "tool_errors": sum(1 for r in results if r.error and not r.timed_out),
        "tool_timeouts": sum(1 for r in results if r.timed_out),
        "output_truncations": sum(1 for r in results if r.truncated),
        "finish_reason": traj.finish_reason, "error": traj.error,
        "duration_ms": traj.duration_ms, "problem": task.problem, "problem_meta": meta,
        "trajectory": traj.to_dict(),
    }


@dataclass
class _Run:
    config: EvalConfig
    backend: Backend
    pool: SandboxPool
    writer: SampleWriter
    progress: ProgressFn | None
    done: int = 0
    fresh: int = 0
    correct: int = 0
    total: int = 0
    started: float = 0.0


async def _one(run: _Run, task: Any, index: int, slots: asyncio.Semaphore) -> None:
    """Run, grade and record one sample (failures are recorded, never raised)."""
    from agentmath.grading import GradeResult, acheck

    cfg = run.config
    async with slots:
        sampling = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p,
                                  top_k=cfg.top_k, seed=sample_seed(cfg.seed, task.id, index))
        traj = await run_episode(task.problem, run.backend, get_format(cfg.format), run.pool,
                                 cfg.loop, sampling,
                                 meta={"problem_id": task.id, "sample_index": index})
        try:
            grade = await acheck(task.answer, traj.answer, timeout=cfg.grade_timeout_s)
        except GradingError as exc:  # an ungradable row is recorded as such, not raised
            grade = GradeResult(traj.answer, None, error=str(exc))
    record = make_record(task, index, traj, grade)
    run.writer.append(record)
    run.done += 1
    run.fresh += 1
    run.correct += bool(record["correct"])
    if run.progress is not None:
        elapsed = time.monotonic() - run.started
        run.progress({"done": run.done, "total": run.total, "fresh": run.fresh,
                      "correct": run.correct, "rate": run.fresh / elapsed if elapsed else 0.0})


async def run_eval(config: EvalConfig, out_dir: str | Path, backend: Backend,
                   progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run (or resume) an evaluation into ``out_dir``; returns the metrics."""
    from agentmath.datasets import load_tasks
    from agentmath.eval.metrics import compute_metrics

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    get_format(config.format)  # unknown format: fail before anything is written
    tasks = load_tasks(config.dataset, data_dir=config.data_dir, limit=config.limit,
                       problem_field=config.problem_field, answer_field=config.answer_field,
                       id_field=config.id_field)
    full = {**config.model_dump(mode="json"), "versions": _versions(),
            "backend_name": getattr(backend, "name", config.backend)}
    check_or_write_config(out, identity(config), full)
    done = {(r["problem_id"], r["sample_index"]) for r in load_records(out)}
    todo = [(t, i) for t in tasks for i in range(config.samples) if (t.id, i) not in done]
    writer = SampleWriter(out)
    try:
        async with SandboxPool(config.sandbox) as pool:
            run = _Run(config, backend, pool, writer, progress, done=len(done),
                       total=len(tasks) * config.samples, started=time.monotonic())
            slots = asyncio.Semaphore(config.concurrency)
            await asyncio.gather(*(_one(run, t, i, slots) for t, i in todo))
    finally:
        writer.close()
    records = load_records(out)
    metrics = compute_metrics(records)
    write_json_atomic(out / METRICS_FILE, metrics)
    return metrics
