"""A server that is up but hung (tests/fixtures/hung_server.py: the connection accepted, no
answer; or ``/health`` answering while a generation never finishes) is told apart by the
timeout alone: one request fails after ``timeout_s`` with a ServerTimeout naming the server
and the timeout; a router routes around a hung server and keeps it out while it hangs; when
every server hangs, the outage gate holds the requests, probes, and resumes them."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from agentmath.backends.base import SamplingParams
from agentmath.backends.openai import OpenAIBackend
from agentmath.backends.router import Router, RouterConfig
from agentmath.errors import BackendError, ServerTimeout
from tests.fixtures.hung_server import HungServer, hung_servers

GREEDY = SamplingParams(temperature=0.0)
LOGGER = "agentmath.backends.outage"
TIMEOUT_S = 0.5
PROMPT = [ord(c) for c in "What is 1 plus 1?"]


async def generate_all(b: Any, n: int) -> list[Any]:
    return await asyncio.gather(*(b.generate(PROMPT, stop=[], max_tokens=40, sampling=GREEDY)
                                  for _ in range(n)), return_exceptions=True)


async def unhang_after(server: HungServer, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    server.hang = "none"


def backend(server: HungServer, **kwargs: Any) -> OpenAIBackend:
    kwargs.setdefault("backoff_s", 0.01)
    return OpenAIBackend(server.url, "m", timeout_s=TIMEOUT_S, **kwargs)


def answered(results: list[Any]) -> bool:
    return all(not isinstance(r, BaseException) and "\\boxed{2}" in r.text for r in results)


@pytest.mark.parametrize("hang", ["all", "generation"])
async def test_a_hung_server_fails_a_request_after_one_timeout_naming_it(hang: str) -> None:
    with hung_servers(1, {"What is 1 plus 1?": "2"}) as (server,):
        server.hang = hang
        b = backend(server, max_retries=4)  # no gate
        started = time.monotonic()
        (result,) = await generate_all(b, 1)
        took = time.monotonic() - started
        assert isinstance(result, ServerTimeout), result
        assert f"POST {server.url}/v1/completions failed after 1 attempt" in str(result)
        assert f"timed out after {TIMEOUT_S:g} s" in str(result)
        assert result.url == f"{server.url}/v1/completions" and result.timeout_s == TIMEOUT_S
        assert TIMEOUT_S <= took < TIMEOUT_S + 1.0 and server.hung["/v1/completions"] == 1
        assert not await b.healthy()  # /health may answer; a completion does not
        server.hang = "none"
        assert await b.healthy()
        await b.aclose()


@pytest.mark.parametrize("hang", ["all", "generation"])
async def test_when_the_only_server_hangs_requests_wait_and_resume(
        hang: str, caplog: pytest.LogCaptureFixture) -> None:
    """Eight requests in flight on a server that hangs: each times out once, then they are
    held (no more sent to it) while the gate probes; /health answering is not enough to end
    the outage (case "generation"); when the server answers again they all complete."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with hung_servers(1, {"What is 1 plus 1?": "2"}) as (server,):
        server.hang = hang
        b = backend(server, max_outage_s=30)
        started = time.monotonic()
        results, _ = await asyncio.gather(generate_all(b, 8), unhang_after(server, 2.0))
        took = time.monotonic() - started
        assert answered(results), results
        assert b.outage.outages == 1 and not b.outage.is_open
        assert 2.0 <= took < 6.0
        assert server.hung["/v1/completions"] <= 8 + 4  # the held ones, plus a few probes
        messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        held = [m for m in messages if "is unreachable" in m and "holding" in m]
        assert len(held) == 1 and "timed out after 0.5 s" in held[0], messages
        assert len([m for m in messages if "answers again after" in m]) == 1
        await b.aclose()


async def test_past_the_bound_a_hung_server_fails_requests_naming_it_and_the_timeout() -> None:
    with hung_servers(1) as (server,):
        server.hang = "generation"
        b = backend(server, max_outage_s=1.0)
        started = time.monotonic()
        results = await generate_all(b, 3)
        assert all(isinstance(r, ServerTimeout) for r in results), results
        assert all(server.url in str(r) and "timed out after 0.5 s" in str(r)
                   and "max_outage_s" in str(r) for r in results)
        assert 1.5 <= time.monotonic() - started < 5.0
        await b.aclose()


async def test_router_routes_around_a_hung_server_and_probes_it_back() -> None:
    """Server A hangs (its /health answers): the requests sent to it fail over to B after one
    timeout, A is out of rotation and stays out while it hangs although /health answers (its
    probe asks for a completion), and comes back once it answers."""
    with hung_servers(2, {"What is 1 plus 1?": "2"}) as (a, b):
        a.hang = "generation"
        router = Router([backend(a), backend(b)],
                        RouterConfig(policy="round_robin", probe_interval_s=0.2),
                        max_outage_s=30)
        started = time.monotonic()
        results = await generate_all(router, 6)
        assert answered(results), results
        assert time.monotonic() - started < TIMEOUT_S + 2.0
        stats = {s.server: s for s in router.stats().servers}
        assert not stats[a.url].up and stats[a.url].failovers >= 1
        assert "timed out after 0.5 s" in stats[a.url].last_error
        hung_before = a.hung["/v1/completions"]
        on_b = b.requests["/v1/completions"]
        results = await generate_all(router, 6)  # A out of rotation: all of them go to B
        assert answered(results) and b.requests["/v1/completions"] - on_b == 6
        await asyncio.sleep(1.0)  # probes: /health answers, the completion hangs
        assert not router.stats().servers[0].up and a.requests["/health"] >= 2
        assert a.hung["/v1/completions"] - hung_before <= 3  # probes only, no work
        a.hang = "none"
        await asyncio.sleep(1.0)
        assert router.stats().servers[0].up and router.outage.outages == 0
        await router.aclose()


async def test_router_with_every_server_hung_waits_then_resumes(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    with hung_servers(2, {"What is 1 plus 1?": "2"}) as (a, b):
        a.hang = b.hang = "generation"
        router = Router([backend(a), backend(b)], RouterConfig(probe_interval_s=60),
                        max_outage_s=30)
        started = time.monotonic()
        results, _ = await asyncio.gather(generate_all(router, 8), unhang_after(b, 2.0))
        assert answered(results), results
        assert 2.0 <= time.monotonic() - started < 7.0
        assert router.outage.outages == 1
        assert any("every server of the router (2) is unreachable" in r.getMessage()
                   for r in caplog.records)
        states = {s.server: s.up for s in router.stats().servers}
        assert states == {a.url: False, b.url: True}
        await router.aclose()


async def test_router_with_every_server_hung_past_the_bound_names_each_timeout() -> None:
    with hung_servers(2) as (a, b):
        a.hang, b.hang = "generation", "all"
        router = Router([backend(a), backend(b)], max_outage_s=1.0)
        (result,) = await generate_all(router, 1)
        assert isinstance(result, BackendError) and "no server can take" in str(result)
        for server in (a, b):
            assert f"POST {server.url}/v1/completions failed after 1 attempt: timed out " \
                   f"after 0.5 s" in str(result), str(result)
        await router.aclose()


async def test_requests_queued_for_a_slot_do_not_go_to_a_server_found_hung() -> None:
    """With one slot (max_concurrency 1), eight requests queue behind one that hangs: once it
    times out and the gate opens, the queued ones wait with it instead of each being sent to
    the hung server for another timeout; only probes (one token) reach it until it answers."""
    with hung_servers(1, {"What is 1 plus 1?": "2"}) as (server,):
        server.hang = "generation"
        sizes: list[int] = []
        b = backend(server, max_outage_s=30, max_concurrency=1)
        real = b._client.post

        async def post(path: str, **kwargs: Any) -> Any:
            if path == "/v1/completions":
                sizes.append(kwargs["json"]["max_tokens"])
            return await real(path, **kwargs)

        b._client.post = post  # type: ignore[method-assign]
        results, _ = await asyncio.gather(generate_all(b, 8), unhang_after(server, 2.5))
        assert answered(results), results
        during = sizes[:sizes.index(40, 1)] if 40 in sizes[1:] else sizes
        assert during[0] == 40 and all(n == 1 for n in during[1:]), sizes  # probes only
        assert sizes.count(40) == 9  # the first twice (before and after), the others once
        await b.aclose()
