"""Temperature and LR schedules, multi-stage budgets, dynamic sampling, the request stream and
config errors of agentic GRPO (no model needed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentmath.agent.trajectory import Segment, Trajectory
from agentmath.config import load_config
from agentmath.errors import ConfigError, DataError
from agentmath.rl.config import RLConfig
from agentmath.rl.rewards import RewardModel
from agentmath.rl.rollouts import Collected, RequestStream, collect_groups
from agentmath.rl.schedules import Stage, StageController, linear, lr_factor
from agentmath.rollout.partial import IterationResult
from agentmath.rollout.records import Group, GroupRequest, PendingGroup, RolloutStats, Sample
from agentmath.tasks import Task


def test_linear_temperature_schedule_deepmath() -> None:
    temps = [linear(1.2, 0.7, step, 11) for step in range(11)]
    assert temps[0] == 1.2 and temps[-1] == pytest.approx(0.7)
    assert temps[5] == pytest.approx(0.95)
    assert all(a > b for a, b in zip(temps, temps[1:], strict=False))
    assert linear(1.2, 0.7, 50, 11) == pytest.approx(0.7)  # past the end: stays
    assert linear(1.0, 0.5, 0, 1) == 0.5


def test_lr_warmup_then_decay() -> None:
    assert [lr_factor(d, 4, 12) for d in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(8, 4, 12) == pytest.approx(0.5)  # linear: half way down
    assert lr_factor(12, 4, 12) == 0.0
    assert lr_factor(8, 4, 12, "cosine") == pytest.approx(0.5)
    assert lr_factor(100, 0, 10, "constant") == 1.0
    assert lr_factor(12, 4, 12, "linear", min_factor=0.1) == pytest.approx(0.1)


STAGES = [Stage(48_000, 40_000, 48), Stage(72_000, 64_000, 72), Stage(96_000, 88_000, 96)]


def test_stage_moves_when_windowed_truncation_rate_passes_threshold() -> None:
    ctl = StageController(STAGES, threshold=0.1, window=100)
    assert ctl.observe(1, 5, 50) is None  # window not full yet
    assert ctl.observe(2, 4, 50) is None  # 9 of 100: below 10%
    change = ctl.observe(3, 2, 50)
    # window holds the newest whole steps with 100 samples: steps 2 and 3 -> 6% : no change
    assert change is None and ctl.index == 0
    change = ctl.observe(4, 10, 50)  # steps 3 and 4: 2 + 10 = 12%
    assert change is not None and (change.old, change.new, change.step) == (0, 1, 4)
    assert change.rate == pytest.approx(0.12)
    assert ctl.stage.max_tool_calls == 72
    assert ctl.observe(5, 50, 50) is None  # the window restarts after a change
    assert ctl.observe(6, 50, 50) is not None and ctl.index == 2
    assert ctl.observe(7, 100, 100) is None  # last stage: stays


def test_stage_controller_state_round_trips() -> None:
    ctl = StageController(STAGES, threshold=0.5, window=10)
    ctl.observe(1, 3, 6)
    again = StageController(STAGES, threshold=0.5, window=10)
    again.load_state_dict(ctl.state_dict())
    assert again.index == ctl.index and again.rate == ctl.rate
    assert again.observe(2, 4, 4) == ctl.observe(2, 4, 4)


def test_request_stream_is_seeded_epochwise_and_resumes_at_its_cursor() -> None:
    tasks = [Task(str(i), f"p{i}", "1") for i in range(5)]
    a = RequestStream(tasks, 4, seed=3, shuffle=True)
    first = [next(a).task.id for _ in range(12)]
    assert sorted(first[:5]) == sorted(t.id for t in tasks)  # an epoch is a permutation
    b = RequestStream(tasks, 4, seed=3, shuffle=True, cursor=7)
    again = b.redraw(PendingGroup(2, first[2]))
    assert again is not None and again.position == 2 and again.task.id == first[2]
    b.requeue(again)
    assert b.requeued() == [PendingGroup(2, first[2])]
    assert next(b) is again  # requeued first, at its own position, the cursor unmoved
    assert [(r.task.id, r.position) for r in (next(b) for _ in range(5))] == \
        list(zip(first[7:12], range(7, 12), strict=True))
    assert next(b).samples == 4
    # the same position gives the same seeds whichever way it was drawn
    c = RequestStream(tasks, 4, seed=3, shuffle=True)
    third = [next(c) for _ in range(3)][2]
    assert c.sample_seed(third, 1, 5) == b.sample_seed(again, 1, 5)
    other = next(t.id for t in tasks if t.id != first[2])
    with pytest.raises(DataError, match="changed since"):
        b.redraw(PendingGroup(2, other))
    with pytest.raises(DataError, match="never drawn"):
        b.redraw(PendingGroup(40, first[0]))


def _group(gid: str, rewards: list[float]) -> Group:
    req = GroupRequest(Task(gid, "p", "1"), samples=len(rewards))
    samples = [Sample(gid, i, Trajectory("p", [Segment("model", "x", [1])],
                                         finish_reason="answered", meta={"r": r}))
               for i, r in enumerate(rewards)]
    return Group(req, samples)


def meta_reward(task: Task, trajectory: Trajectory) -> float:
    return float(trajectory.meta["r"])


class FakeRollout:
    """Hands out prepared groups, as PartialRollout.iteration would."""

    def __init__(self, groups: list[Group]) -> None:
        self.groups = groups
        self.asked: list[int] = []

    async def iteration(self, n: int) -> IterationResult:
        self.asked.append(n)
        out, self.groups = self.groups[:n], self.groups[n:]
        return IterationResult(0, out, RolloutStats(groups_done=len(out)), not self.groups)


def test_dynamic_sampling_drops_flat_groups_and_backfills() -> None:
    rewards = RewardModel([{"name": "tests.unit.test_rl_schedules:meta_reward"}])
    rollout = FakeRollout([_group("a", [1, 0]), _group("b", [1, 1]), _group("c", [0, 0]),
                           _group("d", [0, 1]), _group("e", [1, 0])])
    got = asyncio.run(collect_groups(rollout, rewards, 2, dynamic_sampling=True,  # type: ignore[arg-type]
                                     max_rounds=5))
    assert [g.group.request.task.id for g in got.groups] == ["a", "d"]
    assert [g.group.request.task.id for g in got.dropped] == ["b", "c"]
    assert rollout.asked == [2, 1, 1] and got.rounds == 3  # back-filled one at a time
    assert got.stats.groups_done == 4  # every round's counters add up
    off = asyncio.run(collect_groups(FakeRollout([_group("b", [1, 1]), _group("a", [1, 0])]),
                                     rewards, 2, dynamic_sampling=False, max_rounds=5))  # type: ignore[arg-type]
    assert len(off.groups) == 2 and not off.dropped


def test_a_larger_generation_batch_replaces_flat_groups_in_the_same_round() -> None:
    """draw_factor 2: a round draws twice what is missing; the first groups with signal are
    trained on, in the order the round returned them, those beyond the need are surplus
    (their samples still count as generated), and the flat ones are dropped."""
    rewards = RewardModel([{"name": "tests.unit.test_rl_schedules:meta_reward"}])
    rollout = FakeRollout([_group("a", [1, 0]), _group("b", [1, 1]), _group("c", [0, 1]),
                           _group("d", [0, 0]), _group("e", [1, 0]), _group("f", [0, 1])])
    got = asyncio.run(collect_groups(rollout, rewards, 2, dynamic_sampling=True,  # type: ignore[arg-type]
                                     max_rounds=5, draw_factor=2.0))
    assert rollout.asked == [4] and got.rounds == 1  # one round instead of two
    assert [g.group.request.task.id for g in got.groups] == ["a", "c"]
    assert [g.group.request.task.id for g in got.dropped] == ["b", "d"]
    assert got.surplus == []
    assert len(got.all_samples) == 8
    # a round with more groups with signal than missing: the rest are surplus
    rollout = FakeRollout([_group("a", [1, 0]), _group("b", [1, 1]), _group("c", [0, 1]),
                           _group("d", [0, 1]), _group("e", [1, 0]), _group("f", [0, 1])])
    got = asyncio.run(collect_groups(rollout, rewards, 3, dynamic_sampling=True,  # type: ignore[arg-type]
                                     max_rounds=5, draw_factor=1.5))
    assert rollout.asked == [5]  # ceil(3 * 1.5)
    assert [g.group.request.task.id for g in got.groups] == ["a", "c", "d"]
    assert [g.group.request.task.id for g in got.surplus] == ["e"]
    assert len(got.all_samples) == 10
    # a second round draws the factor times what is still missing
    rollout = FakeRollout([_group("a", [1, 1]), _group("b", [1, 1]), _group("c", [0, 0]),
                           _group("d", [1, 0]), _group("e", [1, 0]), _group("f", [0, 1])])
    got = asyncio.run(collect_groups(rollout, rewards, 2, dynamic_sampling=True,  # type: ignore[arg-type]
                                     max_rounds=5, draw_factor=1.5))
    assert rollout.asked == [3, 3] and got.rounds == 2
    assert [g.group.request.task.id for g in got.groups] == ["d", "e"]
    assert [g.group.request.task.id for g in got.surplus] == ["f"]
    # without dynamic sampling the factor draws nothing more
    rollout = FakeRollout([_group("a", [1, 1]), _group("b", [1, 0]), _group("c", [0, 1])])
    off = asyncio.run(collect_groups(rollout, rewards, 2, dynamic_sampling=False,  # type: ignore[arg-type]
                                     max_rounds=5, draw_factor=2.0))
    assert rollout.asked == [2] and len(off.groups) == 2
    with pytest.raises(ValueError, match="draw_factor"):
        asyncio.run(collect_groups(FakeRollout([]), rewards, 2, dynamic_sampling=True,  # type: ignore[arg-type]
                                   max_rounds=5, draw_factor=0.5))


def test_dynamic_sampling_gives_up_after_max_rounds() -> None:
    rewards = RewardModel([{"name": "tests.unit.test_rl_schedules:meta_reward"}])
    rollout = FakeRollout([_group(str(i), [1, 1]) for i in range(10)])
    got = asyncio.run(collect_groups(rollout, rewards, 2, dynamic_sampling=True,  # type: ignore[arg-type]
                                     max_rounds=2))
    assert got.groups == [] and len(got.dropped) == 4 and got.rounds == 2
    event = got.no_update(3)
    assert (event.cause, event.why) == ("no_variance", "no group with reward variance "
                                                       "(4 group(s) without)")


def test_a_step_with_no_group_says_why() -> None:
    """Each way a step ends with nothing to train on has its own NoUpdate cause; a record
    written before causes existed reads as no_variance (all it ever said)."""
    from agentmath.rl.records import NoUpdate, event_from_dict

    rewards = RewardModel([{"name": "tests.unit.test_rl_schedules:meta_reward"}])
    none = asyncio.run(collect_groups(FakeRollout([]), rewards, 2, dynamic_sampling=True,  # type: ignore[arg-type]
                                      max_rounds=3))
    assert none.no_update(1).cause == "no_groups" and "prompts ran out" in none.no_update(1).why
    short = Collected([], dropped=none.dropped, rounds=2, stats=RolloutStats(draws_stopped=1))
    short.dropped.append(object())  # type: ignore[arg-type]  # a group without variance
    assert short.no_update(2).cause == "no_variance"
    assert "draw bound (max_new_groups) ended 1 iteration(s) short" in short.no_update(2).why
    filtered = Collected([], filtered=[object()], rounds=1)  # type: ignore[list-item]
    assert filtered.no_update(3).cause == "filtered"
    old = event_from_dict({"event": "no_update", "step": 4,
                           "why": "no group with reward variance"})
    assert old == NoUpdate(4, "no group with reward variance", "no_variance")
    with pytest.raises(ValueError, match="unknown no-update cause"):
        NoUpdate(5, "?", "other")


@pytest.mark.parametrize(("override", "field"), [
    ("group_size=1", "group_size"),
    ("loss.clip_low=-0.1", "loss.clip_low"),
    ("steps=0", "steps"),
    ("generator.backend=openai", "generator.base_urls"),
    ("generation_batch_factor=0.5", "generation_batch_factor"),
    ("generation_batch_factor=9", "generation_batch_factor"),
])
def test_bad_config_names_the_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(RLConfig, None, ["model=m", "data.dataset=d", override])


def test_a_generation_batch_needs_dynamic_sampling() -> None:
    with pytest.raises(ConfigError, match="generation_batch_factor"):
        load_config(RLConfig, None, ["model=m", "data.dataset=d", "dynamic_sampling=false",
                                     "generation_batch_factor=2"])
    cfg = load_config(RLConfig, None, ["model=m", "data.dataset=d",
                                       "generation_batch_factor=1.5"])
    assert cfg.generation_batch_factor == 1.5


def test_bad_reward_config_names_the_field(tmp_path: Path) -> None:
    for body, field in (('name = "acuracy"\nweight = 1.0', "rewards.0.name"),
                        ('name = "accuracy"\nweight = -1.0', "rewards.0.weight"),
                        ('name = "no.such.module:fn"\nweight = 1.0', "rewards.0.name")):
        path = tmp_path / "rl.toml"
        path.write_text(f'model = "m"\n[data]\ndataset = "d"\n[[rewards]]\n{body}\n')
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            load_config(RLConfig, path)


def test_importing_the_rl_config_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, agentmath.rl.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_stage_controller_counts_a_step_larger_than_the_window_whole() -> None:
    """16 of 112 samples truncated in one step, window 64: the rate is 16/112 and the stage
    moves on (the window once kept only the step's last 64 flags, all untruncated)."""
    ctl = StageController(STAGES, threshold=0.05, window=64)
    change = ctl.observe(1, 16, 112)
    assert change is not None and ctl.index == 1 and abs(change.rate - 16 / 112) < 1e-12


def test_stage_controller_reads_a_checkpoint_of_per_sample_flags() -> None:
    ctl = StageController(STAGES, threshold=0.5, window=10)
    ctl.load_state_dict({"index": 0, "recent": [1, 0, 1, 1, 0, 0]})  # written before steps
    assert ctl.seen == 6 and ctl.rate == 0.5
    assert ctl.observe(2, 4, 4) is not None
