"""Scheduler overhead of the rollout engine with 10,000 episodes in flight.

Every episode waits on its model call at the same time (a scripted model that sleeps), so all
of them are in flight together; the sandbox answers at once. The cost per turn of the whole
engine path (admission, Episode.advance, tags, group bookkeeping, the router when asked) is
compared with the same episodes run by a bare ``asyncio.gather`` of ``run_episode`` (the
baseline, measured in the same run): the difference is what the scheduler adds per turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from agentmath.agent import run_episode
from agentmath.backends.base import Generation
from agentmath.backends.router import Router
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import RolloutConfig
from agentmath.formats import get_format
from agentmath.rollout.records import GroupRequest
from agentmath.rollout.scheduler import RolloutEngine
from agentmath.sandbox.result import ExecResult
from agentmath.tasks import Task

TURNS = ["Set.\n<code>\nx = 41\n</code>", "Add.\n<code>\nx + 1\n</code>",
         "The answer is \\boxed{42}."]
WAIT_S = 0.5  # every model call sleeps this long: all episodes are in flight together


class _Waiting(ScriptedBackend):
    async def generate(self, prompt_ids: Sequence[int], **kwargs: Any) -> Generation:
        await asyncio.sleep(WAIT_S)
        return await super().generate(prompt_ids, **kwargs)


class _InstantSession:
    async def run(self, code: str, timeout: float | None = None) -> ExecResult:
        return ExecResult(stdout="41\n")

    async def alive(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class _InstantSandbox:
    def session(self) -> _InstantSession:
        return _InstantSession()


async def _engine(episodes: int, router: bool) -> float:
    backend: Any = _Waiting(TURNS)
    if router:
        backend = Router([_Waiting(TURNS), _Waiting(TURNS)])
    engine = RolloutEngine(backend, _InstantSandbox(), get_format("code_interpreter"),
                           config=RolloutConfig(max_in_flight=episodes))
    requests = [GroupRequest(Task(f"p{i}", "q", "42"), 8) for i in range(episodes // 8)]
    started = time.perf_counter()
    async for _ in engine.stream(requests):
        pass
    return time.perf_counter() - started


async def _baseline(episodes: int) -> float:
    backend, sandbox, fmt = _Waiting(TURNS), _InstantSandbox(), get_format("code_interpreter")
    started = time.perf_counter()
    await asyncio.gather(*(run_episode("q", backend, fmt, sandbox) for _ in range(episodes)))
    return time.perf_counter() - started


def measure(episodes: int = 10_000) -> dict[str, float]:
    """Per-turn cost (ms) of the bare loop, the engine, and the engine through a router."""
    turns = episodes * len(TURNS)
    waited = WAIT_S * len(TURNS)
    base = asyncio.run(_baseline(episodes))
    engine = asyncio.run(_engine(episodes, router=False))
    routed = asyncio.run(_engine(episodes, router=True))
    per_turn = {name: (wall - waited) / turns * 1e3
                for name, wall in (("baseline", base), ("engine", engine), ("router", routed))}
    return {"episodes": episodes, "turns": turns,
            "baseline_ms_per_turn": per_turn["baseline"],
            "engine_ms_per_turn": per_turn["engine"],
            "engine_plus_router_ms_per_turn": per_turn["router"],
            "scheduler_overhead_ms_per_turn": per_turn["engine"] - per_turn["baseline"],
            "scheduler_and_router_overhead_ms_per_turn": per_turn["router"] - per_turn["baseline"]}
