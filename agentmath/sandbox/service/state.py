"""The service's state: open sessions, per-client and global bounds, metrics, the idle reaper.

Kept apart from the HTTP layer (app.py) so that the rules (a cell runs at most once, bounds
answer "busy" instead of queueing, idle sessions expire) can be read in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections import Counter as Tally
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agentmath.sandbox.pool import SandboxPool, Session
from agentmath.sandbox.result import ExecResult
from agentmath.sandbox.service.config import ServiceConfig

_log = logging.getLogger(__name__)


class Busy(Exception):  # noqa: N818 - a condition, not a failure
    """A bound was reached: the request is refused with 429 and ``Retry-After``."""


class CellConflict(Exception):
    """The client sent a cell number beyond the next one expected (409)."""


class Metrics:
    """Prometheus metrics in a registry of their own (one per app, so tests do not clash)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.cells = Counter("agentmath_sandbox_cells_total", "Cells run, by outcome and API.",
                             ["api", "outcome"], registry=self.registry)
        self.replayed = Counter("agentmath_sandbox_cells_replayed_total",
                                "Repeated cell numbers answered from the stored result.",
                                registry=self.registry)
        self.rejected = Counter("agentmath_sandbox_rejected_total",
                                "Requests refused, by reason.", ["reason"],
                                registry=self.registry)
        self.sessions = Gauge("agentmath_sandbox_sessions_open", "Open sessions.",
                              registry=self.registry)
        self.expired = Counter("agentmath_sandbox_sessions_expired_total",
                               "Sessions closed by the idle reaper.", registry=self.registry)
        self.inflight = Gauge("agentmath_sandbox_cells_inflight", "Cells running now.",
                              registry=self.registry)
        self.latency = Histogram("agentmath_sandbox_cell_seconds",
                                 "Wall-clock time of a cell as the service saw it.", ["api"],
                                 buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60),
                                 registry=self.registry)
        # The labelled children each cell updates, looked up once: ``labels()`` takes a lock
        # and builds a key on every call (2-3% of the service's CPU per cell).
        self._latency_of: dict[str, Any] = {}
        self._cells_of: dict[tuple[str, str], Any] = {}

    def cell_done(self, api: str, result_outcome: str, seconds: float) -> None:
        """Count one cell of ``api`` with its outcome, and observe its latency."""
        latency = self._latency_of.get(api)
        if latency is None:
            latency = self._latency_of[api] = self.latency.labels(api)
        cells = self._cells_of.get((api, result_outcome))
        if cells is None:
            cells = self._cells_of[(api, result_outcome)] = self.cells.labels(api, result_outcome)
        latency.observe(seconds)
        cells.inc()


def encode_result(result: ExecResult) -> bytes:
    """A result as the JSON the service replies with (what Starlette's JSONResponse writes)."""
    return json.dumps(result.to_dict(), ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode("utf-8")


def outcome(result: ExecResult) -> str:
    """One label for a result: ok, error, timeout or crashed."""
    if result.timed_out:
        return "timeout"
    if result.crashed:
        return "crashed"
    return "ok" if result.error is None else "error"


@dataclass
class ServiceSession:
    """One client session: a pool session (one worker process) and the results of its cells.

    Each result is kept as its JSON encoding (``encode_result``), the bytes a reply carries:
    encoded once, sent as they are on a retry, and untracked by the garbage collector, where
    a dict per cell would stay in the heap that every full collection walks (each one a stall
    of every request in flight) for as long as its session lives."""

    id: str
    client: str
    sandbox: Session
    results: list[bytes] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    running: int = 0


class ServiceState:
    """Everything the routes share; all methods run on the event loop (no thread locks)."""

    def __init__(self, config: ServiceConfig, pool: SandboxPool) -> None:
        self.config = config
        self.pool = pool
        self.metrics = Metrics()
        self.sessions: dict[str, ServiceSession] = {}
        self.client_sessions: Tally[str] = Tally()
        self.client_inflight: Tally[str] = Tally()
        self.inflight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.closing = False
        self._reaper: asyncio.Task[None] | None = None

    # -- bounds ---------------------------------------------------------------------------

    def _reject(self, reason: str, message: str) -> Busy:
        self.metrics.rejected.labels(reason).inc()
        return Busy(message)

    @contextlib.asynccontextmanager
    async def cell_slot(self, client: str) -> AsyncIterator[None]:
        """Hold one in-flight slot of ``client`` and of the service, or raise :class:`Busy`.

        Check and increment happen with no await between them, so no two requests can both
        take the last slot.
        """
        if self.inflight >= self.config.max_inflight_total:
            raise self._reject("inflight_total", "the service is at its limit of running "
                               f"cells ({self.config.max_inflight_total}); retry later")
        if self.client_inflight[client] >= self.config.max_inflight_per_client:
            raise self._reject("inflight_client", "this client is at its limit of running "
                               f"cells ({self.config.max_inflight_per_client}); retry later")
        self.inflight += 1
        self.client_inflight[client] += 1
        self.metrics.inflight.set(self.inflight)
        self.idle.clear()
        try:
            yield
        finally:
            self.inflight -= 1
            self.client_inflight[client] -= 1
            self.metrics.inflight.set(self.inflight)
            if self.inflight == 0:
                self.idle.set()

    # -- sessions -------------------------------------------------------------------------

    async def open_session(self, client: str) -> ServiceSession:
        """A new session with its worker started, or :class:`Busy` over a bound."""
        if self.client_sessions[client] >= self.config.max_sessions_per_client:
            raise self._reject("sessions_client", "this client is at its limit of open "
                               f"sessions ({self.config.max_sessions_per_client})")
        if len(self.sessions) >= self.config.sandbox.max_sessions:
            raise self._reject("sessions_total", "the service is at its limit of open "
                               f"sessions ({self.config.sandbox.max_sessions})")
        session = ServiceSession(id=secrets.token_urlsafe(16), client=client,
                                 sandbox=self.pool.session())
        self.sessions[session.id] = session
        self.client_sessions[client] += 1
        self.metrics.sessions.set(len(self.sessions))
        try:
            await session.sandbox.start()
        except BaseException:
            await self.close_session(session)
            raise
        return session

    def get(self, session_id: str, client: str) -> ServiceSession | None:
        """The client's session, or None (unknown, expired, or another client's)."""
        session = self.sessions.get(session_id)
        if session is None or session.client != client:
            return None
        return session

    async def close_session(self, session: ServiceSession) -> None:
        """Forget the session and kill its worker (idempotent)."""
        if self.sessions.pop(session.id, None) is not None:
            self.client_sessions[session.client] -= 1
            self.metrics.sessions.set(len(self.sessions))
        await session.sandbox.close()

    async def run_cell(self, session: ServiceSession, cell: int, code: str,
                       timeout: float | None) -> bytes:
        """Run cell number ``cell`` of the session once and return its result as JSON; a
        repeated number gets the stored result (a client retry never runs a cell twice); a
        number past the next -> 409."""
        session.last_used = time.monotonic()
        if cell < len(session.results):
            self.metrics.replayed.inc()
            return session.results[cell]
        async with self.cell_slot(session.client):
            session.running += 1
            try:
                async with session.lock:
                    if cell < len(session.results):  # the same cell ran while we waited
                        self.metrics.replayed.inc()
                        return session.results[cell]
                    if cell > len(session.results):
                        raise CellConflict(f"cell {cell} is beyond the next expected cell "
                                           f"{len(session.results)}")
                    result = await self.timed("session", session.sandbox.run(code, timeout))
                    session.results.append(encode_result(result))
                    return session.results[cell]
            finally:
                session.running -= 1
                session.last_used = time.monotonic()

    async def timed(self, api: str, run: Any) -> ExecResult:
        """Await a sandbox run, recording its latency and outcome."""
        start = time.perf_counter()
        result: ExecResult = await run
        self.metrics.cell_done(api, outcome(result), time.perf_counter() - start)
        return result

    # -- lifecycle ------------------------------------------------------------------------

    def start_reaper(self) -> None:
        """Start the task that closes sessions idle longer than ``idle_timeout_s``."""
        self._reaper = asyncio.create_task(self._reap())

    async def _reap(self) -> None:
        period = min(max(self.config.idle_timeout_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(period)
            deadline = time.monotonic() - self.config.idle_timeout_s
            for session in list(self.sessions.values()):
                if session.running == 0 and session.last_used < deadline:
                    self.metrics.expired.inc()
                    try:
                        await self.close_session(session)
                    except Exception:  # keep reaping the others
                        _log.exception("closing idle session %s failed", session.id)

    async def shutdown(self) -> None:
        """Refuse new work, let running cells finish (bounded), close every session."""
        self.closing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), self.config.shutdown_grace_s)
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for session in list(self.sessions.values()):
            await self.close_session(session)
