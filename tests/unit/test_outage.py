"""Riding out a server outage (agentmath/backends/outage.py): requests sent while every server
is unreachable wait and complete once one answers; past the bound they fail as before; a single
failure is retried as before; a server that answers its probe is not an outage."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
import pytest

from agentmath.backends.base import SamplingParams
from agentmath.backends.openai import OpenAIBackend
from agentmath.backends.outage import OutageGate, Passage
from agentmath.backends.router import Router, RouterConfig
from agentmath.errors import BackendError
from tests.unit.test_openai_backend_unit import completion

GREEDY = SamplingParams(temperature=0.0, logprobs=True)
LOGGER = "agentmath.backends.outage"


class Servers:
    """Fake servers by host: a down one refuses every connection (its /health too)."""

    def __init__(self, *hosts: str) -> None:
        self.down = set(hosts)
        self.served: dict[str, int] = dict.fromkeys(hosts, 0)
        self.refused = 0
        self.post_status: int | None = None  # a proxy that answers every POST with this

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host in self.down:
            self.refused += 1
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if request.method == "GET":
            return httpx.Response(200, json={})
        if self.post_status is not None:
            return httpx.Response(self.post_status, text="bad gateway")
        self.served[host] += 1
        return httpx.Response(200, json=completion())

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


def backend(servers: Servers, **kwargs: Any) -> OpenAIBackend:
    kwargs.setdefault("backoff_s", 0.01)
    kwargs.setdefault("max_retries", 2)
    return OpenAIBackend("http://a:1", "tiny", transport=servers.transport(), **kwargs)


async def generate_all(b: Any, n: int) -> list[Any]:
    return await asyncio.gather(*(b.generate([1, 2], stop=[], max_tokens=4, sampling=GREEDY)
                                  for _ in range(n)), return_exceptions=True)


async def back_after(servers: Servers, host: str, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    servers.down.discard(host)


async def test_requests_during_an_outage_complete_after_it(
        caplog: pytest.LogCaptureFixture) -> None:
    servers = Servers("a")
    b = backend(servers, max_outage_s=30)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    started = time.monotonic()
    results, _ = await asyncio.gather(generate_all(b, 16), back_after(servers, "a", 1.5))
    waited = time.monotonic() - started
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert all(r.token_ids == [5, 6] for r in results) and servers.served["a"] == 16
    assert 1.5 <= waited < 6 and b.outage.outages == 1 and not b.outage.is_open
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert any(level == logging.WARNING and "http://a:1 is unreachable" in text and
               "ConnectError" in text and "up to 30 s" in text for level, text in messages)
    assert any(level == logging.DEBUG and "still unreachable" in text for level, text in messages)
    resumed = [text for level, text in messages if "answers again" in text]
    assert len(resumed) == 1 and "held request" in resumed[0]
    # Not dispatched during the outage: each request's retries stop once the gate opens.
    assert servers.refused < 16 * 3 + 20
    # A later request goes straight through.
    assert (await generate_all(b, 1))[0].token_ids == [5, 6]
    await b.aclose()


async def test_past_the_bound_requests_fail_as_before_and_later_ones_do_not_wait(
        caplog: pytest.LogCaptureFixture) -> None:
    servers = Servers("a")
    b = backend(servers, max_outage_s=0.6)
    started = time.monotonic()
    results = await generate_all(b, 4)
    assert 0.6 <= time.monotonic() - started < 3
    assert all(isinstance(r, BackendError) for r in results)
    assert all("max_outage_s" in str(r) and "Connection refused" in str(r) for r in results)
    assert any("still unreachable after" in r.getMessage() for r in caplog.records)
    started = time.monotonic()  # the gate has given up: fail as without one (retries only)
    again = await generate_all(b, 1)
    assert isinstance(again[0], BackendError) and "failed after 3 attempts:" in str(again[0])
    assert time.monotonic() - started < 0.5
    servers.down.clear()  # an answer resets the gate: the next outage is waited out again
    assert (await generate_all(b, 1))[0].token_ids == [5, 6]
    servers.down.add("a")
    results, _ = await asyncio.gather(generate_all(b, 2), back_after(servers, "a", 0.3))
    assert all(r.token_ids == [5, 6] for r in results)
    await b.aclose()


async def test_a_single_failure_is_retried_as_before(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.ReadError("connection reset by peer", request=request)
        return httpx.Response(200, json=completion())

    b = OpenAIBackend("http://a:1", "tiny", transport=httpx.MockTransport(flaky),
                      backoff_s=0.01, max_outage_s=30)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    assert (await generate_all(b, 1))[0].token_ids == [5, 6]
    assert len(calls) == 2 and b.outage.outages == 0
    assert not [r for r in caplog.records if r.name == LOGGER]
    await b.aclose()


async def test_a_server_that_answers_its_probe_is_not_an_outage() -> None:
    servers = Servers()
    servers.post_status = 502  # every completion is a 502, but /health answers
    b = backend(servers, max_outage_s=30)
    started = time.monotonic()
    result = (await generate_all(b, 1))[0]
    assert isinstance(result, BackendError) and "failed after 3 attempts: HTTP 502" in str(result)
    assert time.monotonic() - started < 2 and b.outage.outages == 0
    await b.aclose()


async def test_a_hung_engine_behind_a_live_health_is_logged_as_hung(
        caplog: pytest.LogCaptureFixture) -> None:
    """Completions hang while /health answers (slowly, 0.2 s), with a short ``timeout_s``:
    the outage's log line says why the probe failed (the one-token completion got no
    answer), as the probe itself reports it. (The gate's bound on a probe was ``timeout_s``,
    which cut the completion probe short: the line said only "no answer within 0.5 s", as of
    a server that answers nothing; seen with a real vLLM server whose engine was stopped.)"""
    hung = asyncio.Event()
    hung.set()

    async def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            await asyncio.sleep(0.2)
            return httpx.Response(200)
        while hung.is_set():
            await asyncio.sleep(0.01)
        return httpx.Response(200, json=completion())

    async def unhang() -> None:
        await asyncio.sleep(2.0)
        hung.clear()

    caplog.set_level(logging.INFO, logger=LOGGER)
    b = OpenAIBackend("http://a:1", "tiny", transport=httpx.MockTransport(server),
                      timeout_s=0.5, max_retries=1, max_outage_s=30)
    result, _ = await asyncio.gather(generate_all(b, 1), unhang())
    await b.aclose()
    assert result[0].token_ids == [5, 6] and b.outage.outages == 1
    opened = [r.getMessage() for r in caplog.records if "is unreachable" in r.getMessage()]
    assert len(opened) == 1, opened
    assert "probe: answers /health, but a 1-token completion got no answer within 0.5 s" \
        in opened[0], opened[0]


async def test_with_the_gate_off_nothing_waits() -> None:
    servers = Servers("a")
    b = backend(servers)  # max_outage_s defaults to 0 on the class
    result = (await generate_all(b, 1))[0]
    assert isinstance(result, BackendError) and "after 3 attempts" in str(result)
    assert servers.refused == 3 and not b.outage.enabled
    await b.aclose()


async def test_router_waits_when_both_servers_are_down_then_uses_the_one_back(
        caplog: pytest.LogCaptureFixture) -> None:
    servers = Servers("a", "b")
    router = Router.from_urls(["http://a:1", "http://b:2"], "tiny",
                              RouterConfig(probe_interval_s=60), transport=servers.transport(),
                              max_retries=1, backoff_s=0.01, max_outage_s=30)
    assert all(not s.backend.outage.enabled for s in router._servers)  # failover, not wait
    results, _ = await asyncio.gather(generate_all(router, 8), back_after(servers, "b", 1.0))
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert servers.served == {"a": 0, "b": 8} and router.outage.outages == 1
    assert any("every server of the router (2) is unreachable" in r.getMessage()
               for r in caplog.records)
    states = {s.server: s.up for s in router.stats().servers}
    assert states == {"http://a:1": False, "http://b:2": True}
    await router.aclose()


async def test_router_past_the_bound_fails_as_before() -> None:
    servers = Servers("a", "b")
    router = Router.from_urls(["http://a:1", "http://b:2"], "tiny", transport=servers.transport(),
                              max_retries=0, backoff_s=0.01, max_outage_s=0.5)
    started = time.monotonic()
    result = (await generate_all(router, 1))[0]
    assert isinstance(result, BackendError) and "no server can take" in str(result)
    assert 0.5 <= time.monotonic() - started < 3
    await router.aclose()


async def test_gate_resolves_held_requests_when_closed() -> None:
    async def never() -> tuple[bool, str]:
        return False, "refused"

    gate = OutageGate("s", never, max_outage_s=60, trip_after=1)
    gate.note_unreachable("refused")
    assert gate.is_open
    held = asyncio.ensure_future(gate.hold())
    await asyncio.sleep(0.05)
    gate.close()
    assert await held is Passage.CLEAR and not gate.is_open
    with pytest.raises(ValueError, match="max_outage_s"):
        OutageGate("s", never, max_outage_s=-1)


async def test_reconnect_hooks_run_before_the_held_requests_go_on() -> None:
    """The server lost, requests held by the gate: when it answers, the hooks (the RL
    trainer's weight restore) run once, before any held request is served."""
    servers = Servers("a")
    b = backend(servers, max_outage_s=30)
    seen: list[tuple[str, int]] = []

    async def restore_weights(url: str) -> None:
        seen.append((url, servers.served["a"]))

    b.on_reconnect(restore_weights)
    results, _ = await asyncio.gather(generate_all(b, 4), back_after(servers, "a", 0.5))
    assert seen == [("http://a:1", 0)]  # once, before any held request was served
    assert all(r.token_ids == [5, 6] for r in results)
    await b.aclose()


async def test_a_retry_that_reaches_a_restarted_server_runs_the_hook_first() -> None:
    """No gate: a request refused once and retried finds the server back (a quick restart):
    the hook runs before the retry is sent; a request before any loss runs none."""
    servers = Servers("a")
    servers.down.clear()
    b = backend(servers, max_outage_s=0, max_retries=3)
    seen: list[int] = []

    async def restore_weights(url: str) -> None:
        seen.append(servers.served["a"])

    b.on_reconnect(restore_weights)
    await generate_all(b, 1)
    assert seen == [] and servers.served["a"] == 1
    servers.down.add("a")
    results, _ = await asyncio.gather(generate_all(b, 1), back_after(servers, "a", 0.02))
    assert results[0].token_ids == [5, 6] and seen == [1] and servers.served["a"] == 2
    await b.aclose()


async def test_a_failing_reconnect_hook_fails_the_request_and_runs_again_next_time() -> None:
    """A hook that fails (the weights could not be loaded) must not let the request run on
    what the server holds: it fails, naming the hook's error; the next request tries again."""
    servers = Servers("a")
    servers.down.clear()
    b = backend(servers, max_outage_s=0, max_retries=3)
    tries: list[str] = []

    async def broken(url: str) -> None:
        tries.append(url)
        if len(tries) == 1:
            raise BackendError("the weights could not be loaded")

    b.on_reconnect(broken)
    servers.down.add("a")
    results, _ = await asyncio.gather(generate_all(b, 1), back_after(servers, "a", 0.02))
    assert isinstance(results[0], BackendError)
    assert "reconnect hook failed: BackendError: the weights could not be loaded" in str(
        results[0]) and servers.served["a"] == 0
    results = await generate_all(b, 1)
    assert results[0].token_ids == [5, 6] and len(tries) == 2
    await b.aclose()



async def test_a_dropped_connection_alone_runs_no_reconnect_hook() -> None:
    """A connection dropped under a request (a keep-alive race looks the same) is retried,
    but only a refused one says the server restarted: no hook, no weight reload."""
    drops: list[int] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and not drops:
            drops.append(1)
            raise httpx.ReadError("connection closed", request=request)
        return httpx.Response(200, json=completion())

    b = OpenAIBackend("http://a:1", "tiny", transport=httpx.MockTransport(flaky),
                      backoff_s=0.01, max_retries=2)
    seen: list[str] = []

    async def restore_weights(url: str) -> None:
        seen.append(url)

    b.on_reconnect(restore_weights)
    results = await generate_all(b, 1)
    assert results[0].token_ids == [5, 6] and drops == [1] and seen == []
    await b.aclose()


async def test_a_refusal_seen_only_by_the_gates_probe_still_runs_the_hook() -> None:
    """The server dies under the requests in flight (each sees its connection dropped), the
    gate opens and only its probes meet the refused connection: the restarted server still
    gets the hook before the held requests."""
    state = {"down": True, "served": 0}

    def dying(request: httpx.Request) -> httpx.Response:
        if state["down"]:
            if request.method == "GET":
                raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
            raise httpx.ReadError("connection closed", request=request)
        if request.method == "GET":
            return httpx.Response(200, json={})
        state["served"] += 1
        return httpx.Response(200, json=completion())

    b = OpenAIBackend("http://a:1", "tiny", transport=httpx.MockTransport(dying),
                      backoff_s=0.01, max_retries=2, max_outage_s=30)
    seen: list[int] = []

    async def restore_weights(url: str) -> None:
        seen.append(state["served"])

    async def back() -> None:
        await asyncio.sleep(0.5)
        state["down"] = False

    b.on_reconnect(restore_weights)
    results, _ = await asyncio.gather(generate_all(b, 4), back())
    assert all(r.token_ids == [5, 6] for r in results)
    assert seen == [0] and b.outage.outages == 1
    await b.aclose()
