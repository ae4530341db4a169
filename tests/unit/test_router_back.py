"""A server that comes back may have restarted with its start weights: the reconnect hooks
(``Reconnecting.on_reconnect``) of the servers behind a router run before the first request
sent to one after it was lost, in a failover (one server of several) as at the end of an
outage of all; and the RL wiring: the weight sync loads the current version into that one
server (``VLLMWeightSync.restore(server)``), a Ray worker's restorer likewise."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentmath.backends.base import Reconnecting, RequestTag, tagged
from agentmath.backends.openai import OpenAIBackend
from agentmath.backends.router import Router, RouterConfig
from agentmath.rl.compose import _restore_after_outages
from tests.unit.test_outage import GREEDY, Servers
from tests.unit.test_weight_sync_unit import A, B, FakeModel, make, vllm

RESET = "/reset_prefix_cache?reset_running_requests=true"
HOSTS = ("a", "b")
LOAD = ("/collective_rpc", "/collective_rpc", RESET)  # reload, GEMM refresh, cache reset


def router(servers: Servers, **kwargs: Any) -> Router:
    """A router over one OpenAIBackend per host of ``servers`` (http://a:1, http://b:2)."""
    backends = [OpenAIBackend(url, "tiny", transport=servers.transport(), backoff_s=0.01,
                              max_retries=1) for url in (A, B)]
    return Router(backends, RouterConfig(policy="round_robin", probe_interval_s=0.02), **kwargs)


async def spread(r: Router, prefix: str, n: int = 8) -> list[Any]:
    """``n`` requests of new groups at once (round robin: both servers get some)."""
    async def one(i: int) -> Any:
        with tagged(RequestTag(f"{prefix}{i}", f"{prefix}g{i}")):
            return await r.generate([1, 2], stop=[], max_tokens=4, sampling=GREEDY)
    return await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)


async def until(condition: Any, limit_s: float = 5.0) -> None:
    for _ in range(int(limit_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


async def test_a_failed_over_server_gets_the_hook_before_its_next_request() -> None:
    servers = Servers(*HOSTS)
    servers.down.clear()
    r = router(servers)
    assert isinstance(r, Reconnecting)
    seen: list[tuple[str, dict[str, int]]] = []

    async def restore_weights(url: str) -> None:
        seen.append((url, dict(servers.served)))

    r.on_reconnect(restore_weights)
    await spread(r, "before")
    assert servers.served["b"] > 0 and seen == []  # nothing lost: no hook
    servers.down.add("b")  # b dies: its requests fail over to a
    results = await spread(r, "during")
    assert all(x.token_ids == [5, 6] for x in results) and not r.stats().servers[1].up
    served_b = servers.served["b"]
    servers.down.discard("b")  # b is back (restarted): the router's probe lets it in
    await until(lambda: r.stats().servers[1].up)
    await spread(r, "after")
    assert [url for url, _ in seen] == [B]  # once, for b only
    assert seen[0][1]["b"] == served_b  # before b served anything again
    assert servers.served["b"] > served_b
    await r.aclose()


async def test_the_end_of_an_outage_of_every_server_runs_each_hook_first() -> None:
    servers = Servers(*HOSTS)  # both down from the start, requests held by the router's gate
    r = router(servers, max_outage_s=30)
    seen: dict[str, int] = {}

    async def restore_weights(url: str) -> None:
        seen[url] = servers.served[httpx.URL(url).host]

    r.on_reconnect(restore_weights)
    held = asyncio.ensure_future(spread(r, "held", 4))
    await until(lambda: r.outage.is_open)
    servers.down.clear()
    results = await asyncio.wait_for(held, 20)
    assert all(x.token_ids == [5, 6] for x in results)
    serving = {url for url in (A, B) if servers.served[httpx.URL(url).host]}
    assert serving and set(seen) >= serving  # every server that served ran its hook first
    assert all(n == 0 for n in seen.values())  # before it served anything
    await r.aclose()


async def test_a_server_added_later_gets_the_hooks_too() -> None:
    servers = Servers(*HOSTS)
    r = router(servers)
    hooks: list[Any] = []

    async def hook(url: str) -> None:
        hooks.append(url)

    r.on_reconnect(hook)
    late = OpenAIBackend("http://c:3", "tiny", transport=servers.transport())
    r.add_server(late)
    assert late._on_reconnect == [hook]
    await r.aclose()


async def test_restore_of_one_server_reloads_only_that_server(tmp_path: Path) -> None:
    log: list[tuple[str, str, Any]] = []
    sync = make(tmp_path, vllm(log), urls=[A, B], served_name="tiny")
    await sync.restore(B + "/v1")  # nothing pushed yet
    assert log == []
    await sync.push(FakeModel(), None, 1)
    log.clear()
    await sync.restore(B + "/v1")  # a URL with /v1 names the same server
    assert [(u, p) for u, p, _ in log] == [(B, path) for path in LOAD]
    log.clear()
    await sync.restore("http://elsewhere:9")  # not a server of this sync: left alone
    assert log == []
    await sync.aclose()


async def test_rl_wiring_restores_the_server_that_came_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``agentmath rl``'s composition gives the sync's restore to the router's servers as
    their reconnect hook; a Ray worker's restorer does the same for the server named."""
    log: list[tuple[str, str, Any]] = []
    sync = make(tmp_path, vllm(log), urls=[A, B], served_name="tiny")
    await sync.push(FakeModel(), None, 1)
    servers = Servers(*HOSTS)
    servers.down.clear()
    r = router(servers)
    _restore_after_outages(r, sync)
    log.clear()
    await spread(r, "before")
    servers.down.add("b")
    await spread(r, "during")
    servers.down.discard("b")
    await until(lambda: r.stats().servers[1].up)
    await spread(r, "after")
    assert [(u, p) for u, p, _ in log] == [(B, path) for path in LOAD]
    await r.aclose()

    restorer = pickle.loads(pickle.dumps(sync.restorer()))
    await sync.aclose()
    client = httpx.AsyncClient
    monkeypatch.setattr(httpx, "AsyncClient", lambda **kw: client(
        **{**kw, "transport": httpx.MockTransport(vllm(log))}))
    log.clear()
    await restorer(1, A)
    assert [(u, p) for u, p, _ in log] == [(A, path) for path in LOAD]
