"""The HTTP transport of :class:`~agentmath.sandbox.remote.RemoteSandbox`: httpx's client API
over aiohttp's connection pool (``httpx-aiohttp``, by httpx's maintainer).

Why not httpx's own transport: a sandbox cell is a sub-millisecond request, so the client's CPU
per request is what bounds a rollout process driving a sandbox service, and httpcore's pool is
costly there. On every request and every response it walks all of its connections and polls
each idle one's socket (``AsyncConnectionPool._assign_requests_to_connections``), so its cost
grows with the sessions in flight. Measured against the real service on a 2-vCPU VM
(2026-11-28, trivial cells through :class:`RemoteSandbox`, client CPU per cell, 1 / 8 / 32
sessions): httpx's transport 0.53 / 0.58-0.72 / 1.25-1.88 ms (1,288-1,351 / 1,345-1,680 /
524-784 cells/s); this one 0.30 / 0.22-0.24 / 0.24-0.25 ms (1,759-1,805 / 3,649-4,009 /
3,161-3,241 cells/s). ``benchmarks/sandbox.py --service`` measures both in one run.

The client keeps httpx's API (requests, responses, timeouts, errors; tests inject their own
``httpx`` transports); this transport only moves the bytes.
"""

from __future__ import annotations

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from agentmath._keepalive import client_limits

__all__ = ["SandboxTransport", "sandbox_transport"]


#: aiohttp errors that ``httpx-aiohttp`` 0.2 reports as ``httpx.ConnectTimeout`` (its table maps
#: every ``ClientConnectionError`` so), and the httpx error that says what happened.
_BETTER = ((aiohttp.ClientConnectorError, httpx.ConnectError),
           (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError))


class SandboxTransport(AiohttpTransport):
    """``AiohttpTransport`` whose errors are all httpx's and name what happened: a refused
    connection is :class:`httpx.ConnectError` and a connection closed without a reply
    :class:`httpx.RemoteProtocolError` (not ``ConnectTimeout``), and an aiohttp error it leaves
    unmapped (a malformed reply) is :class:`httpx.TransportError`, so that the client's retries
    and messages see one family of errors."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except httpx.ConnectTimeout as exc:
            for cause, better in _BETTER:
                if isinstance(exc.__cause__, cause):
                    raise better(str(exc), request=request) from exc.__cause__
            raise
        except aiohttp.ClientError as exc:
            raise httpx.TransportError(f"{type(exc).__name__}: {exc}",
                                       request=request) from exc


def sandbox_transport(max_connections: int) -> SandboxTransport:
    """A transport of at most ``max_connections`` keep-alive connections, each dropped after
    :data:`~agentmath._keepalive.KEEPALIVE_EXPIRY_S` idle (below the service's own close)."""
    return SandboxTransport(limits=client_limits(max_connections))
