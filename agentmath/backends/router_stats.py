"""What a :class:`~agentmath.backends.router.Router` reports: its own counters and the servers'
prefix-cache counters.

Why a module of its own: the router's routing path stays small, and the records here are what
benchmarks, logs and tests read (``RouterStats`` from :meth:`Router.stats`,
``PrefixCacheStats`` from :meth:`Router.prefix_cache_stats`). Hit rates come only from the
servers' own counters (vLLM's ``/metrics``, read by each server backend's
``prefix_cache_counters()``), never from what the router predicts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentmath.backends.base import PrefixCacheCounted
from agentmath.errors import BackendError

__all__ = ["PrefixCacheStats", "RouterStats", "ServerCacheStats", "ServerStats", "imbalance",
           "read_prefix_cache_stats"]


@dataclass(slots=True)
class ServerStats:
    """One server's counters: ``spills`` are sticky requests sent elsewhere because it was
    saturated; ``failovers`` are requests that failed on it and were re-sent."""

    server: str
    up: bool = True
    in_flight: int = 0
    load: int = 0
    requests: int = 0
    completed: int = 0
    tokens: int = 0
    spills: int = 0
    failovers: int = 0
    down_events: int = 0
    last_error: str | None = None


@dataclass(slots=True)
class RouterStats:
    """A snapshot of the router: its policy, per-server counters and the load imbalance,
    (max - min) / mean of tokens (prompt + generated) routed per server (0 when nothing was
    routed)."""

    servers: list[ServerStats]
    imbalance: float
    policy_version: int
    stale_requests: int
    sticky_episodes: int
    sticky_groups: int
    policy: str = "prefix_aware"

    @property
    def spills(self) -> int:
        """Spills over all servers."""
        return sum(s.spills for s in self.servers)

    @property
    def failovers(self) -> int:
        """Failovers over all servers."""
        return sum(s.failovers for s in self.servers)


@dataclass(slots=True)
class ServerCacheStats:
    """A server's prefix-cache counters in tokens since it started (None with ``error``
    when they could not be read)."""

    server: str
    hits: float | None
    queries: float | None
    error: str | None = None

    @property
    def hit_rate(self) -> float | None:
        """hits / queries, None when unknown or nothing was queried."""
        return self.hits / self.queries if self.hits is not None and self.queries else None


@dataclass(slots=True)
class PrefixCacheStats:
    """Engine-reported prefix-cache counters: per server, and summed over those that answered."""

    servers: list[ServerCacheStats]
    hits: float
    queries: float

    @property
    def hit_rate(self) -> float | None:
        """Sum of hits / sum of queries, None when nothing was queried."""
        return self.hits / self.queries if self.queries else None


def imbalance(values: Sequence[float]) -> float:
    """(max - min) / mean of ``values`` (per-server tokens); 0 when empty or all zero."""
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean else 0.0


async def read_prefix_cache_stats(servers: Sequence[tuple[str, Any]]) -> PrefixCacheStats:
    """Each ``(label, backend)``'s own prefix-cache counters (its ``prefix_cache_counters()``;
    on an :class:`~agentmath.backends.openai.OpenAIBackend` vLLM's ``/metrics``) read at once,
    and their sums. A server that cannot say is listed with its error (which names it) and
    left out of the sums."""
    async def one(label: str, backend: Any) -> ServerCacheStats:
        if not isinstance(backend, PrefixCacheCounted):
            return ServerCacheStats(label, None, None, "no prefix_cache_counters()")
        try:
            hits, queries = await backend.prefix_cache_counters()
        except BackendError as exc:
            message = str(exc)
            return ServerCacheStats(label, None, None,
                                    message if label in message else f"{label}: {message}")
        return ServerCacheStats(label, float(hits), float(queries))

    rows = await asyncio.gather(*(one(label, backend) for label, backend in servers))
    return PrefixCacheStats(list(rows), sum(r.hits or 0.0 for r in rows),
                            sum(r.queries or 0.0 for r in rows))
