"""Riding out a server outage: :class:`OutageGate` holds requests while every server behind a
backend is unreachable, probes with backoff, and lets them go when one answers.

Why: inference servers are restarted routinely in long runs (a crash, an OOM, a weight reload
that failed). Without a gate each request spends its few retries (seconds) and fails, so an
evaluation or an RL run dies sample by sample while its only server restarts. With one, the
requests wait (the episodes in flight keep their sandbox sessions) and go on where they were.

How a backend uses it (:class:`~agentmath.backends.openai.OpenAIBackend` over one server,
:class:`~agentmath.backends.router.Router` when all its servers are down):

* before each attempt, ``await gate.hold()``: immediate unless an outage is on;
* after each attempt, :meth:`OutageGate.note_answer` (the server answered, whatever it said) or
  :meth:`OutageGate.note_unreachable` (connection refused or reset, a connect timeout, 502,
  503 or 504, or no answer within the request timeout: a hung server). ``trip_after`` of
  those in a row, with no answer between, open the gate: the server looks gone, so no more
  requests are sent to it. A single failure is retried as before;
* a request about to fail on an unreachable server calls ``hold(cause=...)``, which opens the
  gate itself.

An open gate probes at once (a false alarm ends there, and the request fails as before), then
with exponential backoff up to ``max_probe_s``. When a probe answers, every held request
resumes (:attr:`Passage.RESUMED`: the backend gives it a fresh retry budget). When
``max_outage_s`` passes first, they are released with :attr:`Passage.EXPIRED` and fail as they
would without a gate; the gate then stays out of the way (requests fail at once, as before)
until the server answers a request again. ``max_outage_s = 0`` turns the gate off. What a
restarted server needs back before it serves (the RL trainer's current weights) is the
client's reconnect hook (:class:`~agentmath.backends.base.Reconnecting`), which runs before the
first request sent to it after it was lost, whether a gate held that request or not.

Logged on ``agentmath.backends.outage``: the start of a confirmed outage and its end (with its
duration and probe count) or expiry at WARNING (what a terminal shows with no logging set up),
each probe at DEBUG.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["DEFAULT_MAX_OUTAGE_S", "OutageGate", "Passage"]

log = logging.getLogger(__name__)

#: The outage bound eval and RL configs default to (seconds): a vLLM restart takes ~1 minute.
DEFAULT_MAX_OUTAGE_S = 300.0
#: A probe answers (True) or not (False, with a short reason); it should not raise.
Probe = Callable[[], Awaitable[tuple[bool, str]]]


class Passage(enum.Enum):
    """What a held request is told: go on as usual (``CLEAR``: no outage, a false alarm, or
    the gate is off or has given up), go on with a fresh retry budget (``RESUMED``: an outage
    ended), or fail as without a gate (``EXPIRED``: the outage outlasted ``max_outage_s``)."""

    CLEAR = "clear"
    RESUMED = "resumed"
    EXPIRED = "expired"


@dataclass(slots=True)
class _Outage:
    started: float
    cause: str
    result: asyncio.Future[Passage]
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    held: int = 0


class OutageGate:
    """Holds requests while ``name``'s server(s) are unreachable (see the module docstring).

    ``probe`` answers whether a server is back (a cheap request such as ``GET /health``);
    ``max_outage_s`` bounds the wait (0: off); ``trip_after`` unreachable failures in a row
    open the gate; probes start ``first_probe_s`` apart and back off to ``max_probe_s``, each
    limited to ``probe_timeout_s``."""

    def __init__(self, name: str, probe: Probe, *, max_outage_s: float,
                 trip_after: int = 3, first_probe_s: float = 0.25, max_probe_s: float = 2.0,
                 probe_timeout_s: float = 5.0) -> None:
        if max_outage_s < 0:
            raise ValueError("max_outage_s must be >= 0")
        if trip_after < 1:
            raise ValueError("trip_after must be at least 1")
        if not (first_probe_s > 0 and max_probe_s > 0 and probe_timeout_s > 0):
            raise ValueError("probe delays and the probe timeout must be > 0")
        self.name = name
        self.max_outage_s = float(max_outage_s)
        self.trip_after = trip_after
        self.first_probe_s, self.max_probe_s = first_probe_s, max_probe_s
        self.probe_timeout_s = probe_timeout_s
        self._probe = probe
        self._outage: _Outage | None = None
        self._failures = 0
        self._given_up = False  # the last outage expired: stay out of the way until an answer
        self._resumed_at = float("-inf")  # loop time the last outage ended
        self.last_error = ""  # why the server looked unreachable last
        self.outages = 0  # confirmed outages ridden out or given up on
        self.waited_s = 0.0  # their total length

    @property
    def enabled(self) -> bool:
        return self.max_outage_s > 0

    @property
    def is_open(self) -> bool:
        """Whether requests are being held now."""
        return self._outage is not None

    def note_answer(self) -> None:
        """The server answered a request (any HTTP status but 502/503/504)."""
        self._failures = 0
        self._given_up = False

    def note_unreachable(self, cause: str, sent_at: float | None = None) -> None:
        """A request found the server unreachable; ``sent_at`` (loop time) is when it was sent:
        a request sent before the last outage ended is not a sign of a new one."""
        if not self.enabled or self._given_up or self._before_resume(sent_at):
            return
        self._failures += 1
        self.last_error = cause
        if self._failures >= self.trip_after:
            self._open(cause)

    async def hold(self, *, cause: str | None = None, sent_at: float | None = None) -> Passage:
        """Wait while an outage is on. With ``cause`` (a request's last attempt found the
        server unreachable) open the gate first, unless that attempt was sent before the last
        outage ended (then it is simply retried: ``RESUMED``)."""
        if not self.enabled:
            return Passage.CLEAR
        if cause is not None:
            if self._before_resume(sent_at):
                return Passage.RESUMED
            if not self._given_up:
                self._open(cause)
        outage = self._outage
        if outage is None:
            return Passage.CLEAR
        outage.held += 1
        return await asyncio.shield(outage.result)

    def close(self) -> None:
        """Stop probing (the backend is closing); held requests go on as ``CLEAR``."""
        if self._outage is not None and self._outage.task is not None:
            self._outage.task.cancel()

    # -------------------------------------------------------------------------- internals

    def _before_resume(self, sent_at: float | None) -> bool:
        return sent_at is not None and sent_at < self._resumed_at

    def _open(self, cause: str) -> None:
        if self._outage is not None:
            return
        self.last_error = cause
        loop = asyncio.get_running_loop()
        outage = _Outage(loop.time(), cause, loop.create_future())
        self._outage = outage
        outage.task = loop.create_task(self._watch(outage), name=f"outage-probe {self.name}")

    async def _watch(self, outage: _Outage) -> None:
        """Probe until a server answers or the bound passes; then release the held requests."""
        passage = Passage.CLEAR
        try:
            passage = await self._probe_until_back(outage)
        finally:
            now = asyncio.get_running_loop().time()
            self._outage = None
            self._failures = 0
            if passage is Passage.RESUMED:
                self._resumed_at = now
            if passage is not Passage.CLEAR:
                self.outages += 1
                self.waited_s += now - outage.started
            if not outage.result.done():
                outage.result.set_result(passage)

    async def _probe_until_back(self, outage: _Outage) -> Passage:
        loop = asyncio.get_running_loop()
        deadline = outage.started + self.max_outage_s
        delay, probes = self.first_probe_s, 0
        while True:
            ok, detail = await self._probe_once()
            probes += 1
            now = loop.time()
            if ok and probes == 1:
                log.debug("%s answered at once after %s: not an outage", self.name, outage.cause)
                return Passage.CLEAR
            if ok:
                log.warning("%s answers again after %.1f s of outage (%d probes); resuming "
                            "%d held request(s)", self.name, now - outage.started, probes,
                            outage.held)
                return Passage.RESUMED
            if probes == 1:
                log.warning("%s is unreachable (%s; probe: %s): holding its requests and "
                            "probing for up to %g s", self.name, outage.cause, detail,
                            self.max_outage_s)
            else:
                log.debug("%s: probe %d: still unreachable (%s)", self.name, probes, detail)
            self.last_error = f"{outage.cause} (last probe: {detail})"
            if now >= deadline:
                self._given_up = True
                log.warning("%s is still unreachable after %.1f s (max_outage_s=%g): "
                            "requests fail from now on until it answers again", self.name,
                            now - outage.started, self.max_outage_s)
                return Passage.EXPIRED
            await asyncio.sleep(min(delay, deadline - now))
            delay = min(delay * 2, self.max_probe_s)

    async def _probe_once(self) -> tuple[bool, str]:
        try:
            async with asyncio.timeout(self.probe_timeout_s):
                return await self._probe()
        except TimeoutError:
            return False, f"no answer within {self.probe_timeout_s:g} s"
