"""Agent-loop benchmark: the loop's own overhead per turn, and episodes one process sustains.

Run: ``.venv/bin/python benchmarks/agent_loop.py`` (``--quick`` for a smoke run).

* overhead per turn: an *instant* backend (scripted turns, byte tokens, no model) and an *instant*
  sandbox (a stub that returns a result at once), so what is timed is the loop itself:
  budgets, segment bookkeeping, format parsing/rendering, answer extraction;
* episodes in flight: N concurrent episodes whose model calls each take 50 ms (a sleep standing
  in for a server), with the stub sandbox, then with the real sandbox (sessions bounded by
  ``max_sessions``, the rest queue); wall time, throughput and peak RSS are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from typing import Any

from _common import print_table

from agentmath.agent.loop import run_episode
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.formats import get_format
from agentmath.sandbox import ExecResult, SandboxPool

FMT = get_format("code_interpreter")
TURNS = [
    "First compute the product.\n<code>\nx = 123456789 * 987654321\nprint(x)\n</code>",
    "Now add one.\n<code>\nx + 1\n</code>",
    "The answer is \\boxed{121932631112635270}.",
]


class InstantSession:
    async def run(self, code: str, timeout: float | None = None) -> ExecResult:
        return ExecResult(stdout="121932631112635269\n")

    async def alive(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class InstantPool:
    def session(self) -> InstantSession:
        return InstantSession()


async def overhead(episodes: int) -> float:
    """Mean loop time per turn (ms) with an instant backend and sandbox."""
    backend, pool = ScriptedBackend(TURNS), InstantPool()
    await run_episode("q", backend, FMT, pool)  # warm up (imports, math-verify extraction)
    t = time.perf_counter()
    turns = 0
    for _ in range(episodes):
        traj = await run_episode("q", backend, FMT, pool)  # type: ignore[arg-type]
        assert traj.finish_reason == "answered", traj.finish_reason
        turns += sum(1 for s in traj.segments if s.source == "model")
    return (time.perf_counter() - t) * 1000 / turns


async def in_flight(n: int, pool: Any, delay: float) -> tuple[float, int]:
    """Run n concurrent episodes; returns (wall seconds, episodes answered)."""
    backend = ScriptedBackend(TURNS, delay=delay)
    cfg = LoopConfig(time_limit_s=3600)
    t = time.perf_counter()
    trajs = await asyncio.gather(*(run_episode("q", backend, FMT, pool, cfg)
                                   for _ in range(n)))
    return time.perf_counter() - t, sum(1 for x in trajs if x.finish_reason == "answered")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(quick: bool) -> None:
    k = 10 if quick else 1
    rows = []
    per_turn = await overhead(2000 // k)
    rows.append(("loop overhead per turn (instant model + sandbox)", f"{per_turn:.3f} ms",
                 "<= 1 ms"))
    n = 10_000 // k
    wall, ok = await in_flight(n, InstantPool(), 0.05)
    rows.append((f"{n:,} episodes in flight, 50 ms model calls, stub sandbox",
                 f"{wall:.1f} s, {ok:,} answered, {n * 3 / wall:,.0f} turns/s", ">= 10,000"))
    rows.append(("peak RSS of the process so far", f"{peak_rss_mib():.0f} MiB", ""))
    m = 2000 // k
    async with SandboxPool(SandboxConfig(max_sessions=64)) as pool:
        wall, ok = await in_flight(m, pool, 0.05)
    rows.append((f"{m:,} episodes, 50 ms model calls, real sandbox (64 live sessions)",
                 f"{wall:.1f} s, {ok:,} answered, {m * 2 / wall:,.0f} tool calls/s", ""))
    print_table("agentmath agent-loop benchmark", ("measure", "result", "goal"), rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10x smaller (smoke run)")
    asyncio.run(main(parser.parse_args().quick))
