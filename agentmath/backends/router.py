"""A prefix-aware, load-aware router over N generation servers, itself a :class:`Backend`.

Why: the samples of a GRPO group share their prompt and each turn of an agentic episode extends
the last, so the cheapest server for a request is the one already holding its prefix in KV
cache. Pure stickiness piles work on one server (prime-rl#3255); pure load balancing throws the
cache away. AgentMath's prefix-aware weighted load balancing keeps both:

* A request weighs ``w = floor(L / l_base) + w_base`` (``L`` = prompt tokens: long contexts cost
  more); a server's load is the sum of its in-flight weights.
* The key is the current :class:`~agentmath.backends.base.RequestTag`: an episode returns to the
  server holding its KV; its first request goes to its group's server (siblings share the
  prompt); a new group, or an untagged request, goes to the least-loaded server. The sticky
  maps are LRU-bounded; :meth:`Router.forget` drops entries early.
* A *saturated* sticky server is skipped for the least-loaded one (a *spill*) and the episode's
  home moves there, where its next turns find the cache they built. Saturated: in-flight count
  at ``max_in_flight_per_server``, or load with the request above ``spill_factor`` x the
  least-loaded server's load with it, plus ``spill_slack``. The reference is the least-loaded
  server, not the mean, since the mean contains the sticky server itself (with two servers a
  factor >= 2 over the mean never fires); the slack keeps groups together at low load, where a
  few more requests cost a server little and a prefix re-prefilled elsewhere costs more.
* A decision is O(servers): one scan for the least-loaded, dict look-ups for the homes. The
  routing path uses only the Backend protocol (a simulator drives it with simulated servers);
  probing and metrics use optional methods (``healthy``, ``prefix_cache_counters``).

Baselines (``RouterConfig.policy``): ``round_robin`` (servers in turn) and ``least_loaded``
(the least in-flight weight) ignore the tag and keep no sticky homes; benchmarks compare the
prefix-aware policy against them (``benchmarks/_rollout_real.py``). A policy is a method of
:class:`Router` named in :data:`POLICIES`.

Failures: a :class:`~agentmath.errors.BackendError` from a server (after its own retries) takes
it out of rotation, drops the homes on it and re-sends the same prompt ids elsewhere, so the
episode loses nothing; a background probe brings it back. A
:class:`~agentmath.errors.RequestRejected` (the request's own fault) is re-raised, no failover.
Hit rates are the servers' own counters (:meth:`Router.prefix_cache_stats`), never guesses;
the records are in :mod:`agentmath.backends.router_stats`.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from pydantic import Field, field_validator

from agentmath.backends.base import (
    Addressed,
    Backend,
    Generation,
    HealthChecked,
    ModelNamed,
    RequestTag,
    SamplingParams,
    current_tag,
)
from agentmath.backends.router_stats import (
    PrefixCacheStats,
    RouterStats,
    ServerCacheStats,
    ServerStats,
    imbalance,
    read_prefix_cache_stats,
)
from agentmath.config import StrictModel
from agentmath.errors import BackendError, ConfigError, RequestRejected

__all__ = ["POLICIES", "PrefixCacheStats", "Router", "RouterConfig", "RouterStats",
           "ServerCacheStats", "ServerStats"]

T = TypeVar("T")


class RouterConfig(StrictModel):
    """Routing, spill and probing settings of a :class:`Router`."""

    policy: str = Field(
        "prefix_aware", description=(
            "A name in POLICIES. prefix_aware: sticky by episode and group with weighted spill "
            "(the module docstring). round_robin and least_loaded (least in-flight weight) are "
            "the baselines benchmarks compare it against: no stickiness, so siblings and later "
            "turns land wherever the policy sends them."))
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
class _Server(ServerStats):
    """A server's routing state: its live counters, ``server`` being its label."""

    backend: Any = None
    index: int = 0
    probe: asyncio.Task[None] | None = field(default=None, repr=False)
    retired: bool = False  # removed for good (remove_server): never probed back up


class Router:
    """A :class:`~agentmath.backends.base.Backend` that spreads requests over ``servers``
    (see the module docstring for the policy); ``name`` is ``"router"``."""

    name: str = "router"

    def __init__(self, servers: Sequence[Backend], config: RouterConfig | None = None) -> None:
        if not servers:
            raise ConfigError("Router needs at least one server")
        self.config = config or RouterConfig()
        self._servers = [_Server(_label(b, i), backend=b, index=i) for i, b in enumerate(servers)]
        self._episodes: OrderedDict[str, _Server] = OrderedDict()
        self._groups: OrderedDict[str, _Server] = OrderedDict()
        self.policy_version = 0
        self._stale = 0
        self._cursor = 0  # round_robin's next server; least_loaded's tie-break start
        self._closed = False

    @classmethod
    def from_urls(cls, urls: Sequence[str], model: str, config: RouterConfig | None = None,
                  **openai_kwargs: Any) -> Router:
        """A router over one :class:`~agentmath.backends.openai.OpenAIBackend` per URL
        (``http(s)://host:port``, an optional ``/v1`` suffix accepted); ``openai_kwargs`` go
        to each backend. ConfigError names an empty list, a malformed or a duplicate URL."""
        from agentmath.backends.openai import OpenAIBackend

        config = config or RouterConfig()
        if isinstance(urls, str) or not urls:
            raise ConfigError(f"Router.from_urls needs a non-empty list of server URLs, "
                              f"got {urls!r}")
        seen: dict[str, str] = {}
        for url in urls:
            key = _normalized_url(url)
            if key in seen:
                raise ConfigError(f"server URL {url!r} is listed twice (as {seen[key]!r})")
            seen[key] = url
        openai_kwargs.setdefault("cache_salt_by_version", config.cache_salt_by_version)
        return cls([OpenAIBackend(url, model, **openai_kwargs) for url in seen.values()], config)

    # ----------------------------------------------------------------------------- routing

    def weight(self, prompt_len: int) -> int:
        """A request's weight: ``floor(prompt_len / l_base) + w_base``."""
        return prompt_len // self.config.l_base + self.config.w_base

    def route(self, tag: RequestTag | None, weight: int,
              exclude: frozenset[int] | set[int] = frozenset()) -> int:
        """The index of the server for a request (records the sticky homes; dispatches
        nothing). O(servers). BackendError when no server outside ``exclude`` is up."""
        return POLICIES[self.config.policy](self, tag, weight, exclude).index

    def _prefix_aware(self, tag: RequestTag | None, weight: int,
                      exclude: frozenset[int] | set[int]) -> _Server:
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
                     exclude: frozenset[int] | set[int]) -> _Server:
        return self._rotate(False, exclude)

    def _least_loaded(self, tag: RequestTag | None, weight: int,
                      exclude: frozenset[int] | set[int]) -> _Server:
        return self._rotate(True, exclude)

    def _least(self, exclude: frozenset[int] | set[int]) -> _Server:
        """The least-loaded server that is up and not excluded (the first of equals)."""
        live = [s for s in self._servers if s.up and s.index not in exclude]
        if not live:
            raise self._no_server_error()
        return min(live, key=lambda s: s.load)

    def _rotate(self, by_load: bool, exclude: frozenset[int] | set[int]) -> _Server:
        """The baselines: the next server that is up after the cursor (``round_robin``), or
        the least-loaded one, ties going to the first after the cursor (``least_loaded``)."""
        n = len(self._servers)
        best: _Server | None = None
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

    def _saturated(self, home: _Server, least: _Server, weight: int) -> bool:
        cfg = self.config
        return (home.in_flight >= cfg.max_in_flight_per_server or
                home.load + weight > cfg.spill_factor * (least.load + weight) + cfg.spill_slack)

    def _home(self, homes: OrderedDict[str, _Server], key: str,
              exclude: frozenset[int] | set[int]) -> _Server | None:
        server = homes.get(key)
        if server is None or not server.up or server.index in exclude:
            return None
        homes.move_to_end(key)
        return server

    def _remember(self, homes: OrderedDict[str, _Server], key: str, server: _Server) -> None:
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

    def use_model(self, name: str) -> None:
        """Every server sends ``name`` as the model from now on (a LoRA adapter per policy
        version, pushed to every server by the weight sync); TypeError, before any server is
        changed, when one of them has no model name to set."""
        fixed = [s.backend for s in self._servers if not isinstance(s.backend, ModelNamed)]
        if fixed:
            raise TypeError(f"{type(fixed[0]).__name__} has no model name to set")
        for server in self._servers:
            server.backend.use_model(name)

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

    def add_server(self, backend: Backend) -> int:
        """Put a new server in rotation; its index (indices are never reused)."""
        index = len(self._servers)
        self._servers.append(_Server(_label(backend, index), backend=backend, index=index))
        return index

    def remove_server(self, index: int) -> None:
        """Take server ``index`` out of rotation for good (no probe brings it back) and drop
        the homes on it; requests in flight on it may still be released."""
        server = self._servers[index]
        server.up, server.retired = False, True
        if server.probe is not None:
            server.probe.cancel()
        for homes in (self._episodes, self._groups):
            for key in [k for k, s in homes.items() if s is server]:
                del homes[key]

    def clear_homes(self) -> int:
        """Drop every sticky home (episodes and groups), e.g. after a weight update that reset
        the servers' prefix caches; the number of entries dropped."""
        dropped = len(self._episodes) + len(self._groups)
        self._episodes.clear()
        self._groups.clear()
        return dropped

    # ---------------------------------------------------------------------------- protocol

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """Generate on the server chosen for the current tag; on a server failure, mark it down
        and re-send the same request to another server."""
        self._check_open()
        tag = current_tag.get()
        if tag is not None and tag.policy_version < self.policy_version:
            self._stale += 1
        weight = self.weight(len(prompt_ids))
        tried: set[int] = set()
        while True:
            index = self.acquire(tag, weight, tried)
            server = self._servers[index]
            try:
                generation = await server.backend.generate(
                    prompt_ids, stop=stop, max_tokens=max_tokens, sampling=sampling)
            except RequestRejected as exc:
                raise _named(exc, server.server) from exc
            except BackendError as exc:
                server.failovers += 1
                self._mark_down(server, exc)
                tried.add(index)
                continue
            finally:
                self.release(index, weight)
            server.completed += 1
            server.tokens += len(prompt_ids) + len(generation.token_ids)
            return generation

    async def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` from any server that is up (with failover)."""
        return await self._any(lambda backend: backend.tokenize(text))

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The chat template's token ids from any server that is up (with failover)."""
        return await self._any(lambda backend: backend.render_prompt(messages))

    async def aclose(self) -> None:
        """Cancel the probes and close every server."""
        self._closed = True
        probes = [s.probe for s in self._servers if s.probe is not None]
        for probe in probes:
            probe.cancel()
        await asyncio.gather(*probes, return_exceptions=True)
        results = await asyncio.gather(*(s.backend.aclose() for s in self._servers),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _any(self, call: Callable[[Any], Awaitable[T]]) -> T:
        self._check_open()
        tried: set[int] = set()
        while True:  # not through route: tokenizing must not move round_robin's turn
            server = self._least(tried)
            try:
                return await call(server.backend)
            except RequestRejected as exc:
                raise _named(exc, server.server) from exc
            except BackendError as exc:
                self._mark_down(server, exc)
                tried.add(server.index)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("the router is closed")

    # ------------------------------------------------------------------------------ health

    def _mark_down(self, server: _Server, exc: BaseException) -> None:
        """Take ``server`` out of rotation, forget the homes on it, start its probe."""
        server.last_error = f"{type(exc).__name__}: {exc}"
        if not server.up:
            return
        server.up = False
        server.down_events += 1
        for homes in (self._episodes, self._groups):
            for key in [k for k, s in homes.items() if s is server]:
                del homes[key]
        if not self._closed and (server.probe is None or server.probe.done()):
            server.probe = asyncio.get_running_loop().create_task(
                self._probe_loop(server), name=f"router-probe {server.server}")

    async def _probe_loop(self, server: _Server) -> None:
        while not server.up and not self._closed:
            await asyncio.sleep(self.config.probe_interval_s)
            if await self._probe(server) and not server.retired:
                server.up = True

    async def _probe(self, server: _Server) -> bool:
        """Whether a down server answers: its ``healthy()`` when it is
        :class:`~agentmath.backends.base.HealthChecked`, else a tiny ``tokenize``. Any
        failure means still down and is kept as its last error."""
        backend = server.backend
        try:
            async with asyncio.timeout(self.config.probe_timeout_s):
                if isinstance(backend, HealthChecked):
                    return bool(await backend.healthy())
                await server.backend.tokenize("ping")
                return True
        except Exception as exc:  # noqa: BLE001 - any probe failure means "still down"
            server.last_error = f"probe: {type(exc).__name__}: {exc}"
            return False

    def _no_server_error(self) -> BackendError:
        states = "; ".join(f"{s.server}: {'up' if s.up else 'down'}"
                           f" (last error: {s.last_error or 'none'})" for s in self._servers)
        return BackendError(f"no server can take the request ({len(self._servers)} "
                            f"servers): {states}")

    # ----------------------------------------------------------------------------- metrics

    def stats(self) -> RouterStats:
        """Per-server counters and the load imbalance, a snapshot."""
        servers = [ServerStats(**{f.name: getattr(s, f.name) for f in fields(ServerStats)})
                   for s in self._servers]
        return RouterStats(servers, imbalance([s.tokens for s in self._servers]),
                           self.policy_version, self._stale, len(self._episodes),
                           len(self._groups), self.config.policy)

    async def prefix_cache_stats(self) -> PrefixCacheStats:
        """Each server's own prefix-cache counters (``prefix_cache_counters()``, on an
        OpenAIBackend from vLLM's ``/metrics``) and the overall hit rate; a server that cannot
        say is listed with its error and left out of the sums."""
        return await read_prefix_cache_stats([(s.server, s.backend) for s in self._servers])


Policy = Callable[[Router, RequestTag | None, int, frozenset[int] | set[int]], _Server]
#: Routing policy name (RouterConfig.policy) -> the method that picks a request's server.
POLICIES: dict[str, Policy] = {
    "prefix_aware": Router._prefix_aware,
    "round_robin": Router._round_robin,
    "least_loaded": Router._least_loaded,
}


def _label(backend: Backend, index: int) -> str:
    """How errors and stats name a server: its URL when it has one."""
    if isinstance(backend, Addressed) and backend.base_url:
        return str(backend.base_url)
    return f"{backend.name}#{index}"


def _named(exc: BackendError, label: str) -> BackendError:
    """``exc`` itself when its message names the server, else a copy of its type that does."""
    if label in str(exc):
        return exc
    return type(exc)(f"{label}: {exc}")


def _normalized_url(url: Any) -> str:
    """``scheme://host:port/path`` of a server URL (without ``/v1``), ConfigError if it is not
    an http(s) URL with a host."""
    if not isinstance(url, str):
        raise ConfigError(f"server URL {url!r} is not a string")
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"server URL {url!r} is malformed: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment:
        raise ConfigError(f"server URL {url!r} is not an http(s)://host[:port] URL")
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    port = port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{parts.hostname.lower()}:{port}{path}"

