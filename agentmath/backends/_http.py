"""Retried POSTs to one server, behind its outage gate: the HTTP half of
:class:`~agentmath.backends.openai.OpenAIBackend` (its module docstring says the rules:
which statuses are retried, timeouts, ``Retry-After``, outages, reconnecting).

:class:`RetryingPoster` holds no state of its own: the backend that inherits it sets the
attributes it reads (the client, the gate, the retry settings) in its ``__init__``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from agentmath.backends import _stream
from agentmath.backends._replies import MalformedReply, Retryable, retry_after_s
from agentmath.backends.base import Reconnected
from agentmath.backends.outage import OutageGate, Passage
from agentmath.errors import BackendError, RequestRejected, ServerTimeout

T = TypeVar("T")
_BODY_SNIPPET = 500
_MAX_BACKOFF_S = 30.0
_RETRY_STATUSES = frozenset({408, 429})  # and every 5xx
_RETRY_AFTER_STATUSES = frozenset({429, 503})
_UNREACHABLE_STATUSES = frozenset({502, 503, 504})  # a proxy with no server behind it
_SERVER_SIDE_4XX = frozenset({401, 403, 404})  # credentials, endpoint, model name: the server's


class RetryingPoster:
    """``_post``: one request with retries, backoff and the outage gate (see the module)."""

    base_url: str
    timeout_s: float
    max_retries: int
    timeout_retries: int
    backoff_s: float
    max_retry_after_s: float
    outage: OutageGate
    _client: httpx.AsyncClient
    _semaphore: asyncio.Semaphore
    _stalled: bool  # a request timed out, and no completion has answered since
    _lost: bool  # a connection to the server was refused; the reconnect hooks have not run
    _on_reconnect: list[Reconnected]
    _reconnecting: asyncio.Lock
    _reachable: Callable[[], Awaitable[tuple[bool, str]]]  # the outage gate's probe

    def on_reconnect(self, hook: Reconnected) -> None:
        """Run ``hook(base_url)`` before the first request sent after a connection to the
        server was refused (:class:`~agentmath.backends.base.Reconnecting`)."""
        self._on_reconnect.append(hook)

    def _note_refused(self) -> None:
        """A connection to the server was refused (by a request or a probe): it is lost, and
        the reconnect hooks run before the next request."""
        self._lost = True

    def _url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    async def _post(self, path: str, payload: dict[str, Any],
                    parse: Callable[[Any], T], interrupt: asyncio.Event | None = None) -> T:
        """POST with retries and return ``parse(body)``; BackendError once retries run out.

        ``parse`` validates the decoded body; a :class:`MalformedReply` from it is retried like
        a 5xx (a garbled reply is usually a passing fault), any other BackendError is final.
        A timeout is retried ``timeout_retries`` times only. While the outage gate is open no
        attempt is sent; after an outage the request starts a fresh retry budget. A request
        whose retries run out on an unreachable or hung server waits for it there (up to
        ``max_outage_s``) instead of failing at once. With ``interrupt`` the reply is streamed
        and cut short when it is set (:mod:`agentmath.backends._stream`).
        """
        url = self._url(path)
        last, wait, attempt, sent, timeouts = "no attempt made", None, 0, 0, 0
        gone = hung = False  # the last attempt found the server unreachable / hung
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        while True:
            if attempt > self.max_retries:
                passage = (await self.outage.hold(cause=last, sent_at=sent_at)
                           if gone or hung else Passage.CLEAR)
                if passage is not Passage.RESUMED:
                    raise self._failed(url, sent, last, passage, hung)
                attempt = timeouts = 0
            elif attempt:
                await asyncio.sleep(self._delay(attempt, wait))
            passage = await self.outage.hold()
            if passage is Passage.EXPIRED:
                raise self._failed(url, sent, last if sent else self.outage.last_error,
                                   passage, hung)
            if passage is Passage.RESUMED:
                attempt = timeouts = 0
            attempt, sent, sent_at = attempt + 1, sent + 1, loop.time()
            try:
                if self._lost and self._on_reconnect:
                    await self._reconnected(url)
                async with self._semaphore:
                    if self.outage.is_open:  # it opened while this one waited for a slot
                        attempt, sent = attempt - 1, sent - 1
                        continue
                    data = await self._attempt(path, url, payload, interrupt)
                return parse(data)
            except Retryable as exc:
                last, wait, gone, hung = exc.detail, exc.retry_after, exc.unreachable, exc.hung
                if gone or hung:
                    self.outage.note_unreachable(last, sent_at)
                if exc.refused:
                    self._note_refused()
                if hung:
                    self._stalled = True
                    timeouts += 1
                    if timeouts > self.timeout_retries:
                        attempt = self.max_retries + 1  # not again to the same server
            except MalformedReply as exc:
                last, wait, gone, hung = str(exc), None, False, False

    async def _reconnected(self, url: str) -> None:
        """The server was lost (maybe restarted): once it answers its probe, run the reconnect
        hooks before any request goes to it (concurrent requests wait for the first to run
        them). Retryable, as an unreachable attempt, while it does not answer; BackendError,
        final for this request, when a hook fails (it must not run on what the server now
        holds); the hooks run again before the next request either way."""
        async with self._reconnecting:
            if not self._lost:
                return
            ok, detail = await self._reachable()
            if not ok:
                raise Retryable(f"still unreachable: {detail}", unreachable=True)
            for hook in self._on_reconnect:
                try:
                    await hook(self.base_url)
                except Exception as exc:  # noqa: BLE001 - any failure stops the request here
                    raise BackendError(f"POST {url}: the server answers again after it was "
                                       f"unreachable, but its reconnect hook failed: "
                                       f"{type(exc).__name__}: {exc}") from exc
            self._lost = False

    def _failed(self, url: str, attempts: int, last: str, passage: Passage,
                hung: bool = False) -> BackendError:
        """The error of a request that gives up (as without a gate, plus the wait if any): a
        ServerTimeout when its last attempt timed out."""
        waited = (f" and {self.outage.max_outage_s:g} s of waiting for the server to answer "
                  f"again (max_outage_s)" if passage is Passage.EXPIRED else "")
        message = (f"POST {url} failed after {attempts} "
                   f"attempt{'s' if attempts != 1 else ''}{waited}: {last}")
        if hung:
            return ServerTimeout(message, url=url, timeout_s=self.timeout_s)
        return BackendError(message)

    async def _attempt(self, path: str, url: str, payload: dict[str, Any],
                       interrupt: asyncio.Event | None = None) -> Any:
        """One request: JSON on 2xx, Retryable on 408/429/5xx/transport/timeout, BackendError
        for other statuses, MalformedReply for a body that is not JSON. Tells the outage gate
        whether the server answered."""
        try:
            async with asyncio.timeout(self.timeout_s):
                if interrupt is None:
                    response, body = await self._client.post(path, json=payload), None
                else:
                    response, body = await _stream.post_streamed(self._client, path, payload,
                                                                 interrupt, url)
        except httpx.ConnectTimeout as exc:
            raise Retryable(f"timed out connecting ({type(exc).__name__})",
                             unreachable=True) from exc
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise Retryable(f"timed out after {self.timeout_s:g} s with no answer from the "
                             f"server (timeout_s; {type(exc).__name__})", hung=True) from exc
        except httpx.RequestError as exc:
            gone = isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError)
            raise Retryable(f"{type(exc).__name__}: {exc}", unreachable=gone,
                            refused=isinstance(exc, httpx.ConnectError)) from exc
        status = response.status_code
        if status not in _UNREACHABLE_STATUSES:
            self.outage.note_answer()
            if status < 500 and path != "/tokenize":
                self._stalled = False  # a generation answered: the engine is alive
        if status in _RETRY_STATUSES or status >= 500:
            wait = (retry_after_s(response.headers.get("retry-after"))
                    if status in _RETRY_AFTER_STATUSES else None)
            raise Retryable(f"HTTP {status}: {response.text[:_BODY_SNIPPET]}", wait,
                             unreachable=status in _UNREACHABLE_STATUSES)
        if not 200 <= status < 300:
            error = RequestRejected if 400 <= status < 500 and status not in _SERVER_SIDE_4XX \
                else BackendError
            raise error(f"POST {url} returned HTTP {status}: {response.text[:_BODY_SNIPPET]}")
        if body is not None:
            return body
        try:
            return response.json()
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep
            raise MalformedReply(f"malformed reply from {url}: HTTP {status} with a body that "
                                 f"is not JSON: {response.text[:_BODY_SNIPPET]!r}") from exc

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Sleep before retry ``attempt``: the backoff, or the server's ``Retry-After`` when it
        asks for longer (capped at ``max_retry_after_s``)."""
        delay = self._backoff(attempt)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after_s))
        return delay

    def _backoff(self, attempt: int) -> float:
        """Delay before retry ``attempt`` (1-based): exponential, with full-range jitter."""
        base = min(_MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)
