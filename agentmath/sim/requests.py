"""The records of a simulated server (:mod:`agentmath.sim.server`): one request's state and
timings, and the server's counters. Plain data, apart from the engine that moves them, so that
the backend and the benchmarks read them without the stepping code."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from agentmath.sim.kvcache import Segment

__all__ = ["ServerStats", "SimRequest"]


@dataclass(slots=True, eq=False)
class SimRequest:
    """One generate request inside a :class:`SimServer` (times are simulated seconds)."""

    prompt_len: int
    out_len: int
    hashes: list[int]  # chained hashes of the full blocks of prompt + output ids
    on_done: Callable[[SimRequest], None] | None
    arrival: float
    gen: int = 0  # tokens generated so far
    prefill_left: int = 0  # tokens still to compute before decoding (re)starts
    tail: Segment | None = None  # last cached segment of its context's blocks held
    registered: int = 0  # blocks of its context held as cached segments (a prefix)
    plain: int = 0  # further KV blocks held, not (yet) hashed
    cached_tokens: int = -1  # prefix-cache hit at first admission (-1: not admitted yet)
    admitted: float = math.nan
    first_token: float = math.nan
    finished: float = math.nan
    preemptions: int = 0
    state: str = "waiting"  # admitting | waiting | running | done | aborted | interrupted | failed
    error: BaseException | None = None


@dataclass(slots=True)
class ServerStats:
    """Counters of one server since it started."""

    requests: int = 0
    completed: int = 0
    aborted: int = 0
    interrupted: int = 0  # ended early with the tokens generated so far (:meth:`interrupt`)
    failed: int = 0
    preemptions: int = 0
    steps: int = 0
    busy_s: float = 0.0  # time spent in engine steps
    prefill_tokens: int = 0  # tokens computed by prefill (cache misses, recomputation)
    decode_tokens: int = 0
    queue_s: float = 0.0  # summed arrival -> first admission
    max_running: int = 0
    max_waiting: int = 0
