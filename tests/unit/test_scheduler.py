"""The rollout engine: request-level scheduling, the sync baseline, partial rollout and
staleness, with a scripted backend and a fake sandbox."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from agentmath.backends.base import Generation, current_tag
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import LoopConfig, RolloutConfig
from agentmath.formats import get_format
from agentmath.rollout.partial import PartialRollout
from agentmath.rollout.records import GroupRequest
from agentmath.rollout.scheduler import RolloutEngine
from agentmath.tasks import Task
from tests.fixtures.sandboxes import FakeSandbox

FMT = get_format("code_interpreter")
TURNS = ["Set.\n<code>\nx = 41\n</code>", "Add.\n<code>\nprint(x + 1)\n</code>",
         "The answer is \\boxed{42}."]


class Tracing(ScriptedBackend):
    """Scripted turns with a per-group delay; records tags, concurrency and turn indices."""

    def __init__(self, delays: dict[str, float] | None = None, turns: Sequence[str] = TURNS,
                 fail_groups: Sequence[str] = ()) -> None:
        super().__init__(turns)
        self.delays = delays or {}
        self.fail_groups = set(fail_groups)
        self.running = 0
        self.peak = 0
        self.log: list[tuple[str, int]] = []  # (episode id, turn index) at each call start
        self.overlaps: list[set[int]] = []  # turn indices in flight when a call starts

    async def generate(self, prompt_ids: Sequence[int], **kwargs: Any) -> Generation:
        tag = current_tag.get()
        assert tag is not None and tag.group_id is not None
        turn = self._turn_index(prompt_ids)
        self.log.append((tag.episode_id, turn))
        self._inflight = getattr(self, "_inflight", [])
        self._inflight.append(turn)
        self.overlaps.append(set(self._inflight))
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            if tag.group_id in self.fail_groups:
                raise RuntimeError("a bug in a backend")
            await asyncio.sleep(self.delays.get(tag.group_id, 0.001))
            return await super().generate(prompt_ids, **kwargs)
        finally:
            self.running -= 1
            self._inflight.remove(turn)


def requests(n: int, samples: int = 2) -> list[GroupRequest]:
    return [GroupRequest(Task(f"p{i}", f"problem {i}", "42"), samples) for i in range(n)]


def engine(backend: Any, **config: Any) -> RolloutEngine:
    return RolloutEngine(backend, FakeSandbox(), FMT, loop=LoopConfig(),
                         config=RolloutConfig(**config))


async def test_groups_stream_out_complete_and_fast_ones_first() -> None:
    backend = Tracing(delays={"p0": 0.2})
    eng = engine(backend)
    order = []
    async for group in eng.stream(requests(4, samples=3)):
        assert group.complete and [s.index for s in group.samples] == [0, 1, 2]
        assert all(s.trajectory.answer == "42" for s in group.samples)
        order.append(group.request.group_id)
    assert sorted(order) == ["p0", "p1", "p2", "p3"]
    assert order[-1] == "p0"  # the slow group did not hold back the others
    assert eng.stats.groups_done == 4 and eng.stats.samples_done == 12


async def test_in_flight_bound_is_respected() -> None:
    backend = Tracing()
    eng = engine(backend, max_in_flight=3)
    groups = [g async for g in eng.stream(requests(5, samples=2))]
    assert len(groups) == 5 and backend.peak <= 3


async def test_sync_mode_is_lockstep() -> None:
    """Within a sync batch every call in flight is at the same turn (a barrier per turn)."""
    backend = Tracing(delays={"p1": 0.05})
    eng = engine(backend, mode="sync", max_in_flight=6)
    groups = [g async for g in eng.stream(requests(3, samples=2))]
    assert len(groups) == 3 and all(g.complete for g in groups)
    assert all(len(turns) == 1 for turns in backend.overlaps)
    async_backend = Tracing(delays={"p1": 0.05})
    [g async for g in engine(async_backend, max_in_flight=6).stream(requests(3, samples=2))]
    assert any(len(turns) > 1 for turns in async_backend.overlaps)  # no barrier there


async def test_an_episode_that_raises_is_an_error_sample_not_a_crash() -> None:
    eng = engine(Tracing(fail_groups=["p1"]))
    groups = {g.request.group_id: g async for g in eng.stream(requests(3))}
    assert len(groups) == 3
    assert all(s.trajectory.finish_reason == "error" for s in groups["p1"].samples)
    assert all(s.trajectory.finish_reason == "answered" for s in groups["p0"].samples)


async def test_leaving_the_stream_early_closes_every_session() -> None:
    eng = engine(Tracing(delays={"p3": 5.0}))
    async for group in eng.stream(requests(4)):
        assert group.complete
        break
    # the abandoned generator is closed by the event loop's finaliser hook, a task of its own:
    # give it a moment (one sleep(0) was not always enough on a loaded machine)
    for _ in range(200):
        if eng.sandbox.open == 0:  # type: ignore[union-attr]
            break
        await asyncio.sleep(0.01)
    assert eng.sandbox.open == 0  # type: ignore[union-attr]


async def test_a_bad_request_source_is_raised_after_finished_groups() -> None:
    def source():
        yield from requests(2)
        raise ValueError("row 3: missing field 'answer'")

    eng = engine(Tracing())
    seen = []
    with pytest.raises(ValueError, match="row 3"):
        async for group in eng.stream(source()):
            seen.append(group.request.group_id)
    assert sorted(seen) == ["p0", "p1"]  # nothing already finished is lost


async def test_resumed_indices_only() -> None:
    request = GroupRequest(Task("p", "problem", "42"), samples=4, indices=(1, 3))
    groups = [g async for g in engine(Tracing()).stream([request])]
    assert [s.index for s in groups[0].samples] == [1, 3]


# ------------------------------------------------------------------------- partial rollout
def endless(samples: int = 2) -> Iterator[GroupRequest]:
    """The trainer's prompt stream: never runs out."""
    for i in itertools.count():
        yield GroupRequest(Task(f"p{i}", f"problem {i}", "42"), samples)


async def test_an_iteration_whose_episodes_all_outlast_a_segment_ends() -> None:
    """Every episode is longer than one segment (one snippet per segment, two in each), so
    the first iteration can complete no group: over the endless prompt stream it drew and
    parked until its parked episodes held every sandbox session, then hung. At its draw
    bound it ends short (counted), the sessions it parks stay within max_parked_sessions,
    and later iterations complete batches, each parked episode's cell still defined."""
    sandbox = FakeSandbox(max_sessions=8)  # = max_in_flight + max_parked_sessions
    eng = RolloutEngine(Tracing(), sandbox, FMT, loop=LoopConfig(), config=RolloutConfig(
        segment_tokens=1000, segment_tool_calls=1, max_in_flight=4, max_parked_sessions=4,
        max_staleness=10))
    run = PartialRollout(eng, endless())
    results = []
    for version in range(6):
        eng.set_policy_version(version)
        results.append(await asyncio.wait_for(run.iteration(2), 10))
        assert sandbox.open <= 4 and sandbox.waiting == 0  # parked ones within their bound
    first = results[0]
    assert first.groups == [] and first.stats.draws_stopped == 1 and not first.exhausted
    assert first.stats.parked == 8  # the bound: twice the 2 groups needed, 2 samples each
    assert sum(len(r.groups) for r in results) >= 6
    done = [s.trajectory for r in results for g in r.groups for s in g.samples]
    assert all(g.complete for r in results for g in r.groups)
    assert all("NameError" not in t.completion_text for t in done)
    assert all(t.advances > 1 for t in done)
    await run.aclose()
    assert sandbox.open == 0


async def test_parked_episodes_never_hold_every_session_of_the_sandbox(
        caplog: pytest.LogCaptureFixture) -> None:
    """max_parked_sessions (the default, 512) above what the sandbox holds (8 sessions, 4
    episodes running): parked episodes kept every session and the running ones waited for
    one without end. The bound is lowered to what the sandbox can spare (in the debug log:
    nothing for the user to do), the rest replay their cells when they resume, and every
    iteration ends."""
    caplog.set_level(logging.DEBUG, logger="agentmath.rollout.partial")
    sandbox = FakeSandbox(max_sessions=8)
    eng = RolloutEngine(Tracing(), sandbox, FMT, loop=LoopConfig(), config=RolloutConfig(
        segment_tokens=1000, segment_tool_calls=1, max_in_flight=4, max_new_groups=4,
        max_staleness=10))
    run = PartialRollout(eng, endless())
    groups = []
    for version in range(4):
        eng.set_policy_version(version)
        groups += (await asyncio.wait_for(run.iteration(2), 10)).groups
        assert sandbox.open <= 4 and sandbox.waiting == 0
    assert [(r.levelno, r.getMessage()[:36]) for r in caplog.records
            if "lowered" in r.getMessage()] == [(logging.DEBUG,
                                                  "max_parked_sessions 512 lowered to 4")]
    done = [s.trajectory for g in groups for s in g.samples]
    assert done and all("NameError" not in t.completion_text for t in done)
    assert sum(t.session_replays for t in done) > 0
    await run.aclose()
    assert sandbox.open == 0


async def test_max_new_groups_bounds_the_draws() -> None:
    eng = RolloutEngine(Tracing(), FakeSandbox(), FMT, loop=LoopConfig(), config=RolloutConfig(
        segment_tokens=1000, segment_tool_calls=1, max_new_groups=3))
    run = PartialRollout(eng, endless())
    result = await asyncio.wait_for(run.iteration(2), 10)
    assert result.groups == [] and run.parked == 6 and result.stats.draws_stopped == 1
    await run.aclose()


async def test_a_step_ended_by_the_draw_bound_records_that_as_its_reason() -> None:
    """A step whose partial rollout reached its draw bound with no group complete trains
    nothing; its NoUpdate says so (cause draw_bound), not "no group with reward variance",
    and the step record reads back the same."""
    from agentmath.rl.records import event_from_dict
    from agentmath.rl.rewards import RewardModel
    from agentmath.rl.rollouts import collect_groups

    eng = RolloutEngine(Tracing(), FakeSandbox(), FMT, loop=LoopConfig(), config=RolloutConfig(
        segment_tokens=1000, segment_tool_calls=1, max_new_groups=3))
    run = PartialRollout(eng, endless())
    got = await asyncio.wait_for(collect_groups(
        run, RewardModel([{"name": "accuracy"}]), 2, dynamic_sampling=True, max_rounds=1), 10)
    assert got.groups == [] and got.dropped == [] and got.stats.draws_stopped == 1
    event = got.no_update(7)
    assert event.cause == "draw_bound" and event.step == 7
    assert "draw bound (max_new_groups)" in event.why and "reward variance" not in event.why
    assert event_from_dict(event.to_dict()) == event
    await run.aclose()


LONG = ["Think " * 30 + "\n<code>\nx = 1\n</code>", "More " * 30 + "\\boxed{42}"]


async def _iterations(mode: str, batch: int, n: int, **config: Any) -> list[Any]:
    backend = Tracing(turns=LONG, delays={"p0": 0.05})
    eng = engine(backend, mode=mode, **config)
    run = PartialRollout(eng, requests(n))
    results = []
    for version in range(50):
        eng.set_policy_version(version)
        result = await run.iteration(batch)
        results.append(result)
        if result.exhausted:
            break
    await run.aclose()
    assert eng.sandbox.open == 0  # type: ignore[union-attr]
    return results


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_iterations_without_partial_rollout(mode: str) -> None:
    results = await _iterations(mode, batch=2, n=5)
    sizes = [len(r.groups) for r in results]
    assert sizes == [2, 2, 1]
    ids = [g.request.group_id for r in results for g in r.groups]
    assert sorted(ids) == [f"p{i}" for i in range(5)]
    if mode == "async":  # p0 finishes last, yet the batch is in draw order (reproducible)
        assert ids == [f"p{i}" for i in range(5)]
    assert all(r.stats.parked == 0 for r in results)
    assert all(len(s.policy_versions) == 1 for r in results for g in r.groups for s in g.samples)


async def test_partial_rollout_parks_and_resumes_under_new_versions() -> None:
    results = await _iterations("async", batch=2, n=6, segment_tokens=60, max_staleness=10)
    ids = [g.request.group_id for r in results for g in r.groups]
    assert sorted(ids) == [f"p{i}" for i in range(6)]  # every group once, none lost
    assert all(g.complete for r in results for g in r.groups)
    assert sum(r.stats.parked for r in results) > 0
    assert sum(r.stats.resumed for r in results) > 0
    spans = [len(s.policy_versions) for r in results for g in r.groups for s in g.samples]
    assert max(spans) > 1  # samples continued under newer weights
    for r in results:  # no sample in a batch is newer than the version it is handed out at
        assert all(max(s.policy_versions) <= r.version for g in r.groups for s in g.samples)


@pytest.mark.parametrize("policy", ["regenerate", "drop"])
async def test_staleness_bound(policy: str) -> None:
    results = await _iterations("async", batch=1, n=4, segment_tokens=20, max_staleness=0,
                                stale=policy)
    stats = [r.stats for r in results]
    if policy == "regenerate":
        assert sum(s.regenerated for s in stats) > 0
    else:
        assert sum(s.dropped_groups for s in stats) > 0
    assert sum(s.wasted_tokens for s in stats) > 0
    for r in results:  # what is handed out never spans more versions than the bound allows
        for g in r.groups:
            assert all(len(s.policy_versions) <= 2 for s in g.samples)


async def test_engine_through_a_router_keeps_groups_together_and_forgets_them() -> None:
    from agentmath.backends.router import Router

    servers = [Tracing(), Tracing()]
    router = Router(servers)
    eng = RolloutEngine(router, FakeSandbox(), FMT, config=RolloutConfig(max_in_flight=8))
    groups = [g async for g in eng.stream(requests(6, samples=4))]
    assert len(groups) == 6 and all(g.complete for g in groups)
    for server in servers:  # every call of a group went to the same server
        mine = {episode.split("#")[0] for episode, _ in server.log}
        other = {episode.split("#")[0] for s in servers if s is not server
                 for episode, _ in s.log}
        assert not mine & other
    assert all(server.log for server in servers)  # and both servers got groups
    stats = router.stats()
    assert stats.sticky_episodes == 0 and stats.sticky_groups == 0  # forgotten when done
    await router.aclose()


@pytest.mark.parametrize("budget", [None, 1200])
async def test_context_token_budget_bounds_what_is_in_flight(budget: int | None) -> None:
    """Each episode holds ~500-700 tokens of context: a 1200-token budget lets about two run
    at once (a new episode counts as the mean of those running); all still finish."""
    backend = Tracing()
    eng = engine(backend, max_in_flight=16, max_in_flight_tokens=budget)
    groups = [g async for g in eng.stream(requests(4, samples=2))]
    assert len(groups) == 4 and all(g.complete for g in groups)
    assert (backend.peak <= 2) if budget else (backend.peak > 2)
