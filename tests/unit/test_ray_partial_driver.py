"""Partial rollout on Ray without a cluster: the driver (RayIterations with segment budgets)
placing segments on in-process stand-ins of the worker actors (the real RolloutWorker with a
scripted backend and a fake sandbox each), against the local engine's PartialRollout."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from typing import Any

import pytest

from agentmath.backends.base import SamplingParams
from agentmath.backends.registry import BackendSettings
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import LoopConfig, RayConfig, RolloutConfig
from agentmath.formats import get_format
from agentmath.rollout.partial import PartialRollout
from agentmath.rollout.records import Group, GroupRequest
from agentmath.rollout.rules import is_stale, may_draw, parked_session_bound, take_batch
from agentmath.rollout.scheduler import RolloutEngine
from agentmath.seeding import derive_seed
from agentmath.tasks import Task
from tests.fixtures.cut_backend import CutScripted
from tests.fixtures.sandboxes import FakeSandbox

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

FMT = get_format("code_interpreter")
# the second cell reads the first's variable: a session lost without its cells replayed
# answers a NameError, and the sample changes
TURNS = ["Think " * 12 + "\n<code>\nx = 41\n</code>",
         "More " * 12 + "\n<code>\nprint(x + 1)\n</code>",
         "So " * 10 + "the answer is \\boxed{42}."]


def requests(n: int, samples: int = 2) -> list[GroupRequest]:
    return [GroupRequest(Task(f"p{i}", f"problem {i}", "42"), samples) for i in range(n)]


class Seeds:
    """A seed per sample, drawn when its episode starts. (The trainer's also depend on the
    step a group is drawn at, which under partial rollout depends on timing, locally as on
    Ray; here the same seed must give the same sample wherever and in whatever segments it
    ran.)"""

    step = 0

    def __call__(self, request: GroupRequest, index: int) -> SamplingParams:
        return SamplingParams(temperature=1.0,
                              seed=derive_seed(0, "sample", request.group_id, index))


class _Method:
    def __init__(self, actor: FakeActor, name: str) -> None:
        self.actor, self.name = actor, name

    def remote(self, *args: Any) -> Coroutine[Any, Any, Any]:
        return self.actor.call(self.name, *args)


class FakeActor:
    """A RolloutWorker in this process, reached as an actor (``actor.advance.remote(...)``);
    ``dead`` makes every later call fail as a call to an actor whose node is gone."""

    def __init__(self, name: str, backend: ScriptedBackend,
                 sessions: int | None = None) -> None:
        from agentmath.distributed.worker import RolloutWorker, WorkerSpec

        self.sandbox = FakeSandbox(max_sessions=sessions)
        self.worker = RolloutWorker(WorkerSpec(backend="openai", settings=BackendSettings("m")))
        self.worker._engine = RolloutEngine(backend, self.sandbox, FMT)  # as _start builds it
        self.worker._node_id = name
        self.dead = False
        self.segments = 0

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name)

    async def call(self, name: str, *args: Any) -> Any:
        await asyncio.sleep(0)
        if self.dead:
            raise ray.exceptions.RayActorError()
        self.segments += name == "advance"
        return await getattr(self.worker, name)(*args)


def ray_engine(backend: ScriptedBackend, sampling: Seeds, rollout: RolloutConfig,
               workers: int = 3, sessions: int | None = None) -> Any:
    from agentmath.distributed.engine import RayRolloutEngine, Slot
    from agentmath.distributed.worker import WorkerSpec

    spec = WorkerSpec(backend="openai", settings=BackendSettings("m"), in_flight=2)
    engine = RayRolloutEngine(spec, RayConfig(), sampling, max_in_flight=6)
    engine.set_budgets(LoopConfig(), rollout)
    for i in range(workers):
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        ready.set_result({"node_id": f"n{i}"})
        engine.slots.append(Slot(FakeActor(f"n{i}", backend, sessions), ready))
    return engine


async def run_iterations(iterations: Any, engine: Any, sampling: Seeds, batch: int,
                         between: Callable[[int], None] | None = None) -> list[Any]:
    """Iterations until the requests run out, a new policy version (and step) before each."""
    results = []
    for version in range(40):
        engine.set_policy_version(version)
        sampling.step = version
        result = await iterations.iteration(batch)
        results.append(result)
        if between is not None:
            between(version)
        if result.exhausted:
            break
    await iterations.aclose()
    return results


def samples(results: list[Any]) -> dict[tuple[str, int], tuple[list[int], SamplingParams]]:
    """Every handed-out sample's token ids and sampling, by (problem, sample index)."""
    out = {}
    for r in results:
        for g in r.groups:
            for s in g.samples:
                assert (s.group_id, s.index) not in out  # none twice
                out[s.group_id, s.index] = (s.trajectory.token_ids, s.trajectory.sampling)
    return out


async def local_reference(rollout: RolloutConfig, n: int, batch: int) -> list[Any]:
    sampling = Seeds()
    engine = RolloutEngine(ScriptedBackend(TURNS), FakeSandbox(), FMT, config=rollout,
                           sampling=sampling)
    return await run_iterations(PartialRollout(engine, requests(n)), engine, sampling, batch)


async def test_segments_park_on_their_workers_and_give_the_local_samples() -> None:
    from agentmath.distributed.iterations import RayIterations

    rollout = RolloutConfig(segment_tokens=40, max_staleness=10, max_in_flight=6)
    reference = await local_reference(rollout, n=6, batch=2)
    sampling = Seeds()
    engine = ray_engine(ScriptedBackend(TURNS), sampling, rollout)
    results = await run_iterations(RayIterations(engine, requests(6)), engine, sampling, 2)
    got = samples(results)
    assert got == samples(reference) and len(got) == 12
    assert all(g.complete for r in results for g in r.groups)
    assert sum(r.stats.parked for r in results) > 0
    assert sum(r.stats.resumed for r in results) > 0
    assert max(len(s.policy_versions) for r in results for g in r.groups for s in g.samples) > 1
    for r in results:  # nothing handed out is newer than its iteration's version
        assert all(max(s.policy_versions) <= r.version for g in r.groups for s in g.samples)
    done = [s.trajectory for r in results for g in r.groups for s in g.samples]
    assert all("NameError" not in t.completion_text for t in done)
    assert sum(t.advances > 1 for t in done) > 0
    assert sum(t.session_replays for t in done) == 0  # sessions kept alive
    for slot in engine.slots:  # every parked session closed; every worker took segments
        assert slot.actor.sandbox.open == 0 and slot.actor.worker._parked == {}
        assert slot.actor.segments > 0


async def test_interrupt_turns_cuts_the_workers_running_turns_and_gives_the_local_samples(
) -> None:
    """With ``interrupt_turns`` the iteration's stop cuts the turns running on the workers
    (counted); each is continued from its ids in a later segment, so the samples are the
    local engine's without cutting."""
    from agentmath.distributed.iterations import RayIterations

    rollout = RolloutConfig(segment_tokens=400, max_staleness=10, max_in_flight=6)
    reference = await local_reference(rollout, n=6, batch=2)
    cut_rollout = rollout.model_copy(update={"interrupt_turns": True})
    sampling = Seeds()
    engine = ray_engine(CutScripted(TURNS, cut_at=5, delay=0.01, spread=4), sampling, cut_rollout)
    results = await run_iterations(RayIterations(engine, requests(6)), engine, sampling, 2)
    assert samples(results) == samples(reference) and len(samples(results)) == 12
    assert sum(r.stats.interrupted for r in results) > 0
    done = [s.trajectory for r in results for g in r.groups for s in g.samples]
    assert all(t.answer == "42" for t in done)


@pytest.mark.parametrize("segment", [{"segment_tokens": 40}, {"segment_tool_calls": 1}],
                         ids=["tokens", "tool_calls"])
async def test_a_worker_lost_while_episodes_are_parked_on_it(
        segment: dict[str, int], caplog: pytest.LogCaptureFixture) -> None:
    """The worker holding parked episodes dies between two iterations: their next segments
    fail there, and they continue on other workers from what they had done (cells replayed in
    a new session; with a tool-call segment, the call its last turn made but did not run yet):
    the same samples as the local engine, none lost or twice."""
    from agentmath.distributed.iterations import RayIterations

    rollout = RolloutConfig(**segment, max_staleness=10, max_in_flight=6)
    reference = await local_reference(rollout, n=6, batch=2)
    sampling = Seeds()
    engine = ray_engine(ScriptedBackend(TURNS), sampling, rollout)
    iterations = RayIterations(engine, requests(6))
    killed: list[FakeActor] = []
    cells: list[str] = []

    def kill_a_home(version: int) -> None:
        """After the first iteration that parks episodes: the worker holding the most."""
        holders = [s.actor for s in engine.slots if s.actor.worker._parked]
        if not killed and holders:
            victim = max(holders, key=lambda a: sum(len(e.cells) + 1
                                                     for e in a.worker._parked.values()))
            cells.extend(c for e in victim.worker._parked.values() for c in e.cells)
            killed.append(victim)
            victim.dead = True

    with caplog.at_level(logging.INFO, "agentmath.distributed"):
        results = await run_iterations(iterations, engine, sampling, 2, kill_a_home)
    assert killed and "lost its worker" in caplog.text
    assert "continues on another worker" in caplog.text
    assert samples(results) == samples(reference)
    replays = [s.trajectory.session_replays
               for r in results for g in r.groups for s in g.samples]
    assert (sum(replays) > 0) == bool(cells)  # cells ran there: replayed in a new session
    assert [s.dead for s in engine.slots].count(True) == 1
    for slot in engine.slots:
        if not slot.dead:
            assert slot.actor.sandbox.open == 0


@pytest.mark.parametrize("policy", ["regenerate", "drop"])
async def test_the_staleness_bound_on_ray(policy: str) -> None:
    from agentmath.distributed.iterations import RayIterations

    rollout = RolloutConfig(segment_tokens=20, max_staleness=0, stale=policy, max_in_flight=6)
    sampling = Seeds()
    engine = ray_engine(ScriptedBackend(TURNS), sampling, rollout)
    results = await run_iterations(RayIterations(engine, requests(4)), engine, sampling, 1)
    stats = [r.stats for r in results]
    key = "regenerated" if policy == "regenerate" else "dropped_groups"
    assert sum(getattr(s, key) for s in stats) > 0
    assert sum(s.wasted_tokens for s in stats) > 0
    for r in results:  # max_staleness 0: every handed-out sample is of one version
        assert all(len(s.policy_versions) == 1 for g in r.groups for s in g.samples)
    for slot in engine.slots:
        assert slot.actor.sandbox.open == 0 and slot.actor.worker._parked == {}


async def test_parked_sessions_beyond_the_bound_are_closed_and_replayed() -> None:
    from agentmath.distributed.iterations import RayIterations

    rollout = RolloutConfig(segment_tokens=40, max_staleness=10, max_in_flight=6,
                            max_parked_sessions=0)
    reference = await local_reference(rollout, n=4, batch=1)
    sampling = Seeds()
    engine = ray_engine(ScriptedBackend(TURNS), sampling, rollout)
    iterations = RayIterations(engine, requests(4))
    opened: list[int] = []

    def count_open(version: int) -> None:
        opened.append(sum(s.actor.sandbox.open for s in engine.slots))

    results = await run_iterations(iterations, engine, sampling, 1, count_open)
    assert set(opened) == {0}  # no parked episode keeps a session between iterations
    assert samples(results) == samples(reference)


async def test_tool_call_segments_without_a_token_segment_draw_only_the_batch() -> None:
    """segment_tool_calls alone: no stop, exactly the groups the batch needs are drawn, and
    the episodes out of snippets park until the next iteration (as the local engine)."""
    from agentmath.distributed.iterations import RayIterations

    rollout = RolloutConfig(segment_tool_calls=1, max_staleness=10, max_in_flight=6)
    reference = await local_reference(rollout, n=3, batch=2)
    sampling = Seeds()
    engine = ray_engine(ScriptedBackend(TURNS), sampling, rollout)
    iterations = RayIterations(engine, requests(3))
    first = await iterations.iteration(2)
    assert first.groups == [] and iterations.parked == 4
    assert sorted(p.task_id for p in iterations.pending_groups()) == ["p0", "p1"]
    rest = await run_iterations(iterations, engine, sampling, 2)
    assert samples([first, *rest]) == samples(reference)


def endless() -> Iterator[GroupRequest]:
    """The trainer's prompt stream: never runs out."""
    for i in itertools.count():
        yield GroupRequest(Task(f"p{i}", f"problem {i}", "42"), 2)


async def test_an_iteration_whose_episodes_all_outlast_a_segment_ends_on_ray() -> None:
    """Every episode is longer than one segment (one snippet per segment, two in each): the
    first iteration can complete no group. Over the endless prompt stream the driver drew and
    parked until the parked episodes held every session of their workers' sandboxes, then
    hung; at its draw bound it ends short, as the local engine does, and later iterations
    complete batches with each parked episode's cell still defined on its worker."""
    from agentmath.distributed.iterations import RayIterations

    rollout = RolloutConfig(segment_tokens=1000, segment_tool_calls=1, max_staleness=10,
                            max_in_flight=6, max_parked_sessions=4)
    sampling = Seeds()
    # one worker: its 2 segments in flight and every parked session the driver allows (the
    # episodes parked beyond that bound release theirs as they park, or it deadlocks)
    engine = ray_engine(ScriptedBackend(TURNS), sampling, rollout, workers=1, sessions=6)
    iterations = RayIterations(engine, endless())
    results = []
    for version in range(6):
        engine.set_policy_version(version)
        results.append(await asyncio.wait_for(iterations.iteration(2), 20))
        assert sum(s.actor.sandbox.open for s in engine.slots) <= 4  # parked: their bound
    first = results[0]
    assert first.groups == [] and first.stats.draws_stopped == 1 and not first.exhausted
    assert first.stats.parked == 10  # the bound: max_in_flight + max_parked_sessions
    assert sum(len(r.groups) for r in results) >= 6
    done = [s.trajectory for r in results for g in r.groups for s in g.samples]
    assert all("NameError" not in t.completion_text for t in done)
    assert all(t.advances > 1 for t in done)
    await iterations.aclose()
    for slot in engine.slots:
        assert slot.actor.sandbox.open == 0 and slot.actor.sandbox.waiting == 0


async def test_parked_episodes_never_hold_every_session_of_a_worker() -> None:
    """max_parked_sessions (the default, 512) above what a worker's sandbox holds (6
    sessions, 2 segments running): the worker closes the oldest parked sessions beyond what
    its sandbox can spare (replayed on resume), and every iteration ends."""
    from agentmath.distributed.iterations import RayIterations

    rollout = RolloutConfig(segment_tokens=1000, segment_tool_calls=1, max_staleness=10,
                            max_in_flight=6, max_new_groups=5)
    sampling = Seeds()
    engine = ray_engine(ScriptedBackend(TURNS), sampling, rollout, workers=1, sessions=6)
    iterations = RayIterations(engine, endless())
    groups = []
    for version in range(4):
        engine.set_policy_version(version)
        groups += (await asyncio.wait_for(iterations.iteration(2), 20)).groups
        assert engine.slots[0].actor.sandbox.open <= 4
    done = [s.trajectory for g in groups for s in g.samples]
    assert done and all("NameError" not in t.completion_text for t in done)
    assert sum(t.session_replays for t in done) > 0
    await iterations.aclose()
    assert engine.slots[0].actor.sandbox.open == 0


def test_the_pure_rules_are_the_local_engines() -> None:
    assert not is_stale([], 9, 0) and not is_stale([3, 4], 5, 2) and is_stale([2, 4], 5, 2)
    groups = [Group(r) for r in requests(3)]
    assert take_batch(groups[:1], groups[1:], 2) == (groups[:2], groups[2:])
    config = RolloutConfig(segment_tokens=9, max_in_flight=6, max_parked_sessions=4)
    assert may_draw(config, 2, 3, 6) and may_draw(config, 2, 4, 8)  # 2x the need, 10 < 6 + 4
    assert not may_draw(config, 2, 5, 10)
    assert not may_draw(config.model_copy(update={"max_new_groups": 1}), 2, 1, 2)
    assert parked_session_bound(512, FakeSandbox(max_sessions=64), 256) == 32  # half
    assert parked_session_bound(512, FakeSandbox(max_sessions=64), 4) == 60
    assert parked_session_bound(10, FakeSandbox(max_sessions=64), 4) == 10
    assert parked_session_bound(512, FakeSandbox(), 4) == 512  # no bound known


async def test_a_worker_answer_of_a_bug_is_not_swallowed() -> None:
    from agentmath.distributed.iterations import RayIterations

    rollout = RolloutConfig(segment_tokens=40, max_in_flight=6)
    sampling = Seeds()
    engine = ray_engine(ScriptedBackend(TURNS), sampling, rollout, workers=1)
    engine.spec = replace(engine.spec, in_flight=1)

    async def broken(*args: Any) -> Any:
        raise KeyError("a bug on the driver's side of the call")

    engine.slots[0].actor.call = broken
    with pytest.raises(KeyError, match="a bug"):
        await RayIterations(engine, requests(1)).iteration(1)


@pytest.mark.parametrize("segment", [{"max_tokens": 30}, {"max_tool_calls": 1}])
async def test_progress_restored_in_another_episode_continues_it_exactly(
        segment: dict[str, int]) -> None:
    """An episode parked (mid-turn, or with a call not run yet), its progress restored in a
    new episode over another sandbox (as on another worker, with other budgets): it finishes
    as the uninterrupted episode does, its cells replayed, its own budgets kept."""
    from agentmath.agent.episode import Episode

    def episode(sandbox: FakeSandbox, loop: LoopConfig) -> Episode:
        return Episode("problem 0", ScriptedBackend(TURNS), FMT, sandbox, loop)

    whole = episode(FakeSandbox(), LoopConfig())
    assert await whole.advance()
    parked = episode(FakeSandbox(), LoopConfig())
    while not await parked.advance(**segment):
        if parked.cells:
            break
    assert parked.cells == ["x = 41"]
    elsewhere, other = FakeSandbox(), LoopConfig(max_tool_calls=1)
    moved = episode(elsewhere, other)
    moved.restore(parked.progress())
    assert moved.config == LoopConfig()  # the episode's budgets, not the new worker's
    assert await moved.advance()
    assert moved.trajectory.token_ids == whole.trajectory.token_ids
    assert moved.trajectory.session_replays == 1
    assert elsewhere.sessions[0].ran[0] == "x = 41"  # replayed before the next cell
    with pytest.raises(ValueError, match="only a new episode"):
        moved.restore(parked.progress())


class StalledActor(FakeActor):
    """A worker whose episodes wait on ``gate`` (a model server that answers nothing yet)."""

    gate: asyncio.Event

    async def call(self, name: str, *args: Any) -> Any:
        if name in ("run", "advance"):
            await self.gate.wait()
        return await super().call(name, *args)


@pytest.mark.parametrize("partial", [False, True], ids=["stream", "partial"])
async def test_a_worker_ready_late_gets_episodes_before_any_episode_ends(partial: bool) -> None:
    """One worker ready, two still starting, and no episode can end (the server stalls): the
    first worker fills up (2 in flight), and each late worker gets its share the moment it is
    ready, not only once an episode ends (the driver waited on running episodes alone)."""
    from agentmath.distributed.engine import Slot
    from agentmath.distributed.iterations import RayIterations

    sampling, gate = Seeds(), asyncio.Event()
    rollout = RolloutConfig(segment_tokens=40 if partial else None, max_in_flight=6)
    engine = ray_engine(ScriptedBackend(TURNS), sampling, rollout, workers=0)
    loop = asyncio.get_running_loop()
    for i in range(3):
        actor = StalledActor(f"n{i}", ScriptedBackend(TURNS))
        actor.gate = gate
        ready: asyncio.Future[Any] = loop.create_future()
        engine.slots.append(Slot(actor, ready))
    engine.slots[0].ready.set_result({"node_id": "n0"})

    async def settle() -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    if partial:
        task = asyncio.ensure_future(RayIterations(engine, requests(6)).iteration(6))
    else:
        async def drain() -> list[Group]:
            return [g async for g in engine.stream(requests(6))]
        task = asyncio.ensure_future(drain())
    await settle()
    assert [s.inflight for s in engine.slots] == [2, 0, 0]
    for i in (1, 2):
        engine.slots[i].ready.set_result({"node_id": f"n{i}"})
        await settle()
        assert [s.inflight for s in engine.slots][: i + 1] == [2] * (i + 1)
    assert engine.stats.samples_done == 0  # nothing ended: the late workers were not waited for
    gate.set()
    result = await asyncio.wait_for(task, 30)
    if partial:  # an iteration ends when its episodes have run a segment: parked or done
        assert result.stats.segments >= 6 and all(s.actor.segments for s in engine.slots)
    else:
        assert sum(len(g.samples) for g in result) == 12
