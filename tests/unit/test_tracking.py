"""Metrics leave a run through one sink: JSONL (the same lines as before), TensorBoard event
files that TensorBoard reads back, and W&B (offline; missing package: a clear error)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from agentmath.errors import ConfigError
from agentmath.rl.config import RLConfig
from agentmath.rl.records import read_steps
from agentmath.tracking import WandbConfig, open_sink
from tests.fixtures.rundirs.make_rl_run import RUN

LINES = (RUN / "metrics.jsonl").read_text().splitlines()


def test_jsonl_writes_the_lines_the_old_writer_wrote_and_cuts_them_on_resume(
        tmp_path: Path) -> None:
    sink = open_sink(tmp_path, "metrics.jsonl", ["jsonl"])
    for step in read_steps(RUN):
        sink.log(step.step, step.to_dict(), step.scalars())
        for event in step.events:
            sink.event(step.step, "stage", event.to_dict())  # not a line of its own
    sink.close()
    assert (tmp_path / "metrics.jsonl").read_text().splitlines() == LINES
    again = open_sink(tmp_path, "metrics.jsonl", ["jsonl"], resume_step=1)
    again.close()
    assert (tmp_path / "metrics.jsonl").read_text().splitlines() == LINES[:1]


def test_tensorboard_event_files_read_back(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = open_sink(tmp_path, "metrics.jsonl", ["jsonl", "tensorboard"])
    steps = read_steps(RUN)
    for step in steps:
        sink.log(step.step, step.to_dict(), step.scalars())
        for event in step.events:
            sink.event(step.step, event.to_dict()["event"], event.to_dict())
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"reward_mean", "loss", "reward/brevity", "tool_call_rate"} <= set(tags)
    loss = [(e.step, e.value) for e in acc.Scalars("loss")]
    assert loss == [(s.step, pytest.approx(s.loss)) for s in steps]
    assert "step" not in tags


def test_rl_config_picks_the_trackers() -> None:
    base = {"model": "m", "data": {"dataset": "d.jsonl"}}
    assert RLConfig.model_validate(base).tracker_names() == ["jsonl", "tensorboard"]
    older = RLConfig.model_validate({**base, "tensorboard": False})  # the older switch
    assert older.tracker_names() == ["jsonl"]
    chosen = RLConfig.model_validate({**base, "trackers": ["wandb"]})
    assert chosen.tracker_names() == ["jsonl", "wandb"] and chosen.wandb.mode == "offline"
    with pytest.raises(ValueError, match="trackers"):
        RLConfig.model_validate({**base, "trackers": ["mlflow"]})


def test_wandb_missing_is_a_clear_error(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(ConfigError, match=r"pip install 'agentmath\[wandb\]'"):
        open_sink(tmp_path, "metrics.jsonl", ["jsonl", "wandb"])


class _FakeRun:
    def __init__(self, **init: Any) -> None:
        self.init, self.logged, self.finished = init, [], False

    def log(self, data: dict[str, Any], step: int) -> None:
        self.logged.append((step, data))

    def finish(self) -> None:
        self.finished = True


def test_wandb_logs_offline_and_a_resume_continues_the_same_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[_FakeRun] = []
    fake = types.SimpleNamespace(init=lambda **kw: runs.append(_FakeRun(**kw)) or runs[-1])
    monkeypatch.setitem(sys.modules, "wandb", fake)
    step = read_steps(RUN)[1]
    sink = open_sink(tmp_path, "metrics.jsonl", ["wandb"], wandb=WandbConfig(project="p"),
                     config={"seed": 0})
    sink.log(step.step, step.to_dict(), step.scalars())
    sink.close()
    first = runs[0]
    assert first.init["mode"] == "offline" and first.init["project"] == "p" and first.finished
    assert first.logged == [(2, step.scalars())]
    assert (tmp_path / "metrics.jsonl").read_text().splitlines() == LINES[1:]  # JSONL always
    resumed = open_sink(tmp_path, "metrics.jsonl", ["wandb"], resume_step=1)
    resumed.close()
    assert runs[1].init["id"] == first.init["id"]  # the same W&B run goes on


def test_a_real_wandb_offline_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the wandb extra installed: an offline run under OUT/wandb, no network."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = open_sink(tmp_path, "metrics.jsonl", ["wandb"], config={"seed": 0})
    for step in read_steps(RUN):
        sink.log(step.step, step.to_dict(), step.scalars())
    sink.close()
    run_id = (tmp_path / "wandb" / "run_id").read_text().strip()
    assert list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
