"""Tests of agentmath.rl.rewards: every built-in against hand-computed values, weighted totals,
the correctness cache, user rewards by import path, and config errors that name the field.

Trajectories are built by hand (prompt, model and tool segments with their ExecResults); the
gold answers are plain integers, which the grader's in-process shortcuts decide, so no
math-verify worker starts.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from pydantic import ValidationError

from agentmath import grading
from agentmath.agent.trajectory import Segment, Trajectory
from agentmath.config import StrictModel, load_config
from agentmath.errors import ConfigError
from agentmath.grading import Grade, Verdict
from agentmath.rl import rewards as R
from agentmath.rl.rewards import RewardModel, RewardSpec
from agentmath.sandbox.result import ExecResult
from agentmath.tasks import Task

TASK = Task(id="t1", problem="What is 1 + 2?", answer="3")
OK = {"stdout": "3\n"}
FAILED = {"error": "ZeroDivisionError: division by zero (line 1)",
          "error_type": "ZeroDivisionError"}
TIMED_OUT = {"timed_out": True, "state_lost": True}
NOT_CALLABLE = 42


def traj(answer: str | None = "3", *, tools: list[dict] | None = None, finish: str = "answered",
         model_tokens: int = 10, set_answer: bool = True) -> Trajectory:
    """A prompt, a model turn and a tool segment per tool result, then the final model turn."""
    segments = [Segment("prompt", f"User: {TASK.problem}\n", [1, 2, 3])]
    for i, result in enumerate(tools or []):
        segments.append(Segment("model", f"```python\nprint({i})\n```\n", [7, 8],
                                finish_reason="stop"))
        segments.append(Segment("tool", "```output\n...\n```\n", [5, 6], code=f"print({i})",
                                result=ExecResult(**result)))
    used = sum(len(s.token_ids) for s in segments if s.source == "model")
    final = f"So the answer is \\boxed{{{answer}}}." if answer is not None else "I give up."
    segments.append(Segment("model", final, list(range(model_tokens - used)),
                            finish_reason="eos"))
    return Trajectory(problem=TASK.problem, segments=segments, finish_reason=finish,
                      answer=answer if set_answer else None)


def my_reward(task: Task, trajectory: Trajectory, bonus: float = 0.0) -> float:
    """A user reward referenced by import path: 0.5 per tool call, plus ``bonus``."""
    return 0.5 * len(trajectory.tool_calls) + bonus


def raising_reward(task: Task, trajectory: Trajectory) -> float:
    raise RuntimeError("boom")


def nan_reward(task: Task, trajectory: Trajectory) -> float:
    return float("nan")


@pytest.fixture
def grade_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the grading seam's calls (sync and async), still grading for real."""
    calls: list[str] = []
    real, areal = grading.grade_answer, grading.agrade_answer

    def counting(gold, response, **kw):
        calls.append(response)
        return real(gold, response, **kw)

    async def acounting(gold, response, **kw):
        calls.append(response)
        return await areal(gold, response, **kw)

    monkeypatch.setattr(grading, "grade_answer", counting)
    monkeypatch.setattr(grading, "agrade_answer", acounting)
    return calls


# ---------------------------------------------------------------- built-ins
def test_accuracy_right_wrong_and_errored(grade_calls: list[str]) -> None:
    assert R.accuracy_reward(TASK, traj("3")) == 1.0
    assert R.accuracy_reward(TASK, traj("4")) == 0.0
    assert R.accuracy_reward(TASK, traj(None, finish="eos")) == 0.0
    errored = traj("3", finish="error")  # right answer, but the episode failed: never graded
    assert R.accuracy_reward(TASK, errored) == 0.0
    assert errored.grade is not None and errored.grade.verdict is Verdict.ERROR
    assert len(grade_calls) == 3


def test_accuracy_grades_the_model_text_like_eval() -> None:
    t = traj("3", set_answer=False)  # the loop's answer is not needed: eval grades the text
    assert R.accuracy_reward(TASK, t) == 1.0
    assert t.grade == Grade(Verdict.CORRECT, "3")


def test_tool_efficiency_agentmath_bonus() -> None:
    fn = R.make_tool_efficiency_reward()  # paper defaults: alpha=0.1, beta=0.01, r_max=1
    assert fn(TASK, traj("3", tools=[OK, OK, OK])) == pytest.approx(0.13)
    assert fn(TASK, traj("4", tools=[OK, OK, OK])) == 0.0  # wrong: no bonus
    assert fn(TASK, traj("3")) == 0.0  # no tool call: no bonus
    capped = R.make_tool_efficiency_reward(alpha=0.5, beta=0.2, r_max=1.0)
    assert capped(TASK, traj("3", tools=[OK] * 3)) == pytest.approx(1.0)  # min(1, 1.1)
    fewer = R.make_tool_efficiency_reward(alpha=0.5, beta=-0.1, r_max=1.0)
    assert fewer(TASK, traj("3", tools=[OK, OK])) == pytest.approx(0.3)


def test_code_use_deepmath_and_gated() -> None:
    deepmath = R.make_code_use_reward()
    assert deepmath(TASK, traj("4", tools=[OK])) == 1.0  # DeepMath pays any tool use
    assert deepmath(TASK, traj("3")) == 0.0
    gated = R.make_code_use_reward(require_correct=True)
    assert gated(TASK, traj("4", tools=[OK])) == 0.0
    assert gated(TASK, traj("3", tools=[FAILED])) == 1.0


def test_format() -> None:
    assert R.format_reward(TASK, traj("4")) == 1.0  # wrong but well-formed
    assert R.format_reward(TASK, traj("3", finish="eos", set_answer=False)) == 1.0
    assert R.format_reward(TASK, traj(None, finish="eos")) == 0.0
    for cut in ("token_budget", "tool_budget", "time_budget", "error"):
        assert R.format_reward(TASK, traj("3", finish=cut)) == 0.0


@pytest.mark.parametrize(("length", "expected"), [
    (50, 0.0), (80, 0.0), (81, -0.05), (90, -0.5), (100, -1.0), (101, -1.0), (500, -1.0)])
def test_overlong_dapo(length: int, expected: float) -> None:
    fn = R.make_overlong_reward(max_tokens=100, buffer=20)  # penalty from 80 to 100 tokens
    t = traj("3", model_tokens=length)
    assert t.model_tokens == length
    assert fn(TASK, t) == pytest.approx(expected)


def test_overlong_default_buffer_and_hard_cap() -> None:
    default = R.make_overlong_reward(max_tokens=100)  # buffer 20
    assert default(TASK, traj(model_tokens=90)) == pytest.approx(-0.5)
    hard = R.make_overlong_reward(max_tokens=100, buffer=0)
    assert hard(TASK, traj(model_tokens=100)) == 0.0
    assert hard(TASK, traj(model_tokens=101)) == -1.0


def test_tool_error_fraction() -> None:
    assert R.tool_error_reward(TASK, traj("3")) == 0.0
    assert R.tool_error_reward(TASK, traj("3", tools=[OK, OK])) == 0.0
    t = traj("3", tools=[OK, FAILED, TIMED_OUT, OK])  # a timeout counts as a failed call
    assert R.tool_error_reward(TASK, t) == pytest.approx(-0.5)


# ---------------------------------------------------------------- composition
def test_agentmath_recipe_total() -> None:
    model = RewardModel(R.agentmath_rewards())
    right = model.score(TASK, traj("3", tools=[OK, OK]))
    assert right.correct is True
    assert right.terms == {"accuracy": 1.0, "tool_efficiency": pytest.approx(0.12)}
    assert right.total == pytest.approx(1.12)
    wrong = model.score(TASK, traj("4", tools=[OK, OK]))
    assert (wrong.total, wrong.correct) == (0.0, False)


def test_deepmath_recipe_weights_and_total() -> None:
    specs = R.deepmath_rewards(max_tokens=100, buffer=20)
    assert [(s.name, s.weight) for s in specs] == [
        ("accuracy", 0.1), ("code_use", 1.0), ("overlong", 0.1)]
    model = RewardModel(specs)
    got = model.score(TASK, traj("4", tools=[OK], model_tokens=90))
    assert got.terms == {"accuracy": 0.0, "code_use": 1.0, "overlong": pytest.approx(-0.5)}
    assert got.total == pytest.approx(1.0 - 0.05)
    assert [s.name for s in R.deepmath_rewards(max_tokens=None)] == ["accuracy", "code_use"]


def test_default_rewards_and_weight_zero_is_logged_only() -> None:
    assert RewardModel().keys == ["accuracy"]
    assert R.default_rewards() == list(R.DEFAULT_REWARDS)
    model = RewardModel([{"name": "accuracy"}, {"name": "format", "weight": 0}])
    got = model.score(TASK, traj("4"))
    assert got.terms == {"accuracy": 0.0, "format": 1.0} and got.total == 0.0


def test_keys_are_unique() -> None:
    model = RewardModel([
        RewardSpec(name="overlong", weight=1, params={"max_tokens": 100}),
        RewardSpec(name="overlong", weight=1, params={"max_tokens": 50}),
        RewardSpec(name="accuracy", key="overlong"),
        RewardSpec(name="tests.unit.test_rl_rewards:my_reward")])
    assert model.keys == ["overlong", "overlong_2", "overlong_3", "my_reward"]
    got = model.score(TASK, traj("3", model_tokens=70))
    assert got.terms["overlong"] == 0.0 and got.terms["overlong_2"] == -1.0
    assert got.terms["overlong_3"] == 1.0


def test_grading_runs_once(grade_calls: list[str]) -> None:
    model = RewardModel(R.agentmath_rewards() + [RewardSpec(name="code_use", weight=1.0,
                                                            params={"require_correct": True})])
    t = traj("3", tools=[OK])
    first = model.score(TASK, t)
    second = model.score(TASK, t)
    assert first == second and first.correct
    assert len(grade_calls) == 1
    assert R.accuracy_reward(TASK, t) == 1.0 and len(grade_calls) == 1


def test_ascore_matches_score_and_grades_once(grade_calls: list[str]) -> None:
    model = RewardModel(R.agentmath_rewards() + [
        RewardSpec(name="tests.unit.test_rl_rewards:my_reward", params={"bonus": 1})])
    t, u = traj("3", tools=[OK]), traj("3", tools=[OK])
    got = asyncio.run(model.ascore(TASK, t))
    assert got == model.score(TASK, u)
    assert got.terms["my_reward"] == 1.5
    assert got.total == pytest.approx(1.0 + 0.11 + 1.5)
    assert len(grade_calls) == 2  # one per trajectory
    asyncio.run(model.ascore(TASK, t))
    assert len(grade_calls) == 2


def test_user_reward_by_import_path() -> None:
    spec = RewardSpec(name="tests.unit.test_rl_rewards:my_reward", weight=2.0,
                      params={"bonus": 0.25})
    assert spec.label == "my_reward" and not spec.is_builtin
    got = RewardModel([spec]).score(TASK, traj("4", tools=[OK, FAILED]))
    assert got.terms == {"my_reward": 1.25} and got.total == 2.5


def test_raising_user_reward_is_recorded_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    model = RewardModel([{"name": "accuracy"},
                         {"name": "tests.unit.test_rl_rewards:raising_reward", "weight": 5},
                         {"name": "tests.unit.test_rl_rewards:nan_reward", "weight": 5}])
    t = traj("3")
    with caplog.at_level(logging.WARNING, logger="agentmath.rl.rewards"):
        got = model.score(TASK, t)
    assert got.terms == {"accuracy": 1.0, "raising_reward": 0.0, "nan_reward": 0.0}
    assert got.total == 1.0
    errors = t.reward_errors
    assert errors[0] == "raising_reward: RuntimeError: boom"
    assert errors[1].startswith("nan_reward: returned nan")
    assert "boom" in caplog.text


# ---------------------------------------------------------------- bad configs
def _error(data: dict) -> tuple[tuple, str]:
    with pytest.raises(ValidationError) as info:
        RewardSpec.model_validate(data)
    err = info.value.errors()[0]
    return err["loc"], err["msg"]


def test_unknown_reward_names_the_field() -> None:
    loc, msg = _error({"name": "acuracy", "weight": 1})
    assert loc == ("name",)
    assert "unknown reward 'acuracy'" in msg and "accuracy" in msg and "Traceback" not in msg


def test_negative_or_infinite_weight_names_the_field() -> None:
    assert _error({"name": "accuracy", "weight": -1})[0] == ("weight",)
    assert _error({"name": "accuracy", "weight": float("inf")})[0] == ("weight",)


@pytest.mark.parametrize(("name", "expected"), [
    ("no_such_pkg.rewards:fn", "cannot import module 'no_such_pkg.rewards'"),
    ("tests.unit.test_rl_rewards:missing", "has no 'missing'"),
    ("tests.unit.test_rl_rewards:NOT_CALLABLE", "'NOT_CALLABLE' is not callable"),
    ("tests.unit.test_rl_rewards:", "package.module:function"),
])
def test_bad_import_path_names_the_reward(name: str, expected: str) -> None:
    loc, msg = _error({"name": name})
    assert loc == ("name",)
    assert expected in msg and repr(name) in msg


@pytest.mark.parametrize(("data", "expected"), [
    ({"name": "accuracy", "params": {"timeout": 3}}, "(it takes: no params)"),
    ({"name": "overlong"}, "max_tokens"),
    ({"name": "overlong", "params": {"max_tokens": 100, "buffer": 200}}, "buffer must be"),
    ({"name": "tool_efficiency", "params": {"alpha": "big"}}, "alpha must be a finite number"),
    ({"name": "code_use", "params": {"require_correct": 1}}, "require_correct"),
    ({"name": "tests.unit.test_rl_rewards:my_reward", "params": {"bonnus": 1}}, "bonnus"),
])
def test_bad_params_name_the_field(data: dict, expected: str) -> None:
    loc, msg = _error(data)
    assert loc == ("params",)
    assert expected in msg and repr(data["name"]) in msg


def test_parse_rewards_raises_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"rewards\[1\]\.weight: .*greater than or equal"):
        R.parse_rewards([{"name": "accuracy"}, {"name": "format", "weight": -0.5}])
    with pytest.raises(ConfigError, match=r"rewards\[0\]\.name: .*unknown reward 'nope'"):
        RewardModel([{"name": "nope"}])
    with pytest.raises(ConfigError, match="at least one reward"):
        RewardModel([])


class _RunConfig(StrictModel):
    rewards: list[RewardSpec]


def test_a_config_file_reports_the_bad_reward_field(tmp_path) -> None:
    path = tmp_path / "rl.toml"
    path.write_text('[[rewards]]\nname = "accuracy"\n[[rewards]]\nname = "overlong"\n'
                    'weight = 0.5\nparams = { max_tokens = 4096, buffer = 512 }\n')
    config = load_config(_RunConfig, path)
    assert RewardModel(config.rewards).keys == ["accuracy", "overlong"]
    path.write_text('[[rewards]]\nname = "accuracy"\nweight = -2\n')
    with pytest.raises(ConfigError, match=r"rewards\.0\.weight: .*greater than or equal"):
        load_config(_RunConfig, path)
    path.write_text('[[rewards]]\nname = "mypkg.nowhere:fn"\n')
    with pytest.raises(ConfigError, match=r"rewards\.0\.name: .*cannot import module 'mypkg"):
        load_config(_RunConfig, path)


def test_specs_are_frozen_and_round_trip() -> None:
    spec = R.agentmath_rewards()[1]
    with pytest.raises(ValidationError):
        spec.weight = 3.0  # type: ignore[misc]
    assert RewardSpec.model_validate(spec.model_dump()) == spec
    assert spec.params == {"alpha": 0.1, "beta": 0.01, "r_max": 1.0}
