"""Cutting running model turns at a partial-rollout iteration's end (``interrupt_turns``).

The server side (a simulated server ends a request early with what it generated), the episode
side (a cut turn is continued from its ids and ends as if never cut, stop strings included),
and the engine (an iteration ends without waiting for running turns, and a run to the end
gives the same samples as without cutting)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import simpy

from agentmath.agent import Episode
from agentmath.backends.base import Generation, Interruptible, SamplingParams
from agentmath.backends.router import Router, RouterConfig
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import LoopConfig, RolloutConfig
from agentmath.formats import get_format
from agentmath.rollout.partial import PartialRollout
from agentmath.rollout.records import GroupRequest
from agentmath.rollout.scheduler import RolloutEngine
from agentmath.sim import LogNormal, SandboxModel, ServerCostModel, SimServer, Workload, build_fleet
from tests.fixtures.cut_backend import CutScripted
from tests.fixtures.sandboxes import FakeSandbox

COST = ServerCostModel(a=0.01, b=0.001, c=0.0001, d=0.0, max_batched_tokens=4096,
                       max_running=64, kv_tokens=64_000, block_size=16)
CODE = get_format("code_interpreter")
TURNS = ["Let me compute it.\n<code>\nprint(6 * 7)\n</code>", "So it is \\boxed{42}."]


# ------------------------------------------------------------------------------ server

def _server_run(interrupt_at: float, *, queued: bool = False) -> tuple[SimServer, list]:
    env = simpy.Environment()
    server = SimServer(env, dataclasses.replace(COST, max_running=1) if queued else COST)
    done: list = []
    first = server.submit(100, 1_000, [], done.append)
    second = server.submit(100, 1_000, [], done.append) if queued else None

    def cut():  # noqa: ANN202 - a simpy process
        yield env.timeout(interrupt_at)
        server.interrupt(second if second is not None else first)

    env.process(cut())
    env.run(until=1_000)
    return server, done


def test_a_running_request_ends_at_the_step_in_progress_with_its_tokens() -> None:
    server, done = _server_run(0.5)
    req = done[0]
    assert req.state == "interrupted" and 0 < req.gen < req.out_len
    # the step in progress at 0.5 s finishes: gen is the steps completed by then, plus it
    step = COST.step_time(1)
    assert req.finished == pytest.approx(COST.step_time(0, 100) + (req.gen - 1) * step)
    assert req.finished >= 0.5 > req.finished - step
    assert server.stats.interrupted == 1 and server.stats.completed == 0
    server.kv.check()
    assert server.kv.used == 0


def test_a_waiting_request_ends_at_once_with_nothing() -> None:
    server, done = _server_run(0.3, queued=True)
    cut = next(r for r in done if r.state == "interrupted")
    assert cut.gen == 0 and cut.finished == pytest.approx(0.3)
    assert server.stats.interrupted == 1 and server.stats.completed == 1  # the other ran on


def test_the_simulated_backend_returns_a_prefix_of_the_uncut_turn() -> None:
    workload = Workload(n_groups=2, group_size=1, prompt_tokens=LogNormal(300, 0.0),
                        turn_tokens=LogNormal(400, 0.0), group_sigma=0.0, episode_sigma=0.0)
    fleet = build_fleet(workload, 1, COST)
    backend = fleet.backends[0]
    assert isinstance(backend, Interruptible)

    async def main() -> tuple[Generation, Generation, Generation]:
        from agentmath.backends.base import RequestTag, tagged

        prompt = await backend.render_prompt([{"role": "user", "content": workload.problem(0)}])
        event = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, event.set)
        with tagged(RequestTag("sim-0#0", "sim-0", 0)):
            cut = await backend.generate_interruptible(
                prompt, stop=CODE.stop_strings, max_tokens=10_000, sampling=SamplingParams(),
                interrupt=event)
            rest = await backend.generate(prompt + cut.token_ids, stop=CODE.stop_strings,
                                          max_tokens=10_000, sampling=SamplingParams())
        with tagged(RequestTag("sim-0#1", "sim-0", 0)):  # the same script, never cut
            whole = await backend.generate(prompt, stop=CODE.stop_strings, max_tokens=10_000,
                                           sampling=SamplingParams())
        return cut, rest, whole

    cut, rest, whole = fleet.run(main)
    assert cut.finish_reason == "length" and cut.interrupted is True
    assert 0 < len(cut.token_ids) < len(whole.token_ids)
    assert cut.token_ids + rest.token_ids == whole.token_ids
    assert cut.text + rest.text == whole.text and rest.finish_reason == whole.finish_reason


# ------------------------------------------------------------------------------ episode

async def _episode_ids(backend: ScriptedBackend, *, interrupt: bool) -> tuple[Episode, bool]:
    """Advance an episode with a stop event set 10 ms in (during its first turn), then
    advance it again to its end; (the episode, whether the first advance finished it)."""
    episode = Episode("What is 6 * 7?", backend, CODE, FakeSandbox(), LoopConfig())
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, stop.set)
    try:
        first = await episode.advance(stop=stop, interrupt_turns=interrupt)
        if not first:
            await episode.advance()
    finally:
        await episode.close()
    return episode, first


def _model_ids(episode: Episode) -> list[int]:
    return [t for s in episode.trajectory.segments if s.source == "model" for t in s.token_ids]


ON_STOP = TURNS[0].index("\n</code>") + 3  # a cut ending in "\n</", a stop string's prefix


@pytest.mark.parametrize("cut_at", [5, ON_STOP])
def test_an_interrupted_turn_is_continued_token_exactly(cut_at: int) -> None:
    whole, _ = asyncio.run(_episode_ids(ScriptedBackend(TURNS), interrupt=False))
    backend = CutScripted(TURNS, cut_at)
    cut, first = asyncio.run(_episode_ids(backend, interrupt=True))
    assert not first and cut.interrupted is False  # the second advance ran uncut
    traj = cut.trajectory
    assert traj.finish_reason == whole.trajectory.finish_reason == "answered"
    assert traj.answer == "42" and _model_ids(cut) == _model_ids(whole)
    first_turn = []
    for segment in traj.segments[1:]:
        if segment.source != "model":
            break
        first_turn.append(len(segment.token_ids))
    whole_turn = TURNS[0].index("\n</code>") + len("\n</code>")
    assert first_turn[0] == cut_at and sum(first_turn) == whole_turn
    # cut early: continued in the next advance in one piece; cut on a stop string's prefix:
    # extended one token at a time at once (never parked with a stop string straddling it)
    assert first_turn[1:] == ([whole_turn - cut_at] if cut_at == 5 else [1] * (whole_turn - cut_at))
    assert cut.calls == 1 and traj.advances == 2


def test_without_interrupt_turns_the_running_turn_ends_first() -> None:
    backend = CutScripted(TURNS, 5)
    episode, first = asyncio.run(_episode_ids(backend, interrupt=False))
    models = [s for s in episode.trajectory.segments if s.source == "model"]
    assert not first and len(models) == 2  # turn 1 whole (and its call), parked, turn 2
    assert episode.calls == 1 and episode.trajectory.answer == "42"


def test_the_interrupted_flag_is_set_for_the_advance_that_was_cut() -> None:
    async def main() -> bool:
        episode = Episode("What is 6 * 7?", CutScripted(TURNS, 5), CODE, FakeSandbox(),
                          LoopConfig())
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, stop.set)
        try:
            assert not await episode.advance(stop=stop, interrupt_turns=True)
            return episode.interrupted
        finally:
            await episode.close()

    assert asyncio.run(main())


def test_a_router_passes_the_interrupt_to_its_servers() -> None:
    router = Router([CutScripted(TURNS, 5), CutScripted(TURNS, 5)], RouterConfig())
    assert isinstance(router, Interruptible)

    async def main() -> Generation:
        event = asyncio.Event()
        event.set()
        try:
            return await router.generate_interruptible(
                [1, 2, 3], stop=CODE.stop_strings, max_tokens=100, sampling=SamplingParams(),
                interrupt=event)
        finally:
            await router.aclose()

    gen = asyncio.run(main())
    assert gen.interrupted is True and len(gen.token_ids) == 5


# ------------------------------------------------------------------------------ engine

def _engine_run(interrupt: bool) -> tuple[list[float], dict[str, list[int]], int]:
    """Partial rollout of a small simulated workload to its end: each iteration's end time,
    every sample's model ids, and the turns cut."""
    workload = Workload(n_groups=12, group_size=2, seed=5, prompt_tokens=LogNormal(200, 0.0),
                        turn_tokens=LogNormal(300, 1.0), calls_mean=3.0,
                        tool_latency_s=LogNormal(0.5, 0.0))
    fleet = build_fleet(workload, 2, COST, SandboxModel(workers=64))
    config = RolloutConfig(max_in_flight=16, segment_tokens=2_000, max_staleness=100,
                           max_parked_sessions=100, interrupt_turns=interrupt)
    engine = RolloutEngine(fleet.backends[0], fleet.sandbox, CODE,
                           loop=workload.loop_config(), config=config)
    requests = [GroupRequest(task, workload.group_size) for task in workload.tasks()]
    run = PartialRollout(engine, requests)
    ends: list[float] = []
    samples: dict[str, list[int]] = {}
    cut = 0

    async def main() -> None:
        nonlocal cut
        while True:
            result = await run.iteration(2)
            ends.append(float(fleet.env.now))
            cut += result.stats.interrupted
            for group in result.groups:
                for sample in group.samples:
                    samples[f"{group.request.group_id}#{sample.index}"] = [
                        t for s in sample.trajectory.segments if s.source == "model"
                        for t in s.token_ids]
            if result.exhausted:
                break
            engine.set_policy_version(engine.version + 1)
        await run.aclose()

    fleet.run(main)
    return ends, samples, cut


def test_an_iteration_ends_without_waiting_for_running_turns() -> None:
    plain_ends, plain, plain_cut = _engine_run(False)
    cut_ends, cut, turns_cut = _engine_run(True)
    assert plain_cut == 0 and turns_cut > 0
    assert cut_ends[0] < plain_ends[0]  # the first iteration did not wait for long turns
    # every sample, cut or not, is the one the uncut run sampled (the scripts' ids)
    assert cut.keys() == plain.keys() and len(cut) == 24
    assert all(cut[key] == plain[key] for key in plain)
