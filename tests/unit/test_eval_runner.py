"""run_eval under faults, with in-process backends: any exception in one sample is that
sample's error record, cancellation still stops the run (keeping what finished), a second run
on the directory is refused, and --retry-errors supersedes errors exactly once."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentmath.backends import BACKENDS
from agentmath.backends.base import Generation, SamplingParams
from agentmath.backends.scripted import ScriptedBackend
from agentmath.eval.config import EvalConfig
from agentmath.eval.records import SampleRecord, read_samples
from agentmath.eval.results import EvalProgress, RunMetrics
from agentmath.eval.runner import run_eval
from agentmath.runs.lock import RunLock, RunLockedError
from agentmath.runs.store import RETRIED_FILE, load_records

PROBLEMS = {"a": ("What is 1+1?", "2"), "b": ("What is 2+2?", "4"), "c": ("What is 3+3?", "6")}


class ProblemBackend(ScriptedBackend):
    """Answers each problem correctly, except those in ``broken``, where ``generate`` raises
    (or returns) what ``broken`` maps the problem to."""

    def __init__(self, broken: dict[str, Any] | None = None) -> None:
        super().__init__(["\\boxed{?}"])
        self.broken = broken or {}
        self.gate: asyncio.Semaphore | None = None  # when set, one permit per generate call
        self.started = asyncio.Event()

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        self.started.set()
        if self.gate is not None:
            await self.gate.acquire()
        prompt = bytes(i for i in prompt_ids if i < 256).decode()
        for pid, (question, answer) in PROBLEMS.items():
            if question in prompt:
                fault = self.broken.get(pid)
                if isinstance(fault, BaseException):
                    raise fault
                if fault is not None:
                    return fault
                ids = list(f"\\boxed{{{answer}}}".encode())
                return Generation(ids, bytes(ids).decode(), "eos", None, [-0.1] * len(ids))
        raise AssertionError("unknown problem")


@pytest.fixture(autouse=True)
def _scripted_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The configs below name the backend ``scripted``; EvalConfig checks the name against the
    registry, so it is registered here, as a plugin registers its own backend."""
    monkeypatch.setitem(BACKENDS, "scripted", lambda settings: ProblemBackend())


def _config(tmp_path: Path, **kwargs: Any) -> EvalConfig:
    data = tmp_path / "data.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps({"id": k, "problem": q, "answer": a}) + "\n"
                                for k, (q, a) in PROBLEMS.items()))
    return EvalConfig(dataset=str(data), model="m", backend="scripted", samples=2,
                      sandbox={"preload": [], "spare_workers": 0}, **kwargs)


def _by_problem(out: Path) -> dict[str, list[SampleRecord]]:
    grouped: dict[str, list[SampleRecord]] = {}
    for record in read_samples(out):
        grouped.setdefault(record.problem_id, []).append(record)
    return grouped


async def test_any_exception_in_a_sample_is_that_samples_error(tmp_path: Path) -> None:
    broken = {"a": TypeError("'NoneType' object is not iterable"),
              "b": Generation(None, "x", "eos")}  # type: ignore[arg-type]
    out = tmp_path / "run"
    metrics = await run_eval(_config(tmp_path), out, ProblemBackend(broken))
    records = _by_problem(out)
    assert metrics.metrics.n_samples == 6 and metrics.metrics.n_errors == 4
    assert all(r.finish_reason == "error" and r.is_error for r in records["a"] + records["b"])
    assert all("TypeError (unexpected, from the backend)" in r.error for r in records["a"])
    assert all("TypeError" in r.error and "while running this sample" in r.error
               for r in records["b"])
    assert all(r.correct is True and r.error is None for r in records["c"])


async def test_retry_errors_supersedes_errors_exactly_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    backend = ProblemBackend({"b": ConnectionResetError("server went away")})
    first = await run_eval(_config(tmp_path), out, backend)
    assert first.metrics.n_errors == 2 and first.metrics.avg.value == pytest.approx(2 / 3)
    again = await run_eval(_config(tmp_path), out, ProblemBackend())  # errors count as done
    assert again.metrics.n_errors == 2 and len(load_records(out)) == 6
    final = await run_eval(_config(tmp_path, retry_errors=True), out, ProblemBackend())
    records = load_records(out)
    keys = Counter((r["problem_id"], r["sample_index"]) for r in records)
    assert len(records) == 6 and set(keys.values()) == {1}
    assert final.metrics.n_errors == 0 and final.metrics.avg.value == 1.0
    assert final.metrics.n_samples == 6 and final.ran == 2
    retried = (out / RETRIED_FILE).read_text().splitlines()
    assert len(retried) == 2 and all("server went away" in line for line in retried)


async def test_cancel_stops_the_run_keeping_finished_samples(tmp_path: Path) -> None:
    out = tmp_path / "run"
    backend = ProblemBackend()
    backend.gate = asyncio.Semaphore(2)  # two samples may finish; the rest wait
    run = asyncio.create_task(run_eval(_config(tmp_path), out, backend))
    while len(load_records(out)) < 2:
        await asyncio.sleep(0.01)
    run.cancel()  # what Ctrl-C does to asyncio.run: the run stops, it is not recorded
    with pytest.raises(asyncio.CancelledError):
        await run
    records = load_records(out)
    assert len(records) == 2 and all(r["correct"] for r in records)
    with RunLock(out):  # the lock went with the run
        pass


async def test_a_second_run_on_the_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    backend = ProblemBackend()
    backend.gate = asyncio.Semaphore(0)
    first = asyncio.create_task(run_eval(_config(tmp_path), out, backend))
    await asyncio.wait_for(backend.started.wait(), 30)
    with pytest.raises(RunLockedError, match="in use by another run"):
        await run_eval(_config(tmp_path), out, ProblemBackend())
    for _ in range(6):
        backend.gate.release()
    metrics = await first
    assert metrics.metrics.n_samples == 6 and len(load_records(out)) == 6


async def test_a_directory_with_duplicates_from_two_old_runs_still_resumes(
        tmp_path: Path) -> None:
    """Before runs were locked, two at once appended duplicates and every later resume was
    refused ("duplicate sample_index"); such a directory now scores each sample once."""
    out = tmp_path / "run"
    await run_eval(_config(tmp_path), out, ProblemBackend())
    samples = out / "samples.jsonl"
    samples.write_text(samples.read_text() * 2)
    metrics = await run_eval(_config(tmp_path), out, ProblemBackend())
    assert metrics.metrics.n_samples == 6 and metrics.metrics.avg.value == 1.0
    assert len(load_records(out)) == 12  # nothing rewritten without --retry-errors


async def test_progress_and_result_are_typed(tmp_path: Path) -> None:
    seen: list[EvalProgress] = []
    result = await run_eval(_config(tmp_path), tmp_path / "run", ProblemBackend(),
                            progress=seen.append)
    assert [p.done for p in seen] == list(range(1, 7)) and seen[-1].total == 6
    assert seen[-1].accuracy == 1.0 and seen[-1].errors == 0 and result.ran == 6
    assert result.run_dir == tmp_path / "run" and result.metrics.n_samples == 6
    stored = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert result.metrics.to_dict() == stored and RunMetrics.from_dict(stored) == result.metrics


async def test_progress_and_metrics_go_through_the_metrics_sink(tmp_path: Path) -> None:
    """eval_log.jsonl always (progress at each recorded sample of a small run, then the final
    metrics), the same scalars in TensorBoard when asked for; trackers may change on resume."""
    out = tmp_path / "run"
    with_tb = all(importlib.util.find_spec(m) for m in ("torch", "tensorboard"))
    trackers = ["tensorboard"] if with_tb else []
    result = await run_eval(_config(tmp_path, trackers=trackers), out, ProblemBackend())
    lines = [json.loads(x) for x in (out / "eval_log.jsonl").read_text().splitlines()]
    progress, final = lines[:-1], lines[-1]
    assert [(p["kind"], p["step"], p["done"]) for p in progress] == \
        [("progress", i, i) for i in range(1, 7)]
    assert progress[-1]["accuracy"] == 1.0 and progress[-1]["total"] == 6
    assert final["kind"] == "metrics" and final["step"] == 6
    assert final == {"step": 6, "kind": "metrics", **result.metrics.scalars()}
    assert final["avg"] == 1.0 and final["pass@1"] == 1.0 and final["n_samples"] == 6
    if with_tb:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(out / "tensorboard"))
        acc.Reload()
        assert {"metrics/avg", "metrics/n_errors", "progress/accuracy"} <= \
            set(acc.Tags()["scalars"])
        assert [(e.step, e.value) for e in acc.Scalars("metrics/avg")] == [(6, 1.0)]
        assert [e.step for e in acc.Scalars("progress/done")] == list(range(1, 7))
    again = await run_eval(_config(tmp_path), out, ProblemBackend())  # nothing left to run
    assert again.ran == 0
    lines_again = (out / "eval_log.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines_again[len(lines):]] == ["metrics"]


def test_a_sandbox_failure_that_was_not_the_models_is_an_error_not_a_wrong_answer() -> None:
    from agentmath.agent.trajectory import Segment, Trajectory
    from agentmath.grading import Grade
    from agentmath.sandbox.result import ExecResult
    from agentmath.tasks import Task

    def record(result: ExecResult) -> SampleRecord:
        traj = Trajectory("p", [Segment("prompt", "p", [0]), Segment("model", "m", [1]),
                                Segment("tool", "t", [2], code="x", result=result),
                                Segment("model", "m", [3])], finish_reason="answered")
        return SampleRecord.build(Task("1", "p", "3"), 0, traj, Grade.from_record(False, "4"))

    killed = record(ExecResult(error="SandboxCrash: killed by SIGKILL", crashed=True,
                               infra=True))
    assert killed.is_error and killed.error == "SandboxCrash: killed by SIGKILL"
    own = record(ExecResult(error="SandboxCrash: exited with code 3", crashed=True))
    assert not own.is_error and own.error is None  # the model's crash: graded as it stands
