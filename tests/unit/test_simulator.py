"""The rollout simulator: virtual-time asyncio, the server model, the workload, the real loop."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
import simpy

from agentmath.backends.base import RequestTag, SamplingParams, tagged
from agentmath.errors import RequestRejected
from agentmath.formats import get_format
from agentmath.sandbox.client import SessionLimited
from agentmath.sim import (
    BlockHasher,
    LogNormal,
    SandboxModel,
    ServerCostModel,
    SimSandbox,
    SimServer,
    SimulationDeadlock,
    StepMeasurement,
    Workload,
    build_fleet,
    ideal_makespan,
    run_simulated,
    wait_event,
)

try:  # the agent loop moved into agentmath.agent; older trees have agentmath.loop
    from agentmath.agent import Episode, run_episode
except ImportError:  # pragma: no cover
    from agentmath.loop import Episode, run_episode  # type: ignore[no-redef]

COST = ServerCostModel(a=0.01, b=0.001, c=0.0001, d=0.0, max_batched_tokens=4096,
                       max_running=64, kv_tokens=64_000, block_size=16)
SAMPLING = SamplingParams()
CODE = get_format("code_interpreter")


def _hashes(n_tokens: int, key: str, salt: int = 0) -> list[int]:
    return BlockHasher(16).hashes(None, salt, [hash((key, i)) & 0xFF for i in range(n_tokens)])


# ------------------------------------------------------------------------------ clock

def test_sleep_is_virtual() -> None:
    env = simpy.Environment()

    async def main() -> float:
        await asyncio.sleep(3600)
        return asyncio.get_running_loop().time()

    started = time.perf_counter()
    assert run_simulated(main, env) == pytest.approx(3600)
    assert env.now == pytest.approx(3600)
    assert time.perf_counter() - started < 1.0


def test_asyncio_timers_and_simpy_events_interleave_in_time_order() -> None:
    env = simpy.Environment()
    log: list[tuple[str, float]] = []

    def proc():  # noqa: ANN202
        for _ in range(3):
            yield env.timeout(1.5)
            log.append(("simpy", env.now))

    env.process(proc())

    async def ticker() -> None:
        for _ in range(4):
            await asyncio.sleep(1.0)
            log.append(("asyncio", asyncio.get_running_loop().time()))

    async def main() -> str:
        task = asyncio.create_task(ticker())
        value = await wait_event(env.timeout(2.2, value="done"))
        log.append(("bridge", env.now))
        await task
        return value

    assert run_simulated(main, env) == "done"
    times = [t for _, t in log]
    assert times == sorted(times)
    # at a tie (t=3) simpy's event comes first; main returns at t=4, before simpy's 4.5
    assert [k for k, _ in log] == ["asyncio", "simpy", "asyncio", "bridge", "simpy", "asyncio",
                                   "asyncio"]


def test_deadlock_is_detected() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(SimulationDeadlock):
        run_simulated(main)


def test_simpy_failure_reaches_the_awaiting_coroutine() -> None:
    env = simpy.Environment()

    def fails():  # noqa: ANN202
        yield env.timeout(1)
        raise KeyError("boom")

    async def main() -> None:
        await wait_event(env.process(fails()))

    with pytest.raises(KeyError):
        run_simulated(main, env)


def test_thousands_of_tasks_and_timeouts() -> None:
    async def one(i: int) -> int:
        try:
            async with asyncio.timeout(50):
                await asyncio.sleep(i % 100)
            return 1
        except TimeoutError:
            return 0

    async def main() -> int:
        return sum(await asyncio.gather(*(one(i) for i in range(5000))))

    env = simpy.Environment()
    assert run_simulated(main, env) == 2500  # sleeps of 0..49 s finish, 50..99 s time out
    assert env.now == pytest.approx(50)


# ------------------------------------------------------------------------------ server

def _run_requests(cost: ServerCostModel, specs: list[tuple[float, int, int, list[int]]]
                  ) -> tuple[SimServer, list]:
    """Submit (at, prompt, out, hashes) requests to a fresh server; run to the end."""
    env = simpy.Environment()
    server = SimServer(env, cost)
    done: list = []

    def submitter(at: float, p: int, o: int, h: list[int]):  # noqa: ANN202
        yield env.timeout(at)
        server.submit(p, o, h, done.append)

    for spec in specs:
        env.process(submitter(*spec))
    env.run(until=10_000)
    return server, done


def test_single_request_takes_the_cost_models_time() -> None:
    server, done = _run_requests(COST, [(0.0, 1000, 200, _hashes(1200, "a"))])
    # one step prefills the prompt and samples the first token, then 199 decode steps of one
    expected = COST.step_time(0, 1000) + 199 * COST.step_time(1)
    assert done[0].finished == pytest.approx(expected)
    assert done[0].first_token == pytest.approx(COST.step_time(0, 1000))
    assert server.stats.busy_s == pytest.approx(expected)
    assert server.idle_fraction() > 0.9


def test_attention_term_is_integrated_over_the_phase() -> None:
    cost = dataclasses.replace(COST, d=1e-6)
    _, done = _run_requests(cost, [(0.0, 1000, 50, _hashes(1050, "a"))])
    expected = cost.step_time(0, 1000) + sum(cost.step_time(1, 0, 1001 + s) for s in range(49))
    assert done[0].finished == pytest.approx(expected)


def test_batching_beats_sequential() -> None:
    specs = [(0.0, 100, 300, _hashes(400, f"r{i}")) for i in range(8)]
    _, together = _run_requests(COST, specs)
    alone = COST.step_time(0, 100) + 299 * COST.step_time(1)
    makespan = max(r.finished for r in together)
    assert makespan < 8 * alone / 4


def test_arrival_during_a_decode_phase_joins_at_the_next_step() -> None:
    _, done = _run_requests(COST, [(0.0, 16, 1000, _hashes(1016, "a")),
                                   (0.5, 16, 10, _hashes(26, "b"))])
    first, second = sorted(done, key=lambda r: r.arrival)
    step1 = COST.step_time(1)
    assert first.finished > 1000 * step1  # slowed down by the second request
    assert second.admitted >= 0.5 and second.admitted - 0.5 < step1 + 1e-9


def test_prefix_cache_hits_count_tokens() -> None:
    shared = _hashes(1016, "p")
    server, done = _run_requests(COST, [(0.0, 1000, 16, shared), (10.0, 1000, 16, shared)])
    cold, warm = done
    assert cold.cached_tokens == 0 and warm.cached_tokens == 992  # (1000-1)//16 blocks
    assert server.kv.hits == 992 and server.kv.queries == 2000
    assert (warm.finished - warm.arrival) < (cold.finished - cold.arrival)
    server.kv.check()


def test_kv_capacity_makes_requests_wait() -> None:
    cost = dataclasses.replace(COST, kv_tokens=2048)
    server, done = _run_requests(cost, [(0.0, 1000, 100, _hashes(1100, "x")),
                                        (0.0, 1000, 100, _hashes(1100, "y"))])
    a, b = sorted(done, key=lambda r: r.admitted)
    assert b.admitted >= a.finished - 1e-9 or b.preemptions or a.preemptions
    with pytest.raises(RequestRejected):
        server.submit(2000, 100, _hashes(2100, "z"))
    server.kv.check()


def test_decoding_into_a_full_cache_preempts() -> None:
    cost = dataclasses.replace(COST, kv_tokens=1024)
    server, done = _run_requests(cost, [(0.0, 200, 400, _hashes(600, f"x{i}"))
                                        for i in range(3)])
    assert len(done) == 3 and server.stats.preemptions > 0
    assert all(r.gen == 400 for r in done)
    server.kv.check()
    assert server.kv.used == 0


# ------------------------------------------------------------------------------ backend

def _small_workload(**changes: object) -> Workload:
    base = Workload(n_groups=4, group_size=2, prompt_tokens=LogNormal(300, 0.0),
                    turn_tokens=LogNormal(400, 0.0), group_sigma=0.0, episode_sigma=0.0,
                    tool_tokens=LogNormal(40, 0.0), tool_latency_s=LogNormal(1.0, 0.0))
    return dataclasses.replace(base, **changes)


def test_backend_generate_cut_continue_and_version_salt() -> None:
    workload = _small_workload()
    fleet = build_fleet(workload, 1, COST)
    backend = fleet.backends[0]

    async def main() -> tuple:
        messages = [{"role": "user", "content": workload.problem(2)}]
        with tagged(RequestTag("sim-2#0", "sim-2", 0)):
            prompt = await backend.render_prompt(messages)
            cut = await backend.generate(prompt, stop=CODE.stop_strings, max_tokens=100,
                                         sampling=SAMPLING)
            rest = await backend.generate(prompt + cut.token_ids, stop=CODE.stop_strings,
                                          max_tokens=10_000, sampling=SAMPLING)
        with tagged(RequestTag("sim-2#1", "sim-2", 1)):  # a sibling under new weights
            fresh = await backend.generate(prompt, stop=CODE.stop_strings, max_tokens=10,
                                           sampling=SAMPLING)
        return prompt, cut, rest, fresh

    prompt, cut, rest, fresh = fleet.run(main)
    assert len(prompt) == 300
    assert cut.finish_reason == "length" and len(cut.token_ids) == 100
    assert rest.info["cached_tokens"] == (400 - 1) // 16 * 16  # prompt + cut part cached
    script = workload.script(2, 0)
    assert len(cut.token_ids) + len(rest.token_ids) == script.turns[0].gen_tokens
    assert rest.finish_reason == "stop" and rest.stop_string == "\n</code>"
    call = CODE.find_call(cut.text + rest.text)
    assert call is not None and "latency_s=" in call.code
    assert fresh.info["cached_tokens"] == 0  # policy version 1 salts the cache
    counters = fleet.run(backend.prefix_cache_counters())
    assert counters == (fleet.servers[0].kv.hits, fleet.servers[0].kv.queries)


def test_workload_is_deterministic_and_order_independent() -> None:
    a, b = Workload(seed=3), Workload(seed=3)
    forward = [a.script(g, s) for g in range(20) for s in range(8)]
    backward = [b.script(g, s) for g in reversed(range(20)) for s in reversed(range(8))]
    assert forward == list(reversed(backward))
    assert Workload(seed=4).script(0, 0) != a.script(0, 0)
    scripts = a.scripts()[:800]
    assert all(s.total_tokens <= a.max_episode_tokens + 1024 for s in scripts)
    mean_calls = sum(s.calls for s in scripts) / len(scripts)
    assert 6 < mean_calls < 10


def test_the_real_agent_loop_runs_a_simulated_episode() -> None:
    workload = Workload(n_groups=2, seed=1)
    fleet = build_fleet(workload, 1, COST, SandboxModel(workers=4))
    # run_episode names its episode "ep-<n>", an id without a sample index: the simulated
    # model gives the group's first such episode sample 0's script
    script = workload.script(1, 0)

    async def main():  # noqa: ANN202
        return await run_episode(workload.problem(1), fleet.backends[0], CODE,
                                 fleet.sandbox, workload.loop_config())

    traj = fleet.run(main)
    assert script.ending == "answer"
    assert traj.finish_reason == "answered" and traj.answer == workload.answer(1)
    assert sum(1 for s in traj.segments if s.source == "tool") == script.calls
    assert fleet.sandbox.stats.runs == script.calls
    tool_time = sum(t.tool_latency_s for t in script.turns)
    assert fleet.env.now > tool_time


def test_many_episodes_stay_above_the_ideal_makespan() -> None:
    workload = _small_workload(n_groups=6, group_size=4, turn_tokens=LogNormal(300, 0.8),
                               calls_mean=3.0)
    cost = dataclasses.replace(COST, kv_tokens=16_000)
    fleet = build_fleet(workload, 2, cost)

    async def one(g: int, s: int) -> str:
        episode = Episode(workload.problem(g), fleet.backends[g % 2], CODE, fleet.sandbox,
                          workload.loop_config(), episode_id=f"sim-{g}#{s}",
                          group_id=f"sim-{g}")
        await episode.advance()
        script = workload.script(g, s)  # the id names the sample: its script was played
        assert episode.calls == script.calls or episode.trajectory.finish_reason != "answered"
        return episode.trajectory.finish_reason

    async def main() -> list[str]:
        return await asyncio.gather(*(one(g, s) for g in range(6) for s in range(4)))

    reasons = fleet.run(main)
    assert set(reasons) <= {"answered", "token_budget"}
    report = fleet.report()
    assert report["sim_time_s"] >= report["ideal_makespan_s"]
    assert report["prefix_cache_hit_rate"] > 0.5
    for server in fleet.servers:
        server.kv.check()
        assert server.kv.used == 0


# ------------------------------------------------------------------------------ calibration

def test_fit_recovers_a_cost_model() -> None:
    truth = ServerCostModel(a=0.02, b=0.0004, c=5e-5, d=2e-8)
    points = [StepMeasurement(n, truth.step_time(n, p, k), p, k)
              for n, p, k in [(1, 0, 1000), (8, 0, 50_000), (64, 0, 200_000),
                              (0, 2000, 0), (32, 1000, 100_000), (128, 0, 10_000)]]
    fitted = ServerCostModel.fit(points)
    for name in ("a", "b", "c", "d"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6)


def test_cpu_preset_matches_measured_throughput() -> None:
    cpu = ServerCostModel.cpu_tiny()
    for n, tok_s in [(1, 300), (8, 1700), (32, 3700)]:
        assert cpu.decode_rate(n) == pytest.approx(tok_s, rel=0.15)


def test_ideal_makespan_formula() -> None:
    workload = _small_workload()
    ideal = ideal_makespan(workload, 2, COST, SandboxModel(workers=1))
    n_star = min(COST.max_running, COST.max_batched_tokens)
    steps = max(ideal.decode_tokens / n_star, ideal.context_token_steps / COST.kv_tokens)
    work = (COST.a * steps + COST.b * ideal.decode_tokens + COST.c * ideal.prefill_tokens) / 2
    assert ideal.work_s == pytest.approx(work)
    assert ideal.prefill_tokens == sum(workload.group_prompt_tokens(g) for g in range(4)) + sum(
        s.tool_tokens for s in workload.scripts())
    assert ideal.makespan_s == max(ideal.work_s, ideal.critical_path_s, ideal.sandbox_s)


# ------------------------------------------------------------------------------ sandbox

def test_sandbox_pool_queues_times_out_and_loses_sessions() -> None:
    env = simpy.Environment()
    sandbox = SimSandbox(env, SandboxModel(workers=2, loss_prob=1.0))

    async def main() -> tuple:
        sessions = [sandbox.session() for _ in range(4)]
        code = 'print("x" * 12)  # sim: latency_s=1.0'
        results = await asyncio.gather(*(s.run(code) for s in sessions))
        slow = await sandbox.session().run('print("x" * 1)  # sim: latency_s=9.0', timeout=2.0)
        return results, await sessions[0].alive(), slow

    results, alive, slow = run_simulated(main, env)
    assert [r.stdout for r in results] == ["x" * 12 + "\n"] * 4
    assert env.now == pytest.approx(2.0 + 2.0)  # two waves of two, then the 2 s timeout
    assert sandbox.stats.queue_s == pytest.approx(2.0)
    assert not alive  # loss_prob=1: the session died after its snippet
    assert slow.timed_out and slow.state_lost


def test_sandbox_live_sessions_bound_waits_and_is_released_on_close() -> None:
    """``max_sessions``: a session's first snippet waits for a live session, held until it
    closes (as the local pool's ``SandboxConfig.max_sessions``); the client says its bound
    (SessionLimited), which partial rollout reads to park no more sessions than it leaves."""
    env = simpy.Environment()
    sandbox = SimSandbox(env, SandboxModel(workers=8, max_sessions=2))
    assert isinstance(sandbox, SessionLimited) and sandbox.max_sessions == 2
    assert SimSandbox(env, SandboxModel()).max_sessions is None
    code = 'print("x" * 1)  # sim: latency_s=1.0'
    started: dict[int, float] = {}

    async def use(i: int, hold_s: float) -> None:
        session = sandbox.session()
        await session.run(code)
        started[i] = env.now - 1.0  # when its first snippet began
        await asyncio.sleep(hold_s)
        await session.close()

    async def main() -> None:
        await asyncio.gather(use(0, 2.0), use(1, 5.0), use(2, 0.0))

    run_simulated(main, env)
    assert started == pytest.approx({0: 0.0, 1: 0.0, 2: 3.0})  # 2 waits for 0 to close


def test_a_cancelled_wait_for_a_live_session_takes_none() -> None:
    env = simpy.Environment()
    sandbox = SimSandbox(env, SandboxModel(max_sessions=1))
    code = 'print("x" * 1)  # sim: latency_s=1.0'

    async def main() -> float:
        holder = sandbox.session()
        await holder.run(code)
        waiting = asyncio.ensure_future(sandbox.session().run(code))
        await asyncio.sleep(1.0)
        waiting.cancel()
        await holder.close()
        late = sandbox.session()
        await late.run(code)  # the cancelled wait left the slot free
        return env.now

    assert run_simulated(main, env) == pytest.approx(3.0)


def test_executor_work_takes_no_simulated_time() -> None:
    env = simpy.Environment()

    async def main() -> int:
        await asyncio.sleep(5)
        return await asyncio.to_thread(sum, range(1000))

    assert run_simulated(main, env) == 499500
    assert env.now == pytest.approx(5)
