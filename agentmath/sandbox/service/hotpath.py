"""The route every cell takes, dispatched without the router: ``POST /v1/sessions/{id}/run``.

Starlette takes a request through its exception middleware, a regex match of each route in
turn and a per-route wrapper before the endpoint runs, and wraps ``send`` at every layer. At
thousands of cells/s that is a noticeable share of the service's CPU per cell, and the
service's CPU per cell is what decides its latency tail (docs/benchmarks.md has the profile).
This ASGI middleware recognises the one hot route by a string test, builds the same
``Request`` Starlette would (with ``session_id`` in
``path_params``) and calls the same endpoint: auth, bounds, validation and errors are the
app's own, in one place. Every other request, and any other method on that path (405), goes
through Starlette unchanged. It sits inside Starlette's ``ServerErrorMiddleware``, so an
unexpected exception still becomes a 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = "/v1/sessions/"
SUFFIX = "/run"


def session_of_run_path(path: str) -> str | None:
    """The session id of a ``/v1/sessions/{id}/run`` path, or None for any other path
    (the same paths Starlette's ``{session_id}`` matches: one non-empty segment)."""
    if not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
        return None
    session_id = path[len(PREFIX):-len(SUFFIX)]
    return session_id if session_id and "/" not in session_id else None


class RunCellRoute:
    """ASGI middleware: ``POST /v1/sessions/{id}/run`` goes straight to ``endpoint``."""

    def __init__(self, app: ASGIApp, endpoint: Callable[[Request], Awaitable[Response]]
                 ) -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            session_id = session_of_run_path(scope["path"])
            if session_id is not None:
                scope["path_params"] = {"session_id": session_id}
                response = await self.endpoint(Request(scope, receive, send))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
