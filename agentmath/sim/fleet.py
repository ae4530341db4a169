"""A simulated fleet in one call: N servers, their backends, a sandbox, one workload.

:func:`build_fleet` wires the pieces on one simpy environment; :meth:`SimFleet.run` drives an
async coroutine (the scheduler, a benchmark) on it in simulated time; :meth:`SimFleet.report`
summarises what the servers and the sandbox did (tokens, prefix-cache hit rate, idle time)
next to the ideal makespan of the workload.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import simpy

from agentmath.formats.base import ToolFormat
from agentmath.sim.backend import SimServerBackend
from agentmath.sim.clock import run_simulated
from agentmath.sim.costs import ServerCostModel
from agentmath.sim.ideal import IdealMakespan, ideal_makespan
from agentmath.sim.kvcache import BlockHasher
from agentmath.sim.policy import SimPolicy
from agentmath.sim.sandbox import SandboxModel, SimSandbox
from agentmath.sim.server import SimServer
from agentmath.sim.workload import Workload

__all__ = ["SimFleet", "build_fleet"]

T = TypeVar("T")


@dataclass
class SimFleet:
    """Everything of one simulation, on one simpy environment."""

    env: simpy.Environment
    workload: Workload
    cost: ServerCostModel
    policy: SimPolicy
    servers: list[SimServer]
    backends: list[SimServerBackend]
    sandbox: SimSandbox

    def run(self, main: Callable[[], Awaitable[T]] | Coroutine[Any, Any, T]) -> T:
        """Run ``main`` to completion in this fleet's simulated time; its result."""
        return run_simulated(main, self.env)

    def ideal(self) -> IdealMakespan:
        """The workload's makespan lower bound on these servers and this sandbox."""
        return ideal_makespan(self.workload, len(self.servers), self.cost, self.sandbox.model)

    def report(self) -> dict[str, Any]:
        """Simulated time, per-server counters and totals, sandbox counters (JSON-ready)."""
        now = float(self.env.now)
        rows = []
        for server in self.servers:
            row = asdict(server.stats)
            row.update(name=server.name, prefix_cache_hits=server.kv.hits,
                       prefix_cache_queries=server.kv.queries,
                       idle_fraction=server.idle_fraction(), kv_evictions=server.kv.evictions)
            rows.append(row)
        hits = sum(r["prefix_cache_hits"] for r in rows)
        queries = sum(r["prefix_cache_queries"] for r in rows)
        ideal = self.ideal()
        return {
            "sim_time_s": now, "servers": rows,
            "decode_tokens": sum(r["decode_tokens"] for r in rows),
            "prefill_tokens": sum(r["prefill_tokens"] for r in rows),
            "prefix_cache_hit_rate": hits / queries if queries else None,
            "idle_fraction": (sum(r["idle_fraction"] for r in rows) / len(rows)),
            "preemptions": sum(r["preemptions"] for r in rows),
            "sandbox": {**asdict(self.sandbox.stats),
                        "utilisation": self.sandbox.utilisation()},
            "ideal_makespan_s": ideal.makespan_s, "ideal": asdict(ideal),
            "vs_ideal": now / ideal.makespan_s if ideal.makespan_s else None}


def build_fleet(workload: Workload | None = None, servers: int = 1,
                cost: ServerCostModel | None = None, sandbox: SandboxModel | None = None, *,
                fmt: ToolFormat | str = "code_interpreter",
                env: simpy.Environment | None = None, stale_kv: bool = False) -> SimFleet:
    """``servers`` simulated servers with cost model ``cost`` (default: the H100 preset), their
    backends (one shared simulated model and block hasher, so an episode moved between servers
    behaves the same), and a simulated sandbox, all on ``env`` (a new one by default).
    ``stale_kv``: KV computed under an older policy version stays reusable (no salt by
    version; see :class:`SimServerBackend`)."""
    env = env or simpy.Environment()
    workload = workload or Workload()
    cost = cost or ServerCostModel.h100_qwen3_8b()
    policy = SimPolicy(workload, fmt)
    hasher = BlockHasher(cost.block_size)
    sims = [SimServer(env, cost, name=f"sim-{i}") for i in range(servers)]
    backends = [SimServerBackend(s, policy, hasher, salt_by_version=not stale_kv) for s in sims]
    return SimFleet(env, workload, cost, policy, sims, backends,
                    SimSandbox(env, sandbox or SandboxModel()))
