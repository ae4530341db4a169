"""A simulated sandbox: a pool of workers that run snippets in simulated time.

:class:`SimSandbox` is a :class:`~agentmath.sandbox.client.SandboxClient`: each episode opens a
:class:`SimSession`, whose ``run`` waits for one of ``workers`` execution slots (a simpy
resource: tool calls queue when the pool is busy, as on a real sandbox service), holds it for
the snippet's latency, and returns an :class:`~agentmath.sandbox.result.ExecResult`. With
``max_sessions`` a session first waits for one of that many live sessions, held until it
closes, as in the local pool (and partial rollout then parks no more sessions than that bound
leaves, replaying the cells of the episodes beyond it when they resume).

What a snippet costs and prints comes from the snippet itself when the simulated model wrote it
(``print("x" * N)  # sim: latency_s=T``, see :mod:`.policy`): the workload's script, so it
does not depend on scheduling. Other code gets a latency from ``latency`` and a few characters
of output, drawn from a stream seeded by the code and the sandbox seed. A snippet slower than
its timeout is cut at the timeout (``timed_out``, the session's state lost); with probability
``loss_prob`` per run a session dies after its snippet (``alive()`` then False), which makes the
agent loop rebuild it by replaying its cells.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from dataclasses import dataclass, field

import numpy as np
import simpy

from agentmath.errors import SandboxError
from agentmath.formats.base import TIMEOUT_LINE
from agentmath.sandbox.result import ExecResult
from agentmath.sim.clock import current_env, wait_event
from agentmath.sim.workload import LogNormal

__all__ = ["SandboxModel", "SandboxStats", "SimSandbox", "SimSession"]

_SIM_CODE = re.compile(r'print\("x" \* (\d+)\)\s*# sim: latency_s=([0-9.eE+-]+)')


@dataclass(frozen=True, slots=True)
class SandboxModel:
    """Capacity and behaviour of the simulated sandbox service."""

    #: Snippets that can run at once (worker processes of the pool); the rest queue.
    workers: int = 256
    #: Live sessions at once (the local pool's ``SandboxConfig.max_sessions``): a session's
    #: first snippet waits for a free one, and partial rollout parks no more sessions than
    #: its bound leaves (:func:`~agentmath.rollout.partial.parked_session_bound`); None: no
    #: bound, as a fleet of sandbox services sized for the run.
    max_sessions: int | None = None
    #: Latency of a snippet the workload did not script.
    latency: LogNormal = field(default_factory=lambda: LogNormal(0.4, 1.0, 0.01, 30.0))
    #: Extra seconds the first snippet of a session pays (interpreter start).
    session_start_s: float = 0.0
    #: Extra seconds every snippet pays beyond its latency: the host's share of a call (the
    #: agent loop, the sandbox round trip, a busy client's queue), for replaying a measured
    #: run; 0 in the paper-scale runs, whose workload states none.
    call_overhead_s: float = 0.0
    #: Probability that a session dies after a snippet (its state lost).
    loss_prob: float = 0.0
    #: Seed of the draws for unscripted snippets and losses.
    seed: int = 0


@dataclass(slots=True)
class SandboxStats:
    """Counters of the simulated sandbox."""

    runs: int = 0
    sessions: int = 0
    timeouts: int = 0
    losses: int = 0
    busy_s: float = 0.0  # worker-seconds spent running snippets
    queue_s: float = 0.0  # summed waits for a free worker


class SimSandbox:
    """A :class:`SandboxClient` on simpy environment ``env`` (see the module docstring)."""

    def __init__(self, env: simpy.Environment, model: SandboxModel | None = None) -> None:
        self.env = env
        self.model = model or SandboxModel()
        self.workers = simpy.Resource(env, capacity=self.model.workers)
        self.sessions = (simpy.Resource(env, capacity=self.model.max_sessions)
                         if self.model.max_sessions else None)
        self.stats = SandboxStats()
        self._serial = 0

    @property
    def max_sessions(self) -> int | None:
        """The live-session bound (:class:`~agentmath.sandbox.client.SessionLimited`)."""
        return self.model.max_sessions

    def session(self) -> SimSession:
        """A new session (no cost until its first run)."""
        self.stats.sessions += 1
        self._serial += 1
        return SimSession(self, self._serial)

    def utilisation(self) -> float:
        """Share of worker capacity busy so far."""
        now = self.env.now
        return self.stats.busy_s / (now * self.model.workers) if now > 0 else 0.0

    def _draw(self, code: str, session: int, run: int) -> np.random.Generator:
        key = (self.model.seed, zlib.crc32(code.encode()), session, run)
        return np.random.default_rng(key)

    def _job(self, code: str, timeout: float | None, first: bool, session: int, run: int):  # noqa: ANN202
        """The simpy process of one snippet: queue for a worker, run, report."""
        arrived = self.env.now
        with self.workers.request() as slot:
            yield slot
            self.stats.queue_s += self.env.now - arrived
            m = _SIM_CODE.search(code)
            rng = None
            if m is not None:
                chars, latency = int(m.group(1)), float(m.group(2))
            else:
                rng = self._draw(code, session, run)
                chars, latency = 8, float(self.model.latency.draw(rng))
            latency += (self.model.session_start_s if first else 0.0) + self.model.call_overhead_s
            timed_out = timeout is not None and latency > timeout
            spent = min(latency, timeout) if timed_out and timeout is not None else latency
            yield self.env.timeout(spent)
            self.stats.busy_s += spent
            if self.model.loss_prob > 0:
                rng = rng or self._draw(code, session, run)
                lost = bool(rng.random() < self.model.loss_prob)
            else:
                lost = False
        self.stats.runs += 1
        if timed_out:
            self.stats.timeouts += 1
            return ExecResult(error=TIMEOUT_LINE, error_type="TimeoutError", timed_out=True,
                              state_lost=True, duration_ms=spent * 1e3), False
        if lost:
            self.stats.losses += 1
        return ExecResult(stdout="x" * chars + "\n", duration_ms=spent * 1e3), lost


class SimSession:
    """One episode's simulated interpreter."""

    def __init__(self, sandbox: SimSandbox, serial: int) -> None:
        self.sandbox = sandbox
        self.serial = serial
        self.runs = 0
        self.lost = False
        self.closed = False
        self._slot: simpy.resources.resource.Request | None = None  # its live-session slot

    async def _hold_a_session(self) -> None:
        """Wait for one of the sandbox's live sessions (when they are bounded), kept until
        :meth:`close`; a wait cancelled meanwhile takes none."""
        pool = self.sandbox.sessions
        if pool is None or self._slot is not None:
            return
        request = pool.request()
        try:
            await wait_event(request)
        except asyncio.CancelledError:
            if request.triggered:
                pool.release(request)
            else:
                request.cancel()
            raise
        self._slot = request

    async def run(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run ``code`` in simulated time (queueing for a live session, when they are bounded,
        then for a worker)."""
        sandbox = self.sandbox
        if current_env() is not sandbox.env:
            raise RuntimeError("SimSandbox used from another simpy environment")
        if self.closed:
            raise SandboxError("the session is closed")
        await self._hold_a_session()
        first = self.runs == 0 or self.lost
        self.runs += 1
        proc = sandbox.env.process(sandbox._job(code, timeout, first, self.serial, self.runs))
        result, lost = await wait_event(proc)
        if self.lost:  # the state was gone before this snippet: it ran in a fresh process
            result.state_lost = True
            self.lost = False
        self.lost = lost
        return result

    async def alive(self) -> bool:
        """False once a loss has fired (the loop then replays the cells in a new session)."""
        return not self.lost and not self.closed

    async def close(self) -> None:
        """Release the session and its live-session slot (idempotent)."""
        self.closed = True
        if self._slot is not None and self.sandbox.sessions is not None:
            self.sandbox.sessions.release(self._slot)
            self._slot = None
