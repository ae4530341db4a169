"""The rollout filters of agentic GRPO (agentmath/rl/filters.py) on hand-made trajectories and
groups: resample-on-correct, void turns, the pass-rate filter, their counters, their config, and
the tool-call rate (no model needed)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import Counter

import pytest

from agentmath.agent.trajectory import Segment, Trajectory
from agentmath.config import load_config
from agentmath.errors import ConfigError
from agentmath.grading import Grade
from agentmath.rl.batch import ScoredGroup, ScoredSample
from agentmath.rl.config import FilterConfig, RLConfig
from agentmath.rl.filters import (
    FilterPlan,
    Turn,
    filter_group,
    has_void_turn,
    model_turns,
    pass_rate,
    pass_rate_inside,
    resample_on_correct,
    roc_penalty,
    roc_quota,
    tool_error_ratio,
    void_survivors,
)
from agentmath.rl.metrics import StepMetrics, sample_stats, staleness_stats
from agentmath.rl.rewards import RewardModel
from agentmath.rl.rollouts import RequestStream, collect_groups
from agentmath.rollout.partial import IterationResult
from agentmath.rollout.records import Group, GroupRequest, RolloutStats, Sample
from agentmath.sandbox.result import ExecResult
from agentmath.tasks import Task


# ---------------------------------------------------------------- hand-made trajectories
def model(text: str, finish: str = "stop") -> Segment:
    return Segment("model", text, [1, 2], [-0.1, -0.2], finish)


def tool(ok: bool = True, code: str | None = "x = 1") -> Segment:
    result = ExecResult(stdout="1") if ok else ExecResult(error="NameError: y")
    return Segment("tool", "out", [3], code=code, result=result)


def traj(*segments: Segment, finish: str = "answered", answer: str | None = "3",
         correct: bool | None = None) -> Trajectory:
    grade = None if correct is None else Grade.from_record(correct, answer)
    return Trajectory("p", [Segment("prompt", "p", [0]), *segments], finish_reason=finish,
                      answer=answer, grade=grade)


CLEAN = traj(model("```python\nx = 1\n```"), tool(), model(r"so \boxed{3}"))
NO_TOOL = traj(model(r"\boxed{3}"))
BROKEN = traj(model("code"), tool(ok=False), model("code"), tool(), model(r"\boxed{3}"))
VOID = traj(model("hmm"), tool(ok=False, code=None), model(r"\boxed{3}"))  # an unreadable call


def scored(gid: str, trajectories: list[Trajectory], correct: list[bool],
           rewards: list[float] | None = None) -> ScoredGroup:
    rewards = rewards if rewards is not None else [float(c) for c in correct]
    request = GroupRequest(Task(gid, "p", "3"), samples=len(trajectories))
    group = Group(request, [Sample(gid, i, t) for i, t in enumerate(trajectories)])
    return ScoredGroup(group, [ScoredSample(gid, i, t, r, {}, c) for i, (t, r, c) in
                               enumerate(zip(trajectories, rewards, correct, strict=True))])


def indices(group: ScoredGroup | None) -> list[int]:
    assert group is not None
    return [s.index for s in group.samples]


class Median(random.Random):
    """random() is always 0.5: weighted_sample then keeps the heaviest weights, in order."""

    def random(self) -> float:
        return 0.5


# ---------------------------------------------------------------- void turns
def test_turns_join_parked_model_segments_and_attach_their_calls() -> None:
    t = traj(model("a", "length"), model("b"), tool(), tool(), model(r"\boxed{3}"))
    assert model_turns(t) == [Turn("ab", True, False), Turn(r"\boxed{3}", False, True)]
    assert model_turns(traj(finish="error")) == []


@pytest.mark.parametrize(("trajectory", "void"), [
    (CLEAN, False),  # code ran, then an answer
    (BROKEN, False),  # a failed call still ran code: RoC's business, not a void turn
    (traj(model("I am done."), finish="eos", answer=None), True),  # ended, nothing in it
    (traj(model("x = 1"), tool(), model("so it is"), finish="eos", answer=None), True),
    (traj(model(r"\boxed{3} ok"), finish="eos"), False),  # stop_on_answer off: answer, eos
    (traj(model("long reasoning", "length"), finish="token_budget", answer=None), False),
    (traj(model("```python\nx\n```"), finish="tool_budget", answer=None), False),
    (traj(model("x"), finish="time_budget", answer=None), False),
    (traj(model("x"), finish="error", answer=None), False),  # the backend failed, not the model
    (VOID, True),  # an earlier turn whose only call carried no code
    (traj(model("a"), tool(False, None), tool(), model(r"\boxed{3}")), False),  # one call ran
    (traj(finish="error", answer=None), False),  # no model turn at all
])
def test_has_void_turn(trajectory: Trajectory, void: bool) -> None:
    assert has_void_turn(trajectory) is void


def test_void_survivors_keep_the_rest_or_drop_the_group() -> None:
    assert void_survivors([False] * 3, [1.0, 1.0, 1.0]) == [0, 1, 2]  # untouched: as it was
    assert void_survivors([False, True, False, False], [1, 0, 0, 1]) == [0, 2, 3]
    assert void_survivors([True, True, False, True], [1, 0, 0, 1]) is None  # one left
    assert void_survivors([False, True, False], [1.0, 0.0, 1.0]) is None  # no variance left


# ---------------------------------------------------------------- resample on correct
def test_roc_penalty_is_tool_error_ratio_plus_format() -> None:
    assert tool_error_ratio(CLEAN) == 0.0 and roc_penalty(CLEAN) == 0.0
    assert tool_error_ratio(NO_TOOL) == 0.5 and roc_penalty(NO_TOOL) == 0.5
    assert tool_error_ratio(BROKEN) == 0.5 and roc_penalty(BROKEN) == 0.5
    timed_out = traj(model("c"), Segment("tool", "t", [3], code="while 1: pass",
                                         result=ExecResult(timed_out=True)), model(r"\boxed{3}"))
    assert tool_error_ratio(timed_out) == 1.0
    assert roc_penalty(VOID) == 1.0 + 1.0  # its call failed, and a void turn
    assert roc_penalty(traj(model("x"), tool(), model("done"), answer=None)) == 1.0


@pytest.mark.parametrize(("n_correct", "n_failed", "keep", "quota"), [
    (4, 4, 4, (2, 2)),  # oversample 2: half of each side
    (6, 10, 8, (3, 5)),  # each side its share: the pass rate stays 3/8
    (5, 3, 4, (2, 2)),  # 1.5 failed rounds half up
    (7, 1, 4, (3, 1)),
    (1, 7, 4, (1, 3)),  # 3.5 failed rounds to 4, but one correct stays (variance)
    (1, 15, 4, (1, 3)),
    (0, 8, 4, (0, 4)), (8, 0, 4, (4, 0)),  # one side only: filled from it
    (2, 1, 4, (2, 1)),  # no more than the group has: everything
])
def test_roc_quota(n_correct: int, n_failed: int, keep: int, quota: tuple[int, int]) -> None:
    assert roc_quota(n_correct, n_failed, keep) == quota


def test_resample_on_correct_keeps_the_cleanest_successes() -> None:
    correct = [True, False, True, True, False, True, False, False]
    penalties = [1.5, 0.0, 0.0, 0.5, 2.0, 1.0, 0.0, 0.0]
    kept = resample_on_correct(correct, penalties, 4, Median(7))
    # 2 correct, 2 failed; at equal draws the lowest penalties win: indices 2 (0.0) and 3 (0.5)
    assert [i for i in kept if correct[i]] == [2, 3]
    assert len([i for i in kept if not correct[i]]) == 2 and kept == sorted(kept)
    # seeded: the same seed keeps the same samples
    assert resample_on_correct(correct, penalties, 4, random.Random(11)) == \
        resample_on_correct(correct, penalties, 4, random.Random(11))


def test_resample_on_correct_probability_falls_with_penalty() -> None:
    correct = [True] * 4 + [False] * 4
    penalties = [0.0, 0.5, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    kept: Counter[int] = Counter()
    for seed in range(2000):
        kept.update(resample_on_correct(correct, penalties, 4, random.Random(seed)))
    assert kept[0] > kept[1] > kept[2] > kept[3] > 0  # a success with errors may still stay
    assert all(abs(kept[i] - 1000) < 150 for i in range(4, 8))  # failures: uniform, 2 of 4


def test_resample_on_correct_rejects_bad_penalties() -> None:
    with pytest.raises(ValueError, match="penalties"):
        resample_on_correct([True, False], [-1.0, 0.0], 1, random.Random(0))
    with pytest.raises(ValueError, match="2 correct flags but 1"):
        resample_on_correct([True, False], [0.0], 1, random.Random(0))


# ---------------------------------------------------------------- over groups
ON = FilterConfig(oversample=2, resample_on_correct=True, drop_void_turns=True,
                  pass_rate_filter=True)


def test_pass_rate_bounds_are_exclusive() -> None:
    assert pass_rate([True, False, False, False]) == 0.25 and pass_rate([]) == 0.0
    assert not pass_rate_inside(0.0, 0.0, 1.0) and not pass_rate_inside(1.0, 0.0, 1.0)
    assert pass_rate_inside(0.25, 0.0, 1.0) and not pass_rate_inside(0.25, 0.25, 0.75)


def test_default_filters_change_nothing() -> None:
    group = scored("g", [VOID, VOID, CLEAN, NO_TOOL, BROKEN], [True] * 5)
    verdict = filter_group(group, FilterConfig(), 2, random.Random(0))
    assert verdict.group is group and verdict.removed == []
    assert (verdict.pass_rate_dropped, verdict.void_group_dropped, verdict.void_dropped,
            verdict.roc_dropped) == (False, False, 0, 0)


def test_pass_rate_filter_drops_whole_groups_measured_before_roc() -> None:
    cfg = FilterConfig(pass_rate_filter=True, pass_rate_low=0.2, pass_rate_high=0.9)
    ts = [CLEAN] * 8
    # 1 of 8 correct (0.125 < 0.2): dropped, though RoC would keep 1 of 4 (0.25)
    v = filter_group(scored("a", ts, [True] + [False] * 7), cfg, 4, random.Random(0))
    assert v.group is None and v.pass_rate_dropped and v.removed == []
    v = filter_group(scored("b", ts, [True] * 8), cfg, 4, random.Random(0))
    assert v.group is None and v.pass_rate_dropped
    v = filter_group(scored("c", ts, [True, True] + [False] * 6), cfg, 4, random.Random(0))
    assert v.group is not None and not v.pass_rate_dropped


def test_void_samples_leave_their_group() -> None:
    cfg = FilterConfig(drop_void_turns=True)
    group = scored("g", [CLEAN, VOID, BROKEN, NO_TOOL], [True, True, False, False])
    v = filter_group(group, cfg, 4, random.Random(0))
    assert indices(v.group) == [0, 2, 3] and [s.index for s in v.removed] == [1]
    assert (v.void_dropped, v.void_group_dropped, v.roc_dropped) == (1, False, 0)
    # what is left has no reward variance: the whole group goes
    v = filter_group(scored("h", [CLEAN, VOID, CLEAN], [True, False, True]), cfg, 4,
                     random.Random(0))
    assert v.group is None and v.void_group_dropped and v.void_dropped == 1
    v = filter_group(scored("i", [CLEAN, VOID, VOID], [True, False, True]), cfg, 4,
                     random.Random(0))
    assert v.group is None and v.void_group_dropped and v.void_dropped == 2


def test_all_filters_in_order_void_then_roc() -> None:
    ts = [CLEAN, VOID, BROKEN, NO_TOOL, CLEAN, CLEAN, BROKEN, NO_TOOL]
    correct = [True, True, True, True, False, False, False, False]
    v = filter_group(scored("g", ts, correct), ON, 4, Median(3))
    # void: sample 1 goes; RoC on the 7 left (3 correct, 4 failed): 2 failed + 2 correct,
    # the correct ones with the lowest penalties: 0 (0.0) and 2 or 3 (0.5, 0.5; the first)
    kept = indices(v.group)
    assert len(kept) == 4 and {0, 2} <= set(kept) and 3 not in kept
    assert len([i for i in kept if i >= 4]) == 2
    assert v.void_dropped == 1 and v.roc_dropped == 3 and len(v.removed) == 4
    assert sorted(s.index for s in v.removed) == sorted(set(range(8)) - set(kept))


class FakeRollout:
    """Hands out prepared groups, as PartialRollout.iteration would."""

    def __init__(self, groups: list[Group]) -> None:
        self.groups = groups

    async def iteration(self, n: int) -> IterationResult:
        out, self.groups = self.groups[:n], self.groups[n:]
        return IterationResult(0, out, RolloutStats(groups_done=len(out)), not self.groups)


def rollout_group(gid: str, trajectories: list[Trajectory]) -> Group:
    request = GroupRequest(Task(gid, "p", "3"), samples=len(trajectories))
    return Group(request, [Sample(gid, i, t) for i, t in enumerate(trajectories)])


def ok(correct: bool) -> Trajectory:
    return traj(model("x"), tool(), model(r"\boxed{3}"), correct=correct)


def test_collect_groups_applies_the_filters_and_counts_each() -> None:
    void_ok = traj(model("hmm"), tool(ok=False, code=None), model(r"\boxed{3}"), correct=True)
    groups = [
        rollout_group("all-right", [ok(True)] * 4),  # pass rate 1: pass-rate filter
        rollout_group("mixed", [ok(True), void_ok, ok(False), ok(False)]),  # 1 void sample
        rollout_group("void", [void_ok, void_ok, void_ok, ok(False)]),  # 1 left: dropped
        rollout_group("roc", [ok(True)] * 3 + [ok(False)] * 3),  # 6 -> 3
    ]
    plan = FilterPlan(ON, group_size=3, seed=5, step=2)
    rewards = RewardModel([{"name": "accuracy"}])
    got = asyncio.run(collect_groups(FakeRollout(groups), rewards, 4,  # type: ignore[arg-type]
                                     dynamic_sampling=True, max_rounds=1, filters=plan))
    assert [g.group.request.task.id for g in got.groups] == ["mixed", "roc"]
    assert [g.group.request.task.id for g in got.filtered] == ["all-right", "void"]
    assert indices(got.groups[0]) == [0, 2, 3] and len(got.groups[1].samples) == 3
    assert (got.pass_rate_dropped, got.void_groups_dropped, got.void_dropped,
            got.roc_dropped) == (1, 1, 4, 3)
    assert got.dropped == []  # dynamic sampling found nothing left to drop
    assert got.prompt_ids() == (["mixed", "roc"], {"filtered": ["all-right", "void"]})
    assert len(got.all_samples) == 18  # every sample generated, trained or not
    again = asyncio.run(collect_groups(FakeRollout(groups), rewards, 4,  # type: ignore[arg-type]
                                       dynamic_sampling=True, max_rounds=1, filters=plan))
    assert indices(again.groups[1]) == indices(got.groups[1])  # seeded by run, step, group


def test_collect_groups_without_filters_is_unchanged() -> None:
    groups = [rollout_group("a", [ok(True), ok(False)]), rollout_group("b", [ok(True)] * 2)]
    got = asyncio.run(collect_groups(FakeRollout(groups), RewardModel([{"name": "accuracy"}]),
                                     2, dynamic_sampling=True, max_rounds=1))  # type: ignore[arg-type]
    assert [g.group.request.task.id for g in got.groups] == ["a"]
    assert [g.group.request.task.id for g in got.dropped] == ["b"]
    assert got.filtered == [] and got.removed == [] and len(got.all_samples) == 4
    assert got.prompt_ids() == (["a"], {"no_variance": ["b"]})
    assert (got.pass_rate_dropped, got.void_groups_dropped, got.void_dropped,
            got.roc_dropped) == (0, 0, 0, 0)


def test_request_stream_oversamples() -> None:
    tasks = [Task("0", "p", "1")]
    assert next(RequestStream(tasks, 4, seed=0, shuffle=False, oversample=2)).samples == 8
    assert next(RequestStream(tasks, 4, seed=0, shuffle=False)).samples == 4


# ---------------------------------------------------------------- config and metrics
def test_filter_config_defaults_are_a_no_op() -> None:
    cfg = load_config(RLConfig, None, ["model=m", "data.dataset=d"]).filters
    assert cfg == FilterConfig(oversample=1, resample_on_correct=False, drop_void_turns=False,
                               pass_rate_filter=False, pass_rate_low=0.0, pass_rate_high=1.0)
    good = load_config(RLConfig, None, ["model=m", "data.dataset=d", "filters.oversample=2",
                                        "filters.resample_on_correct=true"])
    assert FilterPlan.of(good, 3) == FilterPlan(good.filters, 8, 0, 3)


@pytest.mark.parametrize(("overrides", "field"), [
    (["filters.resample_on_correct=true"], "filters.oversample"),
    (["filters.oversample=2"], "filters.oversample"),
    (["filters.oversample=0"], "filters.oversample"),
    (["filters.oversample=16", "filters.resample_on_correct=true", "group_size=512"],
     "filters.oversample"),
    (["filters.pass_rate_low=0.5", "filters.pass_rate_high=0.5"], "filters.pass_rate_low"),
    (["filters.pass_rate_high=1.5"], "filters.pass_rate_high"),
])
def test_bad_filter_config_names_the_field(overrides: list[str], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(RLConfig, None, ["model=m", "data.dataset=d", *overrides])


def test_tool_call_rate_and_old_metric_records_load() -> None:
    samples = [ScoredSample("g", i, t, 0.0, {}, False)
               for i, t in enumerate([CLEAN, NO_TOOL, NO_TOOL, BROKEN])]
    stats = sample_stats(samples)
    assert stats["tool_call_rate"] == 0.5 and stats["tool_calls_mean"] == 0.75
    assert sample_stats([])["tool_call_rate"] == 0.0
    required = {f.name: 0 for f in dataclasses.fields(StepMetrics)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    old = StepMetrics(**{**required, "reward_terms": {}})  # a line written before the filters
    assert (old.tool_call_rate, old.pass_rate_dropped, old.void_dropped,
            old.void_groups_dropped, old.roc_dropped) == (0.0, 0, 0, 0, 0)


def test_staleness_counts_versions_behind_the_trainer_from_the_oldest_turn() -> None:
    def sampled(*versions: int | None) -> ScoredSample:
        segments = [Segment("prompt", "p", [0])]
        segments += [Segment("model", "m", [1], [-0.1], "stop", policy_version=v)
                     for v in versions]
        return ScoredSample("g", 0, Trajectory("p", segments), 1.0, {}, True)

    # a partial episode begun under version 3 and finished under 5; one on-policy; one
    # from a backend that reports no version
    samples = [sampled(3, 5), sampled(5), sampled(None)]
    assert staleness_stats(samples, 5) == (2, pytest.approx(2 / 3))
    assert staleness_stats([], 5) == (0, 0.0)


# ---------------------------------------------------------------- infrastructure failures
KILLED = ExecResult(error="SandboxCrash: the sandbox process was killed by SIGKILL",
                    error_type="SandboxCrash", crashed=True, state_lost=True, infra=True)
OWN_CRASH = ExecResult(error="SandboxCrash: the sandbox process exited with code 3",
                       error_type="SandboxCrash", crashed=True, state_lost=True)


def with_result(result: ExecResult, correct: bool | None = None) -> Trajectory:
    return traj(model("code"), Segment("tool", "out", [3], code="x", result=result),
                model(r"\boxed{3}"), correct=correct)


@pytest.mark.parametrize("trajectory, why", [
    (CLEAN, None),
    (BROKEN, None),  # the model's own NameError
    (with_result(OWN_CRASH), None),  # its code exited the process
    (with_result(ExecResult(error="TimeoutError", timed_out=True)), None),  # its own timeout
    (with_result(KILLED), "SandboxCrash: the sandbox process was killed by SIGKILL"),
    (traj(model("x"), finish="error"), "the episode ended in an error"),
    (dataclasses.replace(traj(model("x"), finish="error"), error="HTTPStatusError: 503"),
     "HTTPStatusError: 503"),
    (dataclasses.replace(CLEAN, grade=Grade.error("grading timed out")),
     "grading failed: grading timed out"),
    # an unparsable gold is every sample's: not a failure of this one
    (dataclasses.replace(CLEAN, grade=Grade.error("bad gold", ungradable=True)), None),
])
def test_infra_failure_is_the_infrastructures_never_the_models(
        trajectory: Trajectory, why: str | None) -> None:
    assert trajectory.infra_failure == why


def test_infra_failures_leave_their_group_and_a_group_left_with_one_drops() -> None:
    from agentmath.rl.rollouts import Collected, exclude_infra_failures

    killed_right, killed_wrong = with_result(KILLED, True), with_result(KILLED, False)
    groups = [
        scored("one-killed", [CLEAN, killed_wrong, CLEAN, NO_TOOL], [True, False, False, True]),
        scored("three-killed", [CLEAN, killed_wrong, killed_right, killed_wrong],
               [True, False, True, False]),
        scored("clean", [CLEAN, NO_TOOL], [True, False]),
    ]
    out = Collected([])
    kept = exclude_infra_failures(groups, out)
    assert [g.group.request.task.id for g in kept] == ["one-killed", "clean"]
    assert indices(kept[0]) == [0, 2, 3] and kept[0].rewards == [1.0, 0.0, 1.0]
    assert out.infra_excluded == 1 + 3
    assert [g.group.request.task.id for g in out.infra_dropped] == ["three-killed"]
    assert [s.index for s in out.removed] == [1]  # the kept group's excluded sample
    out.groups = kept
    # every sample generated: the kept ones, the dropped group whole, the excluded one
    assert len(out.all_samples) == 3 + 2 + 4 + 1
    assert out.prompt_ids() == (["one-killed", "clean"], {"infra": ["three-killed"]})
    lost = Collected([])
    exclude_infra_failures(groups[1:2], lost)
    assert lost.no_update(3).cause == "infra"


def test_collect_groups_excludes_infra_failures_unless_told_not_to() -> None:
    killed = with_result(KILLED, False)
    groups = [rollout_group("g", [ok(True), killed, ok(False), ok(True)])]
    rewards = RewardModel([{"name": "accuracy"}])
    for exclude, samples, excluded in ((True, 3, 1), (False, 4, 0)):
        plan = FilterPlan(FilterConfig(exclude_infra_failures=exclude), group_size=4, seed=0,
                          step=1)
        got = asyncio.run(collect_groups(FakeRollout(groups), rewards, 1,  # type: ignore[arg-type]
                                         dynamic_sampling=True, max_rounds=1, filters=plan))
        assert len(got.groups[0].samples) == samples and got.infra_excluded == excluded


def test_a_rollout_dump_holds_every_sample_of_the_step_and_what_became_of_it(
        tmp_path) -> None:
    from agentmath.errors import DataError
    from agentmath.rl.dump import dump_path, read_rollout_dump, write_rollout_dump
    from agentmath.rl.rollouts import Collected, exclude_infra_failures

    killed = with_result(KILLED, False)
    groups = [scored("kept", [CLEAN, killed, NO_TOOL], [True, False, False]),
              scored("flat", [CLEAN, CLEAN], [True, True])]
    out = Collected([])
    kept = exclude_infra_failures(groups, out)
    out.groups, out.dropped = kept[:1], kept[1:]
    out.groups[0].samples[0].advantage = 1.0
    path = write_rollout_dump(tmp_path, 7, out)
    assert path == dump_path(tmp_path, 7) and path.name == "step-000007.jsonl.gz"
    records = read_rollout_dump(path)
    assert [(r.problem_id, r.sample_index, r.status) for r in records] == [
        ("kept", 0, "trained"), ("kept", 2, "trained"), ("flat", 0, "no_variance"),
        ("flat", 1, "no_variance"), ("kept", 1, "removed_infra")]
    assert records[0].advantage == 1.0 and records[0].step == 7
    assert records[0].trajectory.token_ids == CLEAN.token_ids  # the whole trajectory
    assert records[-1].trajectory.infra_failure is not None
    import gzip

    with gzip.open(path, "wt") as fh:
        fh.write('{"step": 1, "status": "lost"}\n')
    with pytest.raises(DataError, match=r"step-000007\.jsonl\.gz:1: field 'status'"):
        read_rollout_dump(path)
