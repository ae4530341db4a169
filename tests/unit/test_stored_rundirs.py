"""A run directory written before the run records were typed (tests/fixtures/rundirs/eval_v1,
by commit b97303d's code) still loads, scores and resumes under the current code; trajectories
written before their execution facts were typed (tests/fixtures/rundirs/trajectories_v1.jsonl,
by commit 790a290's code) read them as fields."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentmath.agent.trajectory import Trajectory
from agentmath.backends import BACKENDS
from agentmath.eval.metrics import compute_metrics
from agentmath.eval.records import SampleRecord, iter_samples, read_samples
from agentmath.eval.results import RunMetrics
from agentmath.eval.runner import run_eval
from agentmath.grading import Verdict
from agentmath.runs.files import METRICS_FILE, RETRIED_FILE, SAMPLES_FILE
from agentmath.seeding import eval_sample_seed
from tests.fixtures.rundirs.make_eval_run import (
    BACKEND,
    RUN,
    FixtureBackend,
    config,
    fixture_backend,
)
from tests.fixtures.rundirs.make_trajectories import OUT as OLD_TRAJECTORIES


@pytest.fixture
def run_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the stored run to resume (the config's dataset path is relative to it), with
    the backend its config names registered."""
    monkeypatch.setitem(BACKENDS, BACKEND, fixture_backend)
    out = tmp_path / "eval_v1"
    shutil.copytree(RUN, out)
    monkeypatch.chdir(out)
    return out


def test_old_records_read_typed() -> None:
    records = {r.key: r for r in read_samples(RUN)}
    assert list(iter_samples(RUN)) == list(records.values())
    assert sorted(records) == [(p, i) for p in "abc" for i in range(2)]
    assert {r.grade.verdict for k, r in records.items() if k[0] == "a"} == {Verdict.CORRECT}
    assert {r.grade.verdict for k, r in records.items() if k[0] == "b"} == {Verdict.WRONG}
    assert all(r.is_error for k, r in records.items() if k[0] == "c")
    a0 = records[("a", 0)]
    assert a0.tool_calls == 1 and a0.problem_meta == {"level": 1}
    traj = a0.trajectory
    assert traj is not None and traj.problem_id == "a" and traj.sample_index == 0
    assert traj.sampling is not None and traj.sampling.seed == eval_sample_seed(7, "a", 0)
    assert "sampling" not in traj.meta and traj.meta["format"] == "code_interpreter"
    assert traj.tool_calls[0].result is not None and traj.tool_calls[0].result.stdout == "42\n"
    assert traj.messages[-1] == {"role": "user", "content": "What is 20+22?"}
    assert set(traj.meta) == {"format", "backend", "budgets"}


def test_old_trajectories_read_their_execution_facts_as_fields() -> None:
    """Facts the old code kept in ``meta`` are fields; ``meta`` keeps only the free-form."""
    stored = [json.loads(line) for line in OLD_TRAJECTORIES.read_text().splitlines()]
    text, chat = (Trajectory.from_dict(d) for d in stored)
    assert "messages" in stored[0]["meta"] and "messages" not in stored[0]  # the old form
    assert (text.advances, text.session_replays) == (stored[0]["meta"]["segments"], 1) == (3, 1)
    assert text.ray_node == "node-a" and text.session_close_error is None
    assert text.reward_errors == ["raising_reward: RuntimeError: boom"]
    assert text.token_exact and [m["role"] for m in text.messages] == ["system", "user"]
    assert not chat.token_exact and chat.advances == 1 and chat.session_replays == 0
    assert chat.session_close_error == "SandboxError: the session service is gone"
    assert chat.ray_node is None and chat.reward_errors == []
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "tool"]
    for traj, old in ((text, stored[0]), (chat, stored[1])):
        assert set(traj.meta) == {"format", "backend", "budgets"}
        assert traj.meta["budgets"] == old["meta"]["budgets"]
        new = traj.to_dict()  # the new form: the facts as top-level keys, meta free-form
        assert new["meta"] == traj.meta and Trajectory.from_dict(new) == traj
        assert new["segments"] == old["segments"]
    assert {k: v for k, v in text.to_dict().items() if k not in stored[0]} == {
        "messages": text.messages, "advances": 3, "session_replays": 1, "ray_node": "node-a",
        "reward_errors": ["raising_reward: RuntimeError: boom"]}
    assert {k: v for k, v in chat.to_dict().items() if k not in stored[1]} == {
        "messages": chat.messages, "token_exact": False,
        "session_close_error": "SandboxError: the session service is gone"}


def test_a_record_round_trips_to_the_same_top_level_fields() -> None:
    line = json.loads((RUN / SAMPLES_FILE).read_text().splitlines()[0])
    again = SampleRecord.from_dict(line).to_dict()
    assert list(again) == list(line)
    assert {k: v for k, v in again.items() if k != "trajectory"} == \
        {k: v for k, v in line.items() if k != "trajectory"}
    assert SampleRecord.from_dict(again) == SampleRecord.from_dict(line)


def test_old_metrics_read_and_recompute_identically() -> None:
    stored = json.loads((RUN / METRICS_FILE).read_text())
    metrics = RunMetrics.from_dict(stored)
    assert metrics.n_samples == 6 and metrics.n_errors == 2 and metrics.k == 2
    assert metrics.avg is not None and metrics.avg.value == pytest.approx(1 / 3)
    assert set(metrics.by_level) == {"1", "2"}
    again = compute_metrics(read_samples(RUN))
    assert {**again, "n_errors": 2} == stored


async def test_the_old_run_resumes(run_copy: Path) -> None:
    lines = (run_copy / SAMPLES_FILE).read_text().splitlines(keepends=True)
    kept = [line for line in lines if '"problem_id": "a"' not in line]
    (run_copy / SAMPLES_FILE).write_text("".join(kept))
    result = await run_eval(config(), ".", FixtureBackend())
    assert result.ran == 2 and result.metrics.n_samples == 6
    # every figure the old run stored comes out the same (figures added since are new keys)
    stored = json.loads((RUN / METRICS_FILE).read_text()) | {"duration_ms_mean": 0, "tokens": 0}
    now_metrics = result.metrics.to_dict() | {"duration_ms_mean": 0, "tokens": 0}
    assert {key: now_metrics.get(key) for key in stored} == stored
    assert "loop.max_model_tokens" in {s.budget for s in result.metrics.truncation}
    now = (run_copy / SAMPLES_FILE).read_text().splitlines(keepends=True)
    assert now[:len(kept)] == kept  # the old records stay as they were
    assert {r.key for r in read_samples(run_copy)} == {(p, i) for p in "abc" for i in range(2)}


async def test_the_old_run_retries_its_errors(run_copy: Path) -> None:
    result = await run_eval(config().model_copy(update={"retry_errors": True}), ".",
                            FixtureBackend())
    assert result.ran == 2 and result.metrics.n_errors == 2  # the server still fails on c
    retried = [json.loads(line) for line in (run_copy / RETRIED_FILE).read_text().splitlines()]
    assert [(r["problem_id"], r["sample_index"]) for r in retried] == [("c", 0), ("c", 1)]


def test_the_report_reads_the_old_run(tmp_path: Path) -> None:
    from agentmath.report import load_run, write_report
    from agentmath.report.viewer import run_payload

    run = load_run(RUN)
    assert run.metrics.n_samples == 6 and len(run.samples()) == 6
    payload = run_payload(run)
    a = next(p for p in payload["problems"] if p["id"] == "a")
    tool = [s for s in a["samples"][0]["segments"] if s["source"] == "tool"]
    assert tool and tool[0]["result"]["stdout"] == "42\n"
    written = write_report([RUN], tmp_path / "report")
    assert written.rows[0]["avg"] == pytest.approx(1 / 3) and written.viewer is not None
    assert all(path.is_file() for path in written.paths)
