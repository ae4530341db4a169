"""How fast the simulator itself runs: a paper-scale workload through the real agent loop.

``python -m agentmath.sim.bench [--groups 512] [--servers 8] [--per-server 32]``

A deliberately plain driver (no rollout engine, no router: each group sticks to server
``group % servers``, at most ``per_server * servers`` episodes in flight), so that the wall and
CPU time measured are the simulator's and the agent loop's, not a scheduler's. The scheduler
benchmark (``benchmarks/rollout.py --simulate``) drives the real engine and router.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from agentmath.agent.episode import Episode
from agentmath.formats import get_format
from agentmath.sim.costs import ServerCostModel
from agentmath.sim.fleet import SimFleet, build_fleet
from agentmath.sim.sandbox import SandboxModel
from agentmath.sim.workload import Workload

__all__ = ["drive", "main"]


async def drive(fleet: SimFleet, in_flight: int) -> dict[str, int]:
    """Run every episode of the fleet's workload; finish reasons counted."""
    workload, fmt = fleet.workload, get_format("code_interpreter")
    config = workload.loop_config()
    slots = asyncio.Semaphore(in_flight)
    reasons: dict[str, int] = {}

    async def one(group: int, sample: int) -> None:
        async with slots:
            backend = fleet.backends[group % len(fleet.backends)]
            episode = Episode(workload.problem(group), backend, fmt, fleet.sandbox, config,
                              episode_id=f"sim-{group}#{sample}", group_id=f"sim-{group}")
            await episode.advance()
            reason = episode.trajectory.finish_reason or "?"
            reasons[reason] = reasons.get(reason, 0) + 1
            fleet.policy.forget(episode.id)
            fleet.backends[0].hasher.forget(episode.id)

    await asyncio.gather(*(one(g, s) for g in range(workload.n_groups)
                           for s in range(workload.group_size)))
    return reasons


def run(groups: int, servers: int, per_server: int, seed: int = 0) -> dict[str, Any]:
    """One timed run; its figures (simulated and real)."""
    workload = Workload(seed=seed, n_groups=groups)
    fleet = build_fleet(workload, servers, ServerCostModel.h100_qwen3_8b(),
                        SandboxModel(workers=512))
    wall, cpu = time.perf_counter(), time.process_time()
    reasons = fleet.run(drive(fleet, per_server * servers))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    report = fleet.report()
    tokens = sum(s.total_tokens for s in workload.scripts())
    return {"episodes": workload.episodes, "tokens": tokens, "finish": reasons,
            "wall_s": wall, "cpu_s": cpu, "sim_time_s": report["sim_time_s"],
            "ideal_makespan_s": report["ideal_makespan_s"],
            "prefix_cache_hit_rate": report["prefix_cache_hit_rate"],
            "idle_fraction": report["idle_fraction"], "preemptions": report["preemptions"],
            "prefill_tokens": report["prefill_tokens"],
            "decode_tokens": report["decode_tokens"]}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: print one run's figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=512)
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--per-server", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args(argv)
    print(json.dumps(run(ns.groups, ns.servers, ns.per_server, ns.seed), indent=2))


if __name__ == "__main__":
    main()
