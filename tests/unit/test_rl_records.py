"""The typed RL records read what the code before them wrote, and write it unchanged.

The stored run ``tests/fixtures/rundirs/rl_v0`` was written before the records were typed:
its ``metrics.jsonl`` lines must come back byte for byte from the typed records, and its
checkpoint state (format 0: events as JSON text) must load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentmath.errors import DataError
from agentmath.rl.records import (
    CHECKPOINT_FORMAT,
    BoundSettings,
    CheckpointState,
    NoUpdate,
    RLResult,
    StageMove,
    StepMetrics,
    read_steps,
)
from agentmath.rl.schedules import Stage, StageState
from agentmath.rollout.records import PendingGroup
from tests.fixtures.rundirs.make_rl_run import RUN


def test_the_stored_step_lines_come_back_unchanged() -> None:
    lines = (RUN / "metrics.jsonl").read_text().splitlines()
    steps = read_steps(RUN)
    assert [s.step for s in steps] == [1, 2]
    assert [type(e) for e in steps[0].events] == [NoUpdate, StageMove]
    assert steps[0].events[1].budgets == Stage(1024, 96, 3, None)
    assert [json.dumps(s.to_dict()) for s in steps] == lines


def test_older_step_lines_without_the_newer_fields_load() -> None:
    row = json.loads((RUN / "metrics.jsonl").read_text().splitlines()[1])
    for newer in ("tool_call_rate", "roc_dropped", "extra", "stale_dropped"):
        del row[newer]
    step = StepMetrics.from_dict({**row, "unknown_later_field": 1})
    assert step.tool_call_rate == 0.0 and step.extra.rounds == 0 and not step.events
    assert "tool_call_rate" not in step.scalars()  # a default is not a measurement
    assert "absent" not in step.to_dict()
    del row["loss"]
    with pytest.raises(DataError, match="missing field 'loss'"):
        StepMetrics.from_dict(row)


@pytest.mark.parametrize("change, message", [
    ({"loss": None}, None),  # a value is not checked here: the line loads
    ({"step": "2"}, "field 'step': a step record needs an integer"),
    ({"reward_terms": []}, "field 'reward_terms': expected an object"),
    ({"extra": [1]}, "field 'extra': expected an object"),
    ({"extra": {"rounds": "many"}}, "field 'extra': invalid literal"),
    ({"events": {"event": "stage"}}, "field 'events': expected a list of objects"),
    ({"events": [1]}, "field 'events': expected a list of objects"),
    ({"events": [{"event": "later"}]}, "unknown RL event 'later'"),
])
def test_a_bad_step_line_names_the_file_line_and_field(tmp_path: Path, change: dict[str, object],
                                                       message: str | None) -> None:
    lines = (RUN / "metrics.jsonl").read_text().splitlines()
    bad = json.dumps({**json.loads(lines[1]), **change})
    (tmp_path / "metrics.jsonl").write_text(f"{lines[0]}\n\n{bad}\n")
    if message is None:
        assert len(read_steps(tmp_path)) == 2
        return
    with pytest.raises(DataError) as info:
        read_steps(tmp_path)
    assert str(info.value).startswith(f"{tmp_path / 'metrics.jsonl'}:3: ")
    assert message in str(info.value)


def test_a_step_log_that_is_not_json_lines_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"metrics\.jsonl: cannot read an RL run's step log"):
        read_steps(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('[1, 2]\n')
    with pytest.raises(DataError, match=r"metrics\.jsonl:1: expected a JSON object, got list"):
        read_steps(tmp_path)


def test_scalars_are_what_trackers_chart() -> None:
    step = read_steps(RUN)[1]
    scalars = step.scalars()
    assert "step" not in scalars and "extra" not in scalars and "reward_terms" not in scalars
    assert scalars["reward/brevity"] == step.reward_terms["brevity"]
    assert scalars["loss_tokens"] == step.loss_tokens


def test_the_stored_checkpoint_state_loads_and_saves_in_the_new_format() -> None:
    torch = pytest.importorskip("torch")
    payload = torch.load(RUN / "checkpoint-2" / "trainer_state.pt", map_location="cpu",
                         weights_only=True)
    state = CheckpointState.from_payload(payload)
    assert (state.step, state.version, state.format_version) == (2, 1, CHECKPOINT_FORMAT)
    assert state.cursor == 8 and state.pending == []  # step 1 drew more (no signal)
    assert state.stage == StageState(1, [(2, 4)])
    assert [type(e) for e in state.events] == [NoUpdate, StageMove]
    assert state.config.lora and state.config.group_size == 2
    again = CheckpointState.from_payload(state.to_payload())
    assert again == state
    assert isinstance(state.to_payload()["events"], list)  # no JSON text inside


def test_a_newer_checkpoint_format_is_refused(tmp_path: Path) -> None:
    state = CheckpointState(1, 0, 0, [], StageState(0, []), [], BoundSettings(False, 2, "m"))
    payload = {**state.to_payload(), "format_version": CHECKPOINT_FORMAT + 1}
    with pytest.raises(DataError, match="newer"):
        CheckpointState.from_payload(payload)


def test_the_result_json_keeps_its_shape() -> None:
    step = read_steps(RUN)[1]
    result = RLResult(2, 1, 1, "out", None, "out/metrics.jsonl", [], None, 1.5, last=step,
                      events=list(read_steps(RUN)[0].events))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["last"] == json.loads((RUN / "metrics.jsonl").read_text().splitlines()[1])
    assert [e["event"] for e in data["events"]] == ["no_update", "stage"]


def test_a_step_line_keeps_its_prompts_and_rejects_malformed_ones() -> None:
    row = json.loads((RUN / "metrics.jsonl").read_text().splitlines()[1])
    step = StepMetrics.from_dict({**row, "prompts": ["p1", "p2"],
                                  "prompts_dropped": {"no_variance": ["p3"]},
                                  "staleness_max": 2, "staleness_mean": 0.5})
    assert step.prompts == ["p1", "p2"] and step.prompts_dropped == {"no_variance": ["p3"]}
    again = StepMetrics.from_dict(json.loads(json.dumps(step.to_dict())))
    assert again.to_dict() == step.to_dict()
    assert again.scalars()["staleness_max"] == 2 and "prompts" not in again.scalars()
    with pytest.raises(DataError, match="field 'prompts'"):
        StepMetrics.from_dict({**row, "prompts": "p1"})
    with pytest.raises(DataError, match="field 'prompts_dropped'"):
        StepMetrics.from_dict({**row, "prompts_dropped": {"surplus": [1]}})


def test_format_1_pending_problem_ids_read_as_groups_to_draw_again() -> None:
    state = CheckpointState(3, 2, 9, [], StageState(0, []), [], BoundSettings(False, 2, "m"))
    payload = {**state.to_payload(), "format_version": 1, "requeue": ["a", "b"]}
    del payload["pending"]
    back = CheckpointState.from_payload(payload)
    assert back.pending == [PendingGroup(None, "a"), PendingGroup(None, "b")]
    assert not any(p.saved for p in back.pending)  # nothing kept: run again from scratch


def test_a_pending_group_round_trips_and_a_malformed_one_is_named() -> None:
    from agentmath.agent.episode import Progress
    from agentmath.agent.trajectory import Segment, Trajectory
    from agentmath.config import LoopConfig
    from agentmath.rollout.records import Sample

    traj = Trajectory("p", [Segment("model", "x", [5, 6], [-0.1, -0.2], policy_version=3)],
                      finish_reason="answered")
    progress = Progress(Trajectory("p", [Segment("model", "y", [7], [-0.3],
                                                 policy_version=4)]),
                        LoopConfig(max_model_tokens=64), "parked", 1, 0, 1, 0.5, 0, ["x = 1"],
                        [], 9)
    group = PendingGroup(12, "t", [Sample("t", 0, traj, 1)], {1: progress})
    state = CheckpointState(3, 4, 13, [group], StageState(0, []), [],
                            BoundSettings(False, 2, "m"))
    back = CheckpointState.from_payload(json.loads(json.dumps(state.to_payload())))
    got = back.pending[0]
    assert (got.position, got.task_id, got.samples[0].restarts) == (12, "t", 1)
    assert got.samples[0].trajectory.to_dict() == traj.to_dict()
    assert got.progress[1].trajectory.policy_versions == [4]
    assert got.progress[1].config.max_model_tokens == 64 and got.progress[1].cells == ["x = 1"]
    payload = state.to_payload()
    del payload["pending"][0]["progress"][0]["trajectory"]
    with pytest.raises(DataError, match="pending group 0"):
        CheckpointState.from_payload(payload)
