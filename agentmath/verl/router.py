"""agentmath's prefix-aware router as verl's load-balancer plug-in.

verl 0.9.1 routes every ``server_manager.generate`` through one load-balancer actor; its
default keeps a request id on one server and sends new ids to the server with the fewest
requests in flight. ``rollout.router_config_path`` swaps in a plug-in: a YAML whose
``router_class`` names a class built as ``cls(servers, config)`` (``servers``: server id ->
actor handle; ``config``: the whole YAML as a dict) and answering verl's ``RequestLoadBalancer``
protocol (``verl/workers/rollout/router.py``). :class:`AgentMathRouter` is that class, and its
decisions are agentmath's own :class:`~agentmath.backends.router.Router` policy (the same code
the rollout engine routes with, through :meth:`Router.acquire` / :meth:`Router.release`):

* a request weighs ``floor(prompt_len / l_base) + w_base``; a server's load is the sum of its
  in-flight weights (verl's default counts requests, whatever their length);
* an episode (a verl request id: every turn of one agentmath episode shares it) returns to the
  server holding its KV cache; its first request goes to its *group's* server, the group being
  the exact first-turn prompt (the samples of a GRPO group share it), so siblings share one
  prefix cache; a new group goes to the least-loaded server;
* a sticky server that is saturated (``spill_factor``, ``spill_slack``,
  ``max_in_flight_per_server``) is skipped for the least-loaded one, and the episode's home
  moves there.

So the acquire call needs ``prompt_ids`` (declared in :meth:`require_acquire_fields`; verl then
sends them with each acquire), and release needs the ``request_id`` to find the request's
weight. The YAML's other keys are :class:`~agentmath.backends.router.RouterConfig` fields
(unknown ones are errors). No verl import: verl wraps the class in ``ray.remote`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentmath.backends.base import RequestTag
from agentmath.backends.router import Router, RouterConfig
from agentmath.errors import BackendError, ConfigError

#: verl's FullyAsync client retries while the pool is empty only on this message.
NO_SERVER = "No available servers in load balancer"


@dataclass(frozen=True, slots=True)
class _ServerRef:
    """A verl server as the Router sees it: a label (its id); requests never go through it."""

    base_url: str
    name: str = "verl"


def prefix_key(prompt_ids: list[int]) -> str:
    """The group key of a first request: the exact prompt (siblings share it)."""
    return f"p{len(prompt_ids)}-{hash(tuple(prompt_ids)) & 0xFFFFFFFFFFFFFFFF:016x}"


class AgentMathRouter:
    """verl ``RequestLoadBalancer`` with agentmath's prefix-aware, load-aware policy."""

    def __init__(self, servers: Mapping[str, Any], config: Mapping[str, Any] | None = None
                 ) -> None:
        settings = {k: v for k, v in dict(config or {}).items() if k != "router_class"}
        try:
            self.config = RouterConfig.model_validate(settings)
        except ValueError as exc:
            raise ConfigError(f"router config: {exc}") from None
        self._router: Router | None = None  # built with the first server (verl may start empty)
        self._ids: list[str] = []  # router index -> server id (indices are never reused)
        self._index: dict[str, int] = {}  # active server id -> router index
        self._handles: dict[str, Any] = {}
        self._inflight: dict[str, list[tuple[int, int]]] = {}  # request id -> (index, weight)
        self.add_servers(servers)

    # ---------------------------------------------------------------- verl's protocol
    def require_acquire_fields(self) -> list[str]:
        """The generate() field routing needs: the prompt ids (length and group key)."""
        return ["prompt_ids"]

    def require_release_fields(self) -> list[str]:
        """Release needs the request id to find the weight acquire counted."""
        return ["request_id"]

    def acquire_server(self, request_id: str, prompt_ids: list[int] | None = None,
                       **_: Any) -> tuple[str, Any]:
        """The server for a request, counted in flight: (server id, actor handle). A
        RuntimeError when no server is in the pool (what verl's clients expect)."""
        if self._router is None or not self._index:
            raise RuntimeError(NO_SERVER)
        router = self._router
        prompt = list(prompt_ids or [])
        group = prefix_key(prompt) if prompt and router.home_of(request_id) is None else None
        weight = router.weight(len(prompt))
        try:
            index = router.acquire(RequestTag(request_id, group), weight)
        except BackendError as exc:
            raise RuntimeError(f"{NO_SERVER}: {exc}") from None
        self._inflight.setdefault(request_id, []).append((index, weight))
        server_id = self._ids[index]
        return server_id, self._handles[server_id]

    def release_server(self, server_id: str, request_id: str | None = None) -> None:
        """A request acquired on ``server_id`` is over; unknown requests are ignored."""
        if self._router is None:
            return
        keys = [request_id] if request_id is not None else list(self._inflight)
        for key in keys:
            entries = self._inflight.get(key, [])
            for pos, (index, weight) in enumerate(entries):
                if self._ids[index] == server_id:
                    del entries[pos]
                    if not entries:
                        del self._inflight[key]
                    self._router.release(index, weight)
                    return

    def add_servers(self, servers: Mapping[str, Any]) -> None:
        """Put servers in rotation (a known id only gets its new handle)."""
        for server_id, handle in servers.items():
            self._handles[server_id] = handle
            if server_id in self._index:
                continue
            ref = _ServerRef(server_id)
            if self._router is None:
                self._router, index = Router([ref], self.config), 0
            else:
                index = self._router.add_server(ref)
            self._ids.append(server_id)
            self._index[server_id] = index

    def remove_servers(self, server_ids: list[str]) -> None:
        """Take servers out of rotation; episodes homed there go elsewhere next turn."""
        for server_id in server_ids:
            index = self._index.pop(server_id, None)
            self._handles.pop(server_id, None)
            if index is not None and self._router is not None:
                self._router.remove_server(index)

    def get_all_servers(self) -> list[str]:
        """The active server ids."""
        return list(self._index)

    def _in_flight(self) -> dict[str, int]:
        if self._router is None:
            return {}
        servers = self._router.stats().servers
        return {sid: servers[index].in_flight for sid, index in self._index.items()}

    def get_status(self) -> dict[str, Any]:
        """In-flight requests per server and in total, plus the router's own counters."""
        in_flight = self._in_flight()
        stats = self._router.stats() if self._router is not None else None
        return {"servers": in_flight, "total_inflight": sum(in_flight.values()),
                "active_servers": len(in_flight), "registered_handles": list(self._handles),
                "policy": self.config.policy,
                "router": None if stats is None else {
                    "sticky_episodes": stats.sticky_episodes,
                    "sticky_groups": stats.sticky_groups,
                    "spills": {self._ids[i]: s.spills for i, s in enumerate(stats.servers)},
                    "load": {self._ids[i]: s.load for i, s in enumerate(stats.servers)}}}

    def clear_sticky_cache(self) -> dict[str, Any]:
        """Drop every sticky home (verl calls it when weights change: no cache holds them)."""
        cleared = self._router.clear_homes() if self._router is not None else 0
        return {"cleared_entries": cleared, "server_loads": self._in_flight()}

    def get_total_inflight(self) -> int:
        """Requests in flight over the active servers."""
        return sum(self._in_flight().values())
