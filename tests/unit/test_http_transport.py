"""The clients' HTTP transport (agentmath/_transport.py) against small asyncio servers on
loopback: every failure, while sending or while the body is read, is an httpx error that names
what happened, and the clients (RemoteSandbox, OpenAIBackend) turn it into their own errors
naming the URL, never an aiohttp exception."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from agentmath._transport import PooledTransport, pooled_transport
from agentmath.backends.base import SamplingParams
from agentmath.backends.openai import OpenAIBackend
from agentmath.errors import BackendError, SandboxError
from agentmath.sandbox.remote import RemoteSandbox

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(65536)
    writer.write(b"not http at all\r\n\r\n")
    await writer.drain()
    writer.close()


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(65536)  # the request arrives; no reply, the connection closes
    writer.close()


async def _ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    assert b"authorization: bearer sesame" in head.lower()
    body = b'{"session_id": "s1"}'
    writer.write(b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def _serving(handler: Handler) -> AsyncIterator[str]:
    """``handler`` serving on a loopback port; yields its URL."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def _post(handler: Handler) -> httpx.Response:
    async with _serving(handler) as url, httpx.AsyncClient(
            transport=pooled_transport(4), headers={"Authorization": "Bearer sesame"}) as http:
        return await http.post(f"{url}/v1/sessions", json={})


def test_a_reply_passes_through_with_its_status_headers_and_body() -> None:
    reply = asyncio.run(_post(_ok))
    assert reply.status_code == 201 and reply.json() == {"session_id": "s1"}
    assert reply.headers["content-type"] == "application/json"


@pytest.mark.parametrize(("handler", "error", "words"), [
    (_garbage, httpx.TransportError, "Bad status line"),
    (_hang_up, httpx.RemoteProtocolError, "disconnected"),
])
def test_a_broken_server_raises_an_httpx_error(handler: Handler, error: type[Exception],
                                               words: str) -> None:
    with pytest.raises(error, match=words):
        asyncio.run(_post(handler))


def test_a_refused_connection_is_a_connect_error_not_a_timeout() -> None:
    async def main() -> None:
        async with httpx.AsyncClient(transport=pooled_transport(1)) as http:
            await http.post("http://127.0.0.1:1/v1/sessions")

    with pytest.raises(httpx.ConnectError):
        asyncio.run(main())


@pytest.mark.parametrize("handler", [_garbage, _hang_up])
def test_remote_sandbox_retries_then_names_the_url(handler: Handler) -> None:
    async def main() -> None:
        async with _serving(handler) as url, \
                RemoteSandbox([url], "sesame", max_attempts=2, backoff_s=0.01) as client:
            assert isinstance(client._http._transport, PooledTransport)  # the default
            with pytest.raises(SandboxError, match=rf"{url}.*2 attempt"):
                await client.run("1")

    asyncio.run(main())


async def _cut_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                 b"content-length: 1000\r\n\r\n{\"choices\": [")
    await writer.drain()
    writer.close()  # 1,000 bytes promised, a dozen sent


def test_a_body_cut_short_is_an_httpx_read_error() -> None:
    with pytest.raises(httpx.ReadError, match="payload is not completed"):
        asyncio.run(_post(_cut_mid_body))


@pytest.mark.parametrize("handler", [_garbage, _hang_up, _cut_mid_body])
def test_openai_backend_retries_then_names_the_url(handler: Handler) -> None:
    """OpenAIBackend's default transport is this one; a broken server's replies are retried
    and end in a BackendError naming the URL."""
    async def main() -> None:
        async with _serving(handler) as url:
            backend = OpenAIBackend(url, "tiny", max_retries=1, backoff_s=0.01)
            try:
                assert isinstance(backend._client._transport, PooledTransport)
                with pytest.raises(BackendError, match=rf"{url}/v1/completions.*2 attempts"):
                    await backend.generate([1, 2], stop=[], max_tokens=4,
                                           sampling=SamplingParams())
            finally:
                await backend.aclose()

    asyncio.run(main())
