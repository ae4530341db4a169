"""The remote sandbox client (agentmath/sandbox/remote.py) against real sandbox services on
loopback sockets: state across cells, exactly-once retries after a lost response, 429 backoff,
expired sessions, spreading over two servers, and ``agentmath synth --sandbox-url``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from agentmath.errors import SandboxError
from agentmath.sandbox.client import SandboxClient, SandboxSession
from agentmath.sandbox.remote import RemoteSandbox
from tests.integration.test_sandbox_service import TOKENS, serve

TOKEN = TOKENS[0]


@pytest.fixture(scope="module")
def two_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with serve(tmp_path_factory.mktemp("a")) as (a, _, _), \
            serve(tmp_path_factory.mktemp("b")) as (b, _, _):
        yield a, b


class FlakyTransport(httpx.AsyncBaseTransport):
    """Forwards to a real transport; ``drop`` loses the response of the first cell run after
    the server handled it, ``busy`` answers the first N requests 429 itself."""

    def __init__(self, drop: int = 0, busy: int = 0, retry_after: str = "0") -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.drop, self.busy, self.retry_after = drop, busy, retry_after
        self.requests: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        if self.busy > 0:
            self.busy -= 1
            return httpx.Response(429, json={"error": "busy"},
                                  headers={"Retry-After": self.retry_after})
        response = await self.inner.handle_async_request(request)
        if self.drop > 0 and request.url.path.endswith("/run"):
            self.drop -= 1
            await response.aread()  # the server ran the cell; its answer is lost on the way
            await response.aclose()
            raise httpx.ReadError("connection reset (test)", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def remote(*urls: str, **kwargs: object) -> AsyncIterator[RemoteSandbox]:
    async with RemoteSandbox(urls, TOKEN, backoff_s=0.01, **kwargs) as client:  # type: ignore[arg-type]
        yield client


def test_state_across_runs(two_services: tuple[str, str]) -> None:
    async def main() -> None:
        async with remote(two_services[0]) as client:
            assert isinstance(client, SandboxClient)
            async with client.session() as session:
                assert isinstance(session, SandboxSession) and await session.alive()
                assert session.session_id is None  # opened lazily
                assert (await session.run("x = 41")).ok
                result = await session.run("print('hi')\nx + 1", timeout=5)
                assert result.value == "42" and result.stdout == "hi\n"
                assert (await session.run("1/0")).error_type == "ZeroDivisionError"
                assert session.next_cell == 3
                sid = session.session_id
                reply = await client._http.get(f"{two_services[0]}/v1/sessions/{sid}")
                assert reply.json() == {"alive": True, "cells": 3}
            assert not await session.alive()
            await session.close()  # idempotent
            reply = await client._http.get(f"{two_services[0]}/v1/sessions/{sid}")
            assert reply.status_code == 404  # DELETE was sent
            with pytest.raises(SandboxError):
                await session.run("x")

    asyncio.run(main())


def test_retry_after_lost_response_runs_cell_once(two_services: tuple[str, str]) -> None:
    async def main() -> None:
        transport = FlakyTransport(drop=1)
        async with remote(two_services[0], transport=transport) as client:
            session = client.session()
            await session.run("calls = []")
            transport.drop = 1
            first = await session.run("calls.append(1)\nlen(calls)")
            assert first.value == "1"
            assert (await session.run("len(calls)")).value == "1"  # appended once
            runs = [r for r in transport.requests if r.endswith("/run")]
            assert len(runs) == 5  # cell 0 (dropped + retry), cell 1 twice, cell 2
            await session.close()

    asyncio.run(main())


class ReplyDroppingProxy:
    """A TCP proxy in front of a service that closes the client's connection instead of
    passing on the reply to the next ``drop`` cell runs (the service has run them)."""

    def __init__(self, target: str, drop: int) -> None:
        self.host, self.port = target.removeprefix("http://").split(":")
        self.drop, self.server, self.url = drop, None, ""

    async def __aenter__(self) -> ReplyDroppingProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, int(self.port))
        last = [b""]

        async def upstream() -> None:  # requests, one chunk each on loopback
            while chunk := await reader.read(65536):
                last[0] = chunk
                up_writer.write(chunk)
        forward = asyncio.ensure_future(upstream())
        try:
            while chunk := await up_reader.read(65536):
                if b"/run HTTP/1.1" in last[0] and self.drop > 0:
                    self.drop -= 1
                    return  # the reply is lost: the client's connection closes
                writer.write(chunk)
        finally:
            forward.cancel()
            writer.close()
            up_writer.close()


def test_a_reply_lost_on_aiohttps_transport_is_retried_and_runs_once(
        two_services: tuple[str, str]) -> None:
    """The default transport (aiohttp's pool): the connection closed before the reply is a
    retried transport error, and the retry, with the same cell number, gets the stored result."""
    async def main() -> None:
        async with ReplyDroppingProxy(two_services[0], drop=0) as proxy, \
                remote(proxy.url) as client:
            session = client.session()
            await session.run("calls = []")
            proxy.drop = 1
            assert (await session.run("calls.append(1)\nlen(calls)")).value == "1"
            assert proxy.drop == 0  # a reply was lost
            assert (await session.run("len(calls)")).value == "1"  # appended once
            await session.close()

    asyncio.run(main())


def test_429_then_success_honours_retry_after(two_services: tuple[str, str]) -> None:
    async def main() -> None:
        transport = FlakyTransport(busy=2, retry_after="1")
        async with remote(two_services[0], transport=transport) as client:
            start = time.monotonic()
            assert (await client.run("6 * 7")).value == "42"
            assert time.monotonic() - start >= 1.9  # two pauses of Retry-After: 1
            assert transport.requests[:3] == ["POST /v1/sessions"] * 3

    asyncio.run(main())


def test_retries_exhausted_names_the_url(two_services: tuple[str, str]) -> None:
    async def main() -> None:
        async with remote(two_services[0], transport=FlakyTransport(busy=100),
                          max_attempts=3) as client:
            with pytest.raises(SandboxError, match=rf"{two_services[0]}.*3 attempt.*429"):
                await client.run("1")
        with socket_closed() as url:
            async with remote(url, max_attempts=2) as client:
                with pytest.raises(SandboxError, match=url):
                    await client.run("1")

    asyncio.run(main())


@contextlib.contextmanager
def socket_closed() -> Iterator[str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield f"http://127.0.0.1:{port}"


def test_expired_session_is_replaced_and_says_state_lost(tmp_path: Path) -> None:
    async def main(url: str) -> None:
        async with remote(url) as client:
            session = client.session()
            assert (await session.run("y = 1")).ok
            await asyncio.sleep(3.0)  # the reaper closes it
            lost = await session.run("y")  # runs in a fresh server session: y is gone
            assert lost.state_lost and lost.error_type == "NameError"
            assert await session.alive()
            fresh = await session.run("z = 2\nz")  # the new session keeps state
            assert fresh.value == "2" and not fresh.state_lost
            await session.close()
            assert client.open_sessions == {url: 0}

    # 1.5 s, not less: on a loaded 2-core runner the client's first cell can reach the service
    # more than 0.3 s after the session opened (both sessions it tried then expired unused)
    with serve(tmp_path, idle_timeout_s=1.5) as (url, _, _):
        asyncio.run(main(url))


def test_sessions_spread_over_two_servers(two_services: tuple[str, str]) -> None:
    async def main() -> None:
        async with remote(*two_services) as client:
            sessions = [client.session() for _ in range(4)]
            for i, session in enumerate(sessions):
                await session.run(f"me = {i}")
            assert sorted(s.url for s in sessions) == sorted(two_services * 2)
            assert client.open_sessions == dict.fromkeys(two_services, 2)
            for i, session in enumerate(sessions):  # each stays on its own server
                assert (await session.run("me")).value == str(i)
            await sessions[0].close()
            fifth = client.session()
            await fifth.run("1")
            assert fifth.url == sessions[0].url  # the least loaded
            for session in [*sessions, fifth]:
                await session.close()
            assert client.open_sessions == dict.fromkeys(two_services, 0)

    asyncio.run(main())


def _session_cells(url: str) -> float:
    """The service's count of cells run in sessions (from /metrics)."""
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("agentmath_sandbox_cells_total{") and 'api="session"' in line)


def test_synth_cli_with_sandbox_url(two_services: tuple[str, str], tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"# the client's token\n{TOKENS[1]}\n")
    before = [_session_cells(url) for url in two_services]
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "agentmath.cli", "synth", "synthetic:6", "--converter",
         "rule_based", "--out", str(out), "--sandbox-url", two_services[0], "--sandbox-url",
         two_services[1], "--sandbox-token-file", str(token_file), "--json"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["total"] == 6 and report["kept"] == 6 and report["ran"] == 6
    ran = [_session_cells(url) - b for url, b in zip(two_services, before, strict=True)]
    assert all(n > 0 for n in ran), ran  # the snippets ran on both services
    saved = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() \
        else {}
    assert TOKENS[1] not in json.dumps(saved)  # the token itself is never saved
    bad = token_file.with_name("empty")
    bad.write_text("# nothing\n")
    proc = subprocess.run(
        [sys.executable, "-m", "agentmath.cli", "synth", "synthetic:2", "--converter",
         "rule_based", "--out", str(tmp_path / "bad"), "--sandbox-url", two_services[0],
         "--sandbox-token-file", str(bad), "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "holds no token" in proc.stderr
