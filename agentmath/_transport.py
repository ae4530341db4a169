"""The HTTP transport of agentmath's clients (``OpenAIBackend`` and so the router, and
``RemoteSandbox``): httpx's client API over aiohttp's connection pool (``httpx-aiohttp``, by
httpx's maintainer).

Why not httpx's own transport: its pool (httpcore) walks all of its connections on every
request and every response and polls each idle one's socket
(``AsyncConnectionPool._assign_requests_to_connections``), so a request's cost grows with the
connections open, and a rollout keeps hundreds of requests in flight. On aiohttp's pool a
request's client CPU stays flat as requests in flight grow, where httpx's grows until the client
is a full core (``benchmarks/http_client.py`` and ``benchmarks/sandbox.py --service`` measure
both in one run; docs/benchmarks.md has the figures).

The clients keep httpx's API (requests, responses, timeouts, errors; tests inject their own
``httpx`` transports); this transport only moves the bytes. Its errors are httpx's and name
what happened (``httpx-aiohttp`` 0.2 reports every aiohttp connection error as
``ConnectTimeout``, and leaves some aiohttp errors unmapped), so that the clients' retries,
outage detection and messages see one family of errors. HTTP(S) proxies from the environment
are not applied (clients talk to their servers directly).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from agentmath._keepalive import client_limits

__all__ = ["PooledTransport", "pooled_transport"]

#: aiohttp errors, most specific first, and the httpx error that says what happened.
_BETTER: tuple[tuple[type[BaseException], type[httpx.TransportError]], ...] = (
    (aiohttp.ClientConnectorError, httpx.ConnectError),  # refused, no route, DNS
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),  # closed without a reply
    (aiohttp.ClientPayloadError, httpx.ReadError),  # a body cut short
    (aiohttp.ClientOSError, httpx.NetworkError),  # reset, broken pipe
)


def _httpx_error(exc: BaseException, request: httpx.Request | None
                 ) -> httpx.TransportError | None:
    """The httpx error that says what ``exc`` was (an error of aiohttp's, or one
    ``httpx-aiohttp`` mapped from it); None when ``exc`` is best left as it is."""
    cause = exc.__cause__ if isinstance(exc, httpx.TransportError) else exc
    for kind, better in _BETTER:
        if isinstance(cause, kind):
            return better(f"{type(cause).__name__}: {cause}", request=request)
    if isinstance(exc, aiohttp.ClientError):
        return httpx.TransportError(f"{type(exc).__name__}: {exc}", request=request)
    return None


@contextlib.contextmanager
def _mapped(request: httpx.Request | None) -> Iterator[None]:
    try:
        yield
    except (httpx.ConnectTimeout, aiohttp.ClientError) as exc:
        better = _httpx_error(exc, request)
        if better is None:
            raise
        raise better from (exc.__cause__ or exc)


class _MappedStream(httpx.AsyncByteStream):
    """A response body whose read errors are mapped as the request's are."""

    def __init__(self, inner: httpx.AsyncByteStream, request: httpx.Request) -> None:
        self.inner, self.request = inner, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped(self.request):
            async for chunk in self.inner:
                yield chunk

    async def aclose(self) -> None:
        with _mapped(self.request):
            await self.inner.aclose()


class PooledTransport(AiohttpTransport):
    """``AiohttpTransport`` whose errors, while sending and while the body is read, are
    httpx's and say what happened (see the module docstring)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with _mapped(request):
            response = await super().handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _MappedStream(response.stream, request)
        return response


def pooled_transport(max_connections: int) -> PooledTransport:
    """A transport of at most ``max_connections`` keep-alive connections, each dropped after
    :data:`~agentmath._keepalive.KEEPALIVE_EXPIRY_S` idle (below the servers' own close)."""
    return PooledTransport(limits=client_limits(max_connections))
