"""The HTTP layer of the sandbox service: auth, body limits, validation, routes, lifespan.

Every endpoint but ``GET /health`` needs a token, sent as ``Authorization: Bearer <token>`` or
as HTTP Basic credentials (password or username), because the ``sandbox-fusion`` client and
verl's tool send no headers of their own but ``requests`` turns ``http://user:TOKEN@host``
into Basic auth. Errors are JSON ``{"error": ..., "field": ...}``; no code runs for a request
that fails auth, a bound, the body limit or validation.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentmath.errors import SandboxError
from agentmath.sandbox.pool import SandboxPool
from agentmath.sandbox.service import fusion
from agentmath.sandbox.service.config import ServiceConfig, load_tokens
from agentmath.sandbox.service.hotpath import RunCellRoute
from agentmath.sandbox.service.state import Busy, CellConflict, ServiceState

ANONYMOUS = "-"  # the client name of every request when auth is off


class RunCellRequest(BaseModel):
    """Body of ``POST /v1/sessions/{id}/run``."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(..., description="The cell's code.")
    timeout_s: float | None = Field(None, gt=0, le=3600, description=(
        "Wall-clock limit of this cell (None: the sandbox's timeout_s)."))
    cell: int = Field(..., ge=0, description="0-based number of this cell in the session.")


class HTTPError(Exception):
    """An error reply: status, message, the offending field, extra headers."""

    def __init__(self, status: int, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field, self.headers = status, message, field, headers

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message, "field": self.field}, self.status,
                            headers=self.headers)


def _credentials(request: Request) -> list[str]:
    """The candidate tokens a request carries (Bearer token, Basic password and username)."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return [value.strip()]
    if scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True) \
                .decode("utf-8").partition(":")
        except (binascii.Error, UnicodeError):
            return []
        return [password, user]
    return []


def _check_token(candidates: list[str], tokens: list[bytes]) -> str | None:
    """The matching token, compared in constant time against every configured token."""
    found = None
    for candidate in candidates:
        raw = candidate.encode("utf-8")
        for token in tokens:
            if hmac.compare_digest(raw, token) and raw:
                found = found or token.decode("utf-8")
    return found


async def _read_json(request: Request, limit: int) -> Any:
    """The request's JSON body: 413 over ``limit`` (declared or actual), 400 if malformed."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise HTTPError(413, f"request body over the limit of {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPError(413, f"request body over the limit of {limit} bytes")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HTTPError(400, f"the body is not valid JSON: {exc}") from exc


def _validate(model: type[BaseModel], data: Any) -> Any:
    """``data`` as ``model``, or 400 naming the first offending field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        raise HTTPError(400, f"{field or 'body'}: {err['msg']}", field) from exc


def create_app(config: ServiceConfig, pool: SandboxPool | None = None) -> Starlette:
    """The service as an ASGI app. With no ``pool`` the app starts and closes its own;
    a given pool is started if needed and left open (its owner closes it)."""
    tokens = [t.encode("utf-8") for t in load_tokens(config.token_file)] \
        if config.token_file is not None else []
    auth_on = bool(tokens) or not config.allow_no_auth
    own_pool = pool is None
    the_pool = pool if pool is not None else SandboxPool(config.sandbox)
    state = ServiceState(config, the_pool)
    retry = {"Retry-After": str(config.retry_after_s)}

    def endpoint(handler: Callable[[Request, str], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
        """Wrap a handler with auth, the shutdown check and JSON errors."""

        async def wrapped(request: Request) -> Response:
            try:
                client = ANONYMOUS
                if auth_on:
                    found = _check_token(_credentials(request), tokens)
                    if found is None:
                        state.metrics.rejected.labels("auth").inc()
                        raise HTTPError(401, "missing or invalid token",
                                        headers={"WWW-Authenticate": "Bearer"})
                    client = found
                if state.closing:
                    raise HTTPError(503, "the service is shutting down", headers=retry)
                return await handler(request, client)
            except HTTPError as exc:
                return exc.response()
            except Busy as exc:
                return HTTPError(429, str(exc), headers=retry).response()
            except SandboxError as exc:  # the sandbox itself failed, not the client's code
                return HTTPError(503, f"the sandbox failed: {exc}", headers=retry).response()

        return wrapped

    def session_of(request: Request, client: str) -> Any:
        session = state.get(request.path_params["session_id"], client)
        if session is None:
            raise HTTPError(404, "unknown or expired session", "session_id")
        return session

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "closing" if state.closing else "ok",
                             "sessions": len(state.sessions), "inflight": state.inflight})

    async def metrics(request: Request, client: str) -> Response:
        return Response(generate_latest(state.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)

    async def create_session(request: Request, client: str) -> Response:
        session = await state.open_session(client)
        return JSONResponse({"session_id": session.id,
                             "idle_timeout_s": config.idle_timeout_s}, 201)

    async def run_cell(request: Request, client: str) -> Response:
        body = _validate(RunCellRequest, await _read_json(request, config.max_body_bytes))
        session = session_of(request, client)
        try:
            result = await state.run_cell(session, body.cell, body.code, body.timeout_s)
        except CellConflict as exc:
            raise HTTPError(409, str(exc), "cell") from exc
        # The stored result is already JSON (state.encode_result): spliced in, not re-encoded.
        return Response(b'{"cell":%d,"result":%s}' % (body.cell, result),
                        media_type="application/json")

    async def get_session(request: Request, client: str) -> Response:
        session = session_of(request, client)
        return JSONResponse({"alive": await session.sandbox.alive(),
                             "cells": len(session.results)})

    async def delete_session(request: Request, client: str) -> Response:
        await state.close_session(session_of(request, client))
        return Response(status_code=204)

    async def run_code(request: Request, client: str) -> Response:
        body = _validate(fusion.RunCodeRequest,
                         await _read_json(request, config.max_body_bytes))
        problem = fusion.unsupported_field(body)
        if problem is not None:
            raise HTTPError(400, problem[1], problem[0])
        async with state.cell_slot(client), the_pool.session() as session:
            code = fusion.with_stdin(body.code, body.stdin)
            result = await state.timed("run_code", session.run(code, body.run_timeout))
        return JSONResponse(fusion.response_from_result(result, shifted=bool(body.stdin)))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await the_pool.start()
        state.start_reaper()
        try:
            yield
        finally:
            await state.shutdown()
            if own_pool:
                await the_pool.close()

    run = endpoint(run_cell)
    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", endpoint(metrics), methods=["GET"]),
        Route("/v1/sessions", endpoint(create_session), methods=["POST"]),
        Route("/v1/sessions/{session_id}", endpoint(get_session), methods=["GET"]),
        Route("/v1/sessions/{session_id}", endpoint(delete_session), methods=["DELETE"]),
        # Dispatched by RunCellRoute (hotpath.py) without the router; listed here for the
        # route table and a 405 on other methods.
        Route("/v1/sessions/{session_id}/run", run, methods=["POST"]),
        Route("/run_code", endpoint(run_code), methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(RunCellRoute, endpoint=run)])
    app.state.service = state
    return app
