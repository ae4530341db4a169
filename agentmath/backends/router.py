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
prefix-aware policy against them (``benchmarks/_rollout_real.py``). The decisions, and the
state they are made over, are :class:`~agentmath.backends.routing.Routing` (no I/O); a policy
is one of its methods, named in :data:`~agentmath.backends.routing.POLICIES`.

Failures: a :class:`~agentmath.errors.BackendError` from a server (after its own retries) takes
it out of rotation, drops the homes on it and re-sends the same prompt ids elsewhere, so the
episode loses nothing; a background probe brings it back. A hung server (it takes requests and
never answers) fails its request after one ``timeout_s`` (a
:class:`~agentmath.errors.ServerTimeout`) and is taken out the same way; its probe then asks
for a one-token completion too, so that it stays out while its ``/health`` answers and its
engine hangs (:meth:`~agentmath.backends.openai.OpenAIBackend.healthy`). A
:class:`~agentmath.errors.RequestRejected` (the request's own fault) is re-raised, no failover.
When every server is down (unreachable or hung), a router built with ``max_outage_s`` > 0 waits
instead of failing:
its :class:`~agentmath.backends.outage.OutageGate` probes the down servers with backoff and the
requests resume (with their failover memory cleared) as soon as one answers, or fail as before
once the outage has lasted ``max_outage_s``. The servers' own gates stay off, so that one
server's outage is a failover, not a wait.
A server that comes back may have restarted (a vLLM server then runs the weights it was
started from): :meth:`Router.on_reconnect` gives a hook to every server that can tell
(:class:`~agentmath.backends.base.Reconnecting`), which runs it before its first request after
it was lost, whether it came back in a failover or at the end of an outage of all.
Hit rates are the servers' own counters (:meth:`Router.prefix_cache_stats`), never guesses;
the records are in :mod:`agentmath.backends.router_stats`.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import fields
from typing import Any, TypeVar

from agentmath.backends.base import (
    Addressed,
    Backend,
    Generation,
    HealthChecked,
    Interruptible,
    ModelNamed,
    Reconnected,
    Reconnecting,
    SamplingParams,
    current_tag,
)
from agentmath.backends.outage import OutageGate, Passage
from agentmath.backends.router_stats import (
    PrefixCacheStats,
    RouterStats,
    ServerCacheStats,
    ServerStats,
    imbalance,
    read_prefix_cache_stats,
)
from agentmath.backends.routing import POLICIES, RouterConfig, Routing, ServerSlot
from agentmath.errors import BackendError, ConfigError, RequestRejected

__all__ = ["POLICIES", "PrefixCacheStats", "Router", "RouterConfig", "RouterStats",
           "ServerCacheStats", "ServerStats"]

T = TypeVar("T")


class Router(Routing):
    """A :class:`~agentmath.backends.base.Backend` that spreads requests over ``servers``
    (see the module docstring for the policy; the decisions are :class:`Routing`'s); ``name``
    is ``"router"``. ``max_outage_s`` (0: off) is how long requests wait when every server is
    down before they fail."""

    name: str = "router"

    def __init__(self, servers: Sequence[Backend], config: RouterConfig | None = None, *,
                 max_outage_s: float = 0.0) -> None:
        if not servers:
            raise ConfigError("Router needs at least one server")
        super().__init__([ServerSlot(_label(b, i), backend=b, index=i)
                          for i, b in enumerate(servers)], config)
        self._closed = False
        self.outage = OutageGate(f"every server of the router ({len(servers)})",
                                 self._any_back, max_outage_s=max_outage_s,
                                 probe_timeout_s=self.config.probe_timeout_s)
        self._on_reconnect: list[Reconnected] = []

    @classmethod
    def from_urls(cls, urls: Sequence[str], model: str, config: RouterConfig | None = None,
                  **openai_kwargs: Any) -> Router:
        """A router over one :class:`~agentmath.backends.openai.OpenAIBackend` per URL
        (``http(s)://host:port``, an optional ``/v1`` suffix accepted); ``openai_kwargs`` go
        to each backend, but ``max_outage_s`` is the router's (each server's gate stays off).
        ConfigError names an empty list, a malformed or a duplicate URL."""
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
        max_outage_s = float(openai_kwargs.pop("max_outage_s", 0.0))
        return cls([OpenAIBackend(url, model, **openai_kwargs) for url in seen.values()], config,
                    max_outage_s=max_outage_s)

    def use_model(self, name: str) -> None:
        """Every server sends ``name`` as the model from now on (a LoRA adapter per policy
        version, pushed to every server by the weight sync); TypeError, before any server is
        changed, when one of them has no model name to set."""
        fixed = [s.backend for s in self._servers if not isinstance(s.backend, ModelNamed)]
        if fixed:
            raise TypeError(f"{type(fixed[0]).__name__} has no model name to set")
        for server in self._servers:
            server.backend.use_model(name)

    # ------------------------------------------------------------------------- servers

    def add_server(self, backend: Backend) -> int:
        """Put a new server in rotation; its index (indices are never reused)."""
        index = len(self._servers)
        self._servers.append(ServerSlot(_label(backend, index), backend=backend, index=index))
        if isinstance(backend, Reconnecting):
            for hook in self._on_reconnect:
                backend.on_reconnect(hook)
        return index

    def on_reconnect(self, hook: Reconnected) -> None:
        """Give ``hook`` to every server that is
        :class:`~agentmath.backends.base.Reconnecting` (and to those added later): each runs
        it with its URL before its first request after it was lost."""
        self._on_reconnect.append(hook)
        for server in self._servers:
            if isinstance(server.backend, Reconnecting):
                server.backend.on_reconnect(hook)

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

    # ---------------------------------------------------------------------------- protocol

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """Generate on the server chosen for the current tag; on a server failure, mark it down
        and re-send the same request to another server."""
        return await self._route(len(prompt_ids), lambda backend: backend.generate(
            prompt_ids, stop=stop, max_tokens=max_tokens, sampling=sampling))

    async def generate_interruptible(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                                     max_tokens: int, sampling: SamplingParams,
                                     interrupt: asyncio.Event) -> Generation:
        """As :meth:`generate`, cut short when ``interrupt`` is set where the chosen server's
        backend is :class:`~agentmath.backends.base.Interruptible` (another runs to its end)."""
        def call(backend: Backend) -> Awaitable[Generation]:
            if isinstance(backend, Interruptible):
                return backend.generate_interruptible(
                    prompt_ids, stop=stop, max_tokens=max_tokens, sampling=sampling,
                    interrupt=interrupt)
            return backend.generate(prompt_ids, stop=stop, max_tokens=max_tokens,
                                    sampling=sampling)

        return await self._route(len(prompt_ids), call)

    async def _route(self, prompt_len: int,
                     call: Callable[[Backend], Awaitable[Generation]]) -> Generation:
        self._check_open()
        tag = current_tag.get()
        if tag is not None and tag.policy_version < self.policy_version:
            self._stale += 1
        weight = self.weight(prompt_len)
        tried: set[int] = set()
        while True:
            await self._wait_out_outage(tried)
            index = self.acquire(tag, weight, tried)
            server = self._servers[index]
            try:
                generation = await call(server.backend)
            except RequestRejected as exc:
                raise _named(exc, server.server) from exc
            except BackendError as exc:
                server.failovers += 1
                self._mark_down(server, exc)
                tried.add(index)
                continue
            finally:
                self.release(index, weight)
            self.outage.note_answer()
            server.completed += 1
            server.tokens += prompt_len + len(generation.token_ids)
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
        self.outage.close()
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
            await self._wait_out_outage(tried)
            server = self._least(tried)
            try:
                result = await call(server.backend)
                self.outage.note_answer()
                return result
            except RequestRejected as exc:
                raise _named(exc, server.server) from exc
            except BackendError as exc:
                self._mark_down(server, exc)
                tried.add(server.index)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("the router is closed")

    # ------------------------------------------------------------------------------ health

    async def _wait_out_outage(self, tried: set[int]) -> None:
        """With every server down, hold the request until one answers a probe (its failover
        memory ``tried`` is then cleared) or the outage bound passes (the caller's routing
        then fails as before). Immediate while any server is up, or with the gate off."""
        live = [s for s in self._servers if not s.retired]
        if not self.outage.enabled or not live or any(s.up for s in live):
            return
        passage = await self.outage.hold(cause=self._no_server_error().args[0])
        if passage is Passage.RESUMED:
            tried.clear()

    async def _any_back(self) -> tuple[bool, str]:
        """The outage gate's probe: probe every down server at once and put those that answer
        back in rotation; whether one is up, or each one's last error."""
        if any(s.up for s in self._servers):
            return True, "a server is up"
        down = [s for s in self._servers if not s.retired]
        answers = await asyncio.gather(*(self._probe(s) for s in down))
        for server, ok in zip(down, answers, strict=True):
            if ok and not self._closed:
                server.up = True
        if any(answers):
            return True, "a server answered"
        return False, "; ".join(f"{s.server}: {s.last_error or 'down'}" for s in down)

    def _mark_down(self, server: ServerSlot, exc: BaseException) -> None:
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

    async def _probe_loop(self, server: ServerSlot) -> None:
        while not server.up and not self._closed:
            await asyncio.sleep(self.config.probe_interval_s)
            if await self._probe(server) and not server.retired:
                server.up = True

    async def _probe(self, server: ServerSlot) -> bool:
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

