"""The routing decisions of :class:`~agentmath.backends.router.Router`: which server a request
goes to, and the state that decides it (the servers' live counters, the sticky homes of episodes
and groups, the policy version), with no I/O.

A policy is a :class:`Routing` method ``(tag, weight, exclude) -> ServerSlot`` named in
:data:`POLICIES` (``RouterConfig.policy`` is checked against it): ``prefix_aware`` (sticky by
episode and group, with weighted spill; described in :mod:`agentmath.backends.router`) and the
baselines ``round_robin`` and ``least_loaded``. :class:`Routing` is also the whole of what a
caller that sends requests itself needs (:meth:`Routing.acquire`, :meth:`Routing.release`: verl's
router plug-in).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from agentmath.backends.base import RequestTag
from agentmath.backends.router_stats import ServerStats
from agentmath.config import StrictModel
from agentmath.errors import BackendError

__all__ = ["POLICIES", "RouterConfig", "Routing", "ServerSlot"]


class RouterConfig(StrictModel):
    """Routing, spill and probing settings of a :class:`~agentmath.backends.router.Router`."""

    policy: str = Field(
        "prefix_aware", description=(
            "A name in POLICIES. prefix_aware: sticky by episode and group with weighted spill "
            "(agentmath/backends/router.py's docstring). round_robin and least_loaded (least "
            "in-flight weight) are the baselines benchmarks compare it against: no stickiness, "
            "so siblings and later turns land wherever the policy sends them."))
    max_in_flight_per_server: int = Field(256, ge=1, le=1_000_000, description=(
        "In-flight requests at which a server counts as saturated: sticky requests spill to "
        "the least-loaded server (a saturation signal, not a queue: the server backend's own "
        "concurrency limit queues)."))
    w_base: int = Field(1, ge=1, le=1_000_000, description=(
        "Weight every request has on top of floor(L / l_base), L its prompt length."))
    l_base: int = Field(4096, ge=1, le=10_000_000, description=(
        "Prompt tokens per extra unit of weight: long contexts weigh more."))
    spill_factor: float = Field(1.5, ge=1.0, le=1000.0, description=(
        "A sticky server is saturated when its load with the request exceeds spill_factor x the "
        "least-loaded server's load with it, plus spill_slack."))
    spill_slack: int = Field(32, ge=0, le=10_000_000, description=(
        "Weight units of imbalance always tolerated to keep a prefix on its server "
        "(about requests, for prompts shorter than l_base)."))
    probe_interval_s: float = Field(5.0, gt=0, le=3600, description=(
        "Seconds between health probes of a server that is out of rotation."))
    probe_timeout_s: float = Field(10.0, gt=0, le=3600, description=(
        "Time one probe may take before it counts as failed."))
    max_sticky_entries: int = Field(200_000, ge=1, le=100_000_000, description=(
        "Bound of each sticky map (episodes, groups); the least recently used entry goes."))
    cache_salt_by_version: bool = Field(False, description=(
        "Servers built by Router.from_urls salt vLLM's prefix cache with the request tag's "
        "policy version (cache_salt), so KV from older weights is never reused."))

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, policy: str) -> str:
        if policy not in POLICIES:
            raise ValueError(f"unknown routing policy {policy!r}; choose one of "
                             f"{', '.join(POLICIES)}")
        return policy


@dataclass(slots=True, eq=False)
class ServerSlot(ServerStats):
    """A server's routing state: its live counters, ``server`` being its label."""

    backend: Any = None
    index: int = 0
    probe: asyncio.Task[None] | None = field(default=None, repr=False)
    retired: bool = False  # removed for good (remove_server): never probed back up


class Routing:
    """The servers (:class:`ServerSlot`, in index order), the sticky homes and the policy
    version, and the decisions made over them."""

    def __init__(self, servers: Sequence[ServerSlot], config: RouterConfig | None = None) -> None:
        self.config = config or RouterConfig()
        self._servers = list(servers)
        self._episodes: OrderedDict[str, ServerSlot] = OrderedDict()
        self._groups: OrderedDict[str, ServerSlot] = OrderedDict()
        self.policy_version = 0
        self._stale = 0  # requests tagged with an older policy version
        self._cursor = 0  # round_robin's next server; least_loaded's tie-break start

    def weight(self, prompt_len: int) -> int:
        """A request's weight: ``floor(prompt_len / l_base) + w_base``."""
        return prompt_len // self.config.l_base + self.config.w_base

    def route(self, tag: RequestTag | None, weight: int,
              exclude: frozenset[int] | set[int] = frozenset()) -> int:
        """The index of the server for a request (records the sticky homes; dispatches
        nothing). O(servers). BackendError when no server outside ``exclude`` is up."""
        return POLICIES[self.config.policy](self, tag, weight, exclude).index

    def _prefix_aware(self, tag: RequestTag | None, weight: int,
                      exclude: frozenset[int] | set[int]) -> ServerSlot:
        target = least = self._least(exclude)
        if tag is not None:
            home = self._home(self._episodes, tag.episode_id, exclude)
            if home is None and tag.group_id is not None:
                home = self._home(self._groups, tag.group_id, exclude)
            if home is not None and home is not least and self._saturated(home, least, weight):
                home.spills += 1
            elif home is not None:
                target = home
            self._remember(self._episodes, tag.episode_id, target)
            if tag.group_id is not None and self._home(self._groups, tag.group_id,
                                                       exclude) is None:
                self._remember(self._groups, tag.group_id, target)
        return target

    def _round_robin(self, tag: RequestTag | None, weight: int,
                     exclude: frozenset[int] | set[int]) -> ServerSlot:
        return self._rotate(False, exclude)

    def _least_loaded(self, tag: RequestTag | None, weight: int,
                      exclude: frozenset[int] | set[int]) -> ServerSlot:
        return self._rotate(True, exclude)

    def _least(self, exclude: frozenset[int] | set[int]) -> ServerSlot:
        """The least-loaded server that is up and not excluded (the first of equals)."""
        live = [s for s in self._servers if s.up and s.index not in exclude]
        if not live:
            raise self._no_server_error()
        return min(live, key=lambda s: s.load)

    def _rotate(self, by_load: bool, exclude: frozenset[int] | set[int]) -> ServerSlot:
        """The baselines: the next server that is up after the cursor (``round_robin``), or
        the least-loaded one, ties going to the first after the cursor (``least_loaded``)."""
        n = len(self._servers)
        best: ServerSlot | None = None
        for step in range(n):
            server = self._servers[(self._cursor + step) % n]
            if not server.up or server.index in exclude:
                continue
            if best is None or (by_load and server.load < best.load):
                best = server
                if not by_load:
                    break
        if best is None:
            raise self._no_server_error()
        self._cursor = (best.index + 1) % n
        return best

    def _saturated(self, home: ServerSlot, least: ServerSlot, weight: int) -> bool:
        cfg = self.config
        return (home.in_flight >= cfg.max_in_flight_per_server or
                home.load + weight > cfg.spill_factor * (least.load + weight) + cfg.spill_slack)

    def _home(self, homes: OrderedDict[str, ServerSlot], key: str,
              exclude: frozenset[int] | set[int]) -> ServerSlot | None:
        server = homes.get(key)
        if server is None or not server.up or server.index in exclude:
            return None
        homes.move_to_end(key)
        return server

    def _remember(self, homes: OrderedDict[str, ServerSlot], key: str, server: ServerSlot) -> None:
        homes[key] = server
        homes.move_to_end(key)
        if len(homes) > self.config.max_sticky_entries:
            homes.popitem(last=False)

    def home_of(self, episode_id: str) -> str | None:
        """The server an episode's next request would stick to (None: no home yet)."""
        server = self._episodes.get(episode_id)
        return None if server is None else server.server

    def forget(self, episode_id: str | None = None, group_id: str | None = None) -> None:
        """Drop the sticky home of a finished episode and/or group (unknown ids are fine)."""
        if episode_id is not None:
            self._episodes.pop(episode_id, None)
        if group_id is not None:
            self._groups.pop(group_id, None)

    def set_policy_version(self, version: int) -> None:
        """Record a weight update: group homes are dropped (under new weights no server holds
        a group's prefix, so new groups go by load); requests tagged with an older version are
        counted as stale. Versions never go back."""
        if version < self.policy_version:
            raise ValueError(f"policy version {version} is older than {self.policy_version}")
        if version != self.policy_version:
            self._groups.clear()
        self.policy_version = version

    # ------------------------------------------------- decisions for callers that dispatch

    def acquire(self, tag: RequestTag | None, weight: int,
                exclude: frozenset[int] | set[int] = frozenset()) -> int:
        """Route a request (:meth:`route`) and count it in flight on the chosen server; its
        index. Pair every call with :meth:`release`. The decision half of :meth:`generate`,
        for a caller that sends the request itself (verl's router plug-in,
        :mod:`agentmath.verl.router`)."""
        index = self.route(tag, weight, exclude)
        server = self._servers[index]
        server.requests += 1
        server.in_flight += 1
        server.load += weight
        return index

    def release(self, index: int, weight: int) -> None:
        """A request :meth:`acquire` counted on server ``index`` is over (done or failed)."""
        server = self._servers[index]
        server.in_flight -= 1
        server.load -= weight

    def clear_homes(self) -> int:
        """Drop every sticky home (episodes and groups), e.g. after a weight update that reset
        the servers' prefix caches; the number of entries dropped."""
        dropped = len(self._episodes) + len(self._groups)
        self._episodes.clear()
        self._groups.clear()
        return dropped

    def _no_server_error(self) -> BackendError:
        states = "; ".join(f"{s.server}: {'up' if s.up else 'down'}"
                           f" (last error: {s.last_error or 'none'})" for s in self._servers)
        return BackendError(f"no server can take the request ({len(self._servers)} "
                            f"servers): {states}")


Policy = Callable[[Routing, RequestTag | None, int, frozenset[int] | set[int]], ServerSlot]
#: Routing policy name (RouterConfig.policy) -> the method that picks a request's server.
POLICIES: dict[str, Policy] = {
    "prefix_aware": Routing._prefix_aware,
    "round_robin": Routing._round_robin,
    "least_loaded": Routing._least_loaded,
}
