"""A :class:`~agentmath.sandbox.client.SandboxClient` backed by the sandbox service over HTTP.

Why: the rollout engine, ``agentmath eval`` and ``agentmath synth`` need only "sessions that run
code and keep their variables"; with the service (``agentmath sandbox serve``) those sessions
can live on other machines, so the GPUs' host does not fork hundreds of sandbox workers.

What:

* :class:`RemoteSandbox` holds one keep-alive :class:`httpx.AsyncClient` (on aiohttp's
  connection pool: :mod:`agentmath._transport` says why) and one or more base
  URLs. Each new session goes to the URL with the fewest sessions this client has open there
  (ties in round-robin order) and stays pinned to it: its state lives in that server.
* :class:`RemoteSession` opens its server session lazily on the first run and numbers its
  cells 0, 1, 2, ... A connection error, a timeout, 429 or 503 is retried with exponential
  backoff (at least the server's ``Retry-After``), a bounded number of attempts within a bounded
  time, **with the same cell number**: the server runs a cell once and answers a repeated
  number with the stored result, so a retry after a lost response never runs a cell twice.
  When the retries are spent, :class:`~agentmath.errors.SandboxError` names the URL.
* 404 on a run means the server no longer has the session (idle expiry, a restart): as the
  local pool does when a worker dies, the cell runs in a fresh server session and its result
  says ``state_lost`` (earlier variables are gone; the episode then keeps only this cell, and
  replays nothing it did not run).
* ``close()`` sends DELETE once (errors are logged, not raised); ``async with`` works on a
  session as on the local pool's sessions and on the client (``aclose()`` on exit).

Retrying the POST that opens a session may leave an orphan session on the server if only its
response was lost; the server's idle reaper closes it.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

import httpx

from agentmath.errors import SandboxError
from agentmath.sandbox.result import ExecResult

_log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 502, 503, 504})


def _retry_after(response: httpx.Response | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if response is None:
        return None
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:200]
    return str(data.get("error", data)) if isinstance(data, dict) else str(data)[:200]


class RemoteSandbox:
    """Sessions on one or more sandbox services. Use as ``async with RemoteSandbox(urls)``.

    ``token``: sent as ``Authorization: Bearer``. ``max_attempts`` and ``max_retry_s`` bound the
    retries of one request; ``backoff_s`` is the first pause, doubled per attempt up to
    ``max_backoff_s``. ``request_timeout_s`` bounds a request whose cell has no time limit of
    its own (otherwise the cell's limit plus ``timeout_slack_s``). ``max_connections`` bounds
    the default transport's pool; ``transport`` replaces that transport (tests).
    """

    def __init__(self, urls: Sequence[str], token: str | None = None, *,
                 max_attempts: int = 6, max_retry_s: float = 120.0, backoff_s: float = 0.25,
                 max_backoff_s: float = 10.0, connect_timeout_s: float = 10.0,
                 request_timeout_s: float = 600.0, timeout_slack_s: float = 30.0,
                 max_connections: int = 256,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        if not self.urls:
            raise SandboxError("RemoteSandbox needs at least one service URL")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.max_attempts, self.max_retry_s = max_attempts, max_retry_s
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.request_timeout_s, self.timeout_slack_s = request_timeout_s, timeout_slack_s
        self.connect_timeout_s = connect_timeout_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if transport is None:
            # imported here: aiohttp costs ~0.1 s to import, and only a remote client needs it
            from agentmath._transport import pooled_transport

            transport = pooled_transport(max_connections)
        self._http = httpx.AsyncClient(
            headers=headers, transport=transport,
            timeout=httpx.Timeout(request_timeout_s, connect=connect_timeout_s))
        self.open_sessions = dict.fromkeys(self.urls, 0)
        self._order = itertools.count()

    async def __aenter__(self) -> RemoteSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def session(self) -> RemoteSession:
        """A new session; its server session is opened on the first run."""
        return RemoteSession(self)

    async def run(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run one snippet in a throwaway session."""
        async with self.session() as session:
            return await session.run(code, timeout=timeout)

    async def aclose(self) -> None:
        """Close the HTTP connections (sessions still open are left to the server's reaper)."""
        await self._http.aclose()

    close = aclose

    # -- internals used by RemoteSession ----------------------------------------------------
    def _pick_url(self) -> str:
        """The URL with the fewest open sessions; ties go round-robin."""
        start = next(self._order) % len(self.urls)
        rotated = self.urls[start:] + self.urls[:start]
        url = min(rotated, key=lambda u: self.open_sessions[u])
        self.open_sessions[url] += 1
        return url

    def _release_url(self, url: str) -> None:
        self.open_sessions[url] = max(0, self.open_sessions[url] - 1)

    async def _request(self, method: str, url: str, *, json: Any = None,
                       timeout: float | None = None) -> httpx.Response:
        """One request, retried on a connection error, a timeout or 429/502/503/504 with
        exponential backoff (at least ``Retry-After``) within the attempt and time bounds.
        Any other reply is returned; raises :class:`SandboxError` once the retries are spent."""
        deadline = time.monotonic() + self.max_retry_s
        request_timeout = httpx.Timeout(timeout if timeout is not None
                                        else self.request_timeout_s,
                                        connect=self.connect_timeout_s)
        problem = ""
        for attempt in range(self.max_attempts):
            response: httpx.Response | None = None
            try:
                response = await self._http.request(method, url, json=json,
                                                    timeout=request_timeout)
            except httpx.TransportError as exc:  # connect/read errors and timeouts
                problem = f"{type(exc).__name__}: {exc}".rstrip(": ")
            else:
                if response.status_code not in RETRY_STATUSES:
                    return response
                problem = f"HTTP {response.status_code}: {_error_text(response)}"
            if attempt + 1 >= self.max_attempts:
                break
            pause = min(self.max_backoff_s, self.backoff_s * 2 ** attempt)
            pause *= 0.5 + random.random() / 2  # jitter: clients do not retry in lockstep
            pause = max(pause, _retry_after(response) or 0.0)
            if time.monotonic() + pause > deadline:
                break
            _log.info("sandbox service %s %s: %s; retry %d in %.2fs", method, url, problem,
                      attempt + 1, pause)
            await asyncio.sleep(pause)
        raise SandboxError(f"sandbox service {url}: {method} failed after {attempt + 1} "
                           f"attempt(s): {problem}")


class RemoteSession:
    """One episode's session on a sandbox service, pinned to the URL it was opened on."""

    def __init__(self, client: RemoteSandbox) -> None:
        self.client = client
        self.url: str | None = None  # the service holding this session (set on open)
        self.session_id: str | None = None
        self.next_cell = 0
        self._closed = False
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> RemoteSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def _path(self) -> str:
        return f"{self.url}/v1/sessions/{self.session_id}"

    async def _open(self) -> None:
        url = self.client._pick_url()
        try:
            reply = await self.client._request("POST", f"{url}/v1/sessions")
            if reply.status_code != 201:
                raise SandboxError(f"sandbox service {url}: opening a session got HTTP "
                                   f"{reply.status_code}: {_error_text(reply)}")
            session_id = reply.json()["session_id"]
        except BaseException:
            self.client._release_url(url)
            raise
        self.url, self.session_id, self.next_cell = url, str(session_id), 0

    def _forget(self) -> None:
        if self.url is not None and self.session_id is not None:
            self.client._release_url(self.url)
        self.session_id = None

    async def run(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run one snippet as the session's next cell (see the module docstring)."""
        async with self._lock:
            if self._closed:
                raise SandboxError("the session is closed")
            lost = False
            if self.session_id is None:
                await self._open()
            reply = await self._post_cell(code, timeout)
            if reply.status_code == 404:
                # the server no longer has the session (idle expiry, a restart): as the local
                # pool does for a dead worker, run the cell in a fresh session and say so
                _log.warning("sandbox session %s on %s expired", self.session_id, self.url)
                self._forget()
                await self._open()
                lost = True
                reply = await self._post_cell(code, timeout)
            if reply.status_code == 413:  # the snippet is too large: nothing ran
                return ExecResult(error=f"SandboxError: {_error_text(reply)}",
                                  error_type="SandboxError", state_lost=lost)
            if reply.status_code != 200:
                raise SandboxError(f"sandbox service {self.url}: cell {self.next_cell} got "
                                   f"HTTP {reply.status_code}: {_error_text(reply)}")
            try:
                result = ExecResult.from_dict(reply.json()["result"])
            except (ValueError, KeyError, TypeError) as exc:
                raise SandboxError(f"sandbox service {self.url}: malformed reply to cell "
                                   f"{self.next_cell}: {exc}") from exc
            self.next_cell += 1
            if lost:
                result.state_lost = True
            return result

    async def _post_cell(self, code: str, timeout: float | None) -> httpx.Response:
        """POST the next cell (retried inside ``_request`` with the same number)."""
        body = {"code": code, "cell": self.next_cell, "timeout_s": timeout}
        limit = (timeout + self.client.timeout_slack_s if timeout is not None
                 else self.client.request_timeout_s)
        return await self.client._request("POST", f"{self._path}/run", json=body,
                                          timeout=limit)

    async def alive(self) -> bool:
        """False once closed. A session the server lost (404) is replaced on the next run,
        whose result says ``state_lost``, as the local pool does for a dead worker."""
        return not self._closed

    async def close(self) -> None:
        """Delete the server session (idempotent; errors are logged, not raised)."""
        if self._closed:
            return
        self._closed = True
        if self.session_id is None:
            return
        path, url = self._path, self.url
        self._forget()
        try:
            reply = await self.client._http.delete(path)
            if reply.status_code not in (204, 404):
                _log.warning("closing sandbox session on %s: HTTP %d: %s", url,
                             reply.status_code, _error_text(reply))
        except (httpx.HTTPError, RuntimeError) as exc:  # RuntimeError: the client is closed
            _log.warning("closing sandbox session on %s failed: %s", url, exc)
