"""The sandbox's asyncio API: a pool of isolated, stateful sessions.

``SandboxPool`` starts one zygote, keeps a few workers forked ahead of need, and hands each
:class:`Session` its own worker process — never shared, never reused, so one trajectory cannot
poison the next. Live sessions are bounded by ``max_sessions`` and running snippets by
``max_concurrency``; waiters queue in FIFO order. A snippet over its time limit has its worker
SIGKILLed by the zygote and the session continues on a fresh worker, reporting that its
variables are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from typing import Any

from agentmath.config import SandboxConfig
from agentmath.errors import SandboxError
from agentmath.sandbox.deaths import death_reason, infra_death
from agentmath.sandbox.host import _Worker, _Zygote
from agentmath.sandbox.result import ExecResult, sanitize_text
from agentmath.sandbox.uids import UidLease, lease_uids

PROTECTIONS = ("network_namespace", "minimal_root", "landlock_fs", "landlock_net",
               "landlock_scope", "seccomp", "setuid", "rlimits", "no_new_privs",
               "ipc_namespace", "idle_freeze")  # fmt: skip
_EXIT_WAIT_S = 1.0


class SandboxPool:
    """Owns the zygote and hands out sessions. Use as ``async with SandboxPool() as pool``."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._zygote = _Zygote(self.config)
        self._fault_rng = random.Random(self.config.fault_seed)
        limit = self.config.max_sessions
        self._session_slots = asyncio.Semaphore(limit)
        self._exec_slots = asyncio.Semaphore(self.config.max_concurrency
                                             or 4 * (os.cpu_count() or 1))
        # One uid per live process: sessions plus spares. A slot returns only once the zygote
        # has reaped its process, so two live workers never share a uid.
        self._free_slots: list[int] = list(range(limit + self.config.spare_workers))[::-1]
        self._slot_freed = asyncio.Event()
        self._spares: asyncio.Queue[_Worker] = asyncio.Queue()
        self._spares_low = asyncio.Event()
        self._refill_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False
        self._closed = False
        self._zygote_lock = asyncio.Lock()
        self.zygote_restarts = 0
        self.protections: dict[str, bool] = {}
        self.notes: list[str] = []
        self.preload_errors: dict[str, str] = {}
        self._lease: UidLease | None = None

    async def __aenter__(self) -> SandboxPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the zygote and one worker; record which protections are active."""
        if self._started:
            return
        # A host-wide block of uids for this pool's lifetime: no other live pool can run a
        # worker as one of them (see uids.py).
        self._lease = lease_uids(self.config.base_uid,
                                 self.config.max_sessions + self.config.spare_workers)
        self._zygote.uid_base = self._lease.start
        try:
            await self._zygote.start()
        except BaseException:
            self._lease.release()
            raise
        report = self._zygote.report
        self.notes = [n for n in report.get("notes", []) if n]
        self.preload_errors = dict(report.get("preload_errors", {}))
        first = await self._spawn()
        self.protections = self._merge_protections(report["zygote_protections"],
                                                   first.protections)
        self._started = True
        await self._spares.put(first)
        missing = [name for name, on in self.protections.items() if not on]
        if self.config.require_isolation and missing:
            await self.close()
            raise SandboxError(f"require_isolation is set but these protections are not "
                               f"active here: {', '.join(missing)} ({'; '.join(self.notes)})")
        self._refill_task = asyncio.create_task(self._refill())

    @staticmethod
    def _merge_protections(zygote: dict[str, Any], worker: dict[str, Any]) -> dict[str, bool]:
        merged = {**zygote, **worker}
        return {name: bool(merged.get(name)) for name in PROTECTIONS}

    async def _take_slot(self) -> int:
        while not self._free_slots:
            self._slot_freed.clear()
            await self._slot_freed.wait()
        return self._free_slots.pop()

    async def _ensure_zygote(self) -> None:
        """Start a new zygote if the current one died (e.g. killed by the OOM killer)."""
        async with self._zygote_lock:
            dead = self._zygote.dead
            if dead is not None and dead.done() and not self._closed:
                self._zygote.close_control()
                await asyncio.to_thread(self._zygote.wait)
                self._zygote = _Zygote(self.config, self._zygote.uid_base)
                await self._zygote.start()
                self.zygote_restarts += 1

    async def _spawn(self) -> _Worker:
        await self._ensure_zygote()
        slot = await self._take_slot()
        try:
            worker = await self._zygote.spawn(slot)
        except BaseException:
            self._free_slots.append(slot)
            self._slot_freed.set()
            raise
        task = asyncio.create_task(self._release_on_exit(worker))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return worker

    async def _release_on_exit(self, worker: _Worker) -> None:
        await worker.exit_status
        self._free_slots.append(worker.slot)
        self._slot_freed.set()

    async def _refill(self) -> None:
        """Keep ``spare_workers`` forked and waiting, so sessions start without a fork."""
        with contextlib.suppress(asyncio.CancelledError):
            while not self._closed:
                if self._spares.qsize() < self.config.spare_workers:
                    try:
                        await self._spares.put(await self._spawn())
                    except SandboxError:
                        await asyncio.sleep(0.1)  # zygote trouble: surfaces at next acquire
                    continue
                self._spares_low.clear()
                await self._spares_low.wait()

    async def acquire_worker(self) -> _Worker:
        """A fresh worker: a spare if one is ready, otherwise a new fork."""
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        if not self._started:
            await self.start()
        self._spares_low.set()
        while not self._spares.empty():
            worker = self._spares.get_nowait()
            if not worker.exit_status.done():
                return worker
        return await self._spawn()

    def release_worker(self, worker: _Worker) -> None:
        """Kill a worker that is no longer needed (its state must never be reused)."""
        self._zygote.kill_worker(worker)

    def draw_fault(self) -> bool:
        """Whether a new session is one the fault injector kills (never when its rate is 0)."""
        rate = self.config.fault_kill_rate
        return rate > 0 and self._fault_rng.random() < rate

    def session(self) -> Session:
        """A new session; its worker is taken on first use (or by ``await session.start()``)."""
        return Session(self)

    async def run(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run one snippet in a throwaway session."""
        async with self.session() as session:
            return await session.run(code, timeout=timeout)

    async def close(self) -> None:
        """Kill every worker and the zygote. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._refill_task is not None:
            self._refill_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refill_task
        while not self._spares.empty():
            self.release_worker(self._spares.get_nowait())
        for task in list(self._tasks):
            task.cancel()
        self._zygote.close_control()
        await asyncio.to_thread(self._zygote.wait)
        self._zygote.kill_all()  # a worker the zygote could not stop: killed by its pidfd
        if self._lease is not None:
            self._lease.release()

    @property
    def max_sessions(self) -> int:
        """Live sessions this pool holds at once (a session's first snippet waits for one)."""
        return self.config.max_sessions

    @property
    def uid_range(self) -> tuple[int, int]:
        """The uids this pool's workers run as: [first, last + 1)."""
        start = self._zygote.uid_base
        return start, start + self.config.max_sessions + self.config.spare_workers


class Session:
    """One trajectory's sandbox: its own process, its state kept across snippets."""

    def __init__(self, pool: SandboxPool) -> None:
        self.pool = pool
        self._worker: _Worker | None = None
        self._holds_slot = False
        self._closed = False
        self._lock = asyncio.Lock()
        self.restarts = 0
        self.snippets = 0
        self._lost_between = False
        # the fault injector (SandboxConfig.fault_kill_rate): this session's first snippet
        # has its process killed from outside
        self._doomed = pool.draw_fault()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pid(self) -> int | None:
        """The worker's pid (None before first use)."""
        return self._worker.pid if self._worker is not None else None

    async def start(self) -> None:
        """Take a live-session slot (waiting in FIFO order) and a worker."""
        if self._closed:
            raise SandboxError("the session is closed")
        if not self._holds_slot:
            await self.pool._session_slots.acquire()
            self._holds_slot = True
        if self._worker is not None and (self._worker.exit_status.done() or self._worker.killed
                                         or self._worker.channel.closed.done()):
            # Died between snippets (e.g. its CPU budget ran out): say so on the next result.
            self._lost_between = True
            self.pool.release_worker(self._worker)
            self._worker = None
            self.restarts += 1
        if self._worker is None:
            self._worker = await self.pool.acquire_worker()

    async def alive(self) -> bool:
        """False once the session's worker has died or the session was closed (its state is
        gone); a session not yet started is alive (it has no state to lose)."""
        if self._closed:
            return False
        worker = self._worker
        return worker is None or not (worker.exit_status.done() or worker.killed
                                      or worker.channel.closed.done())

    async def run(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run one snippet. Errors in the code, timeouts and crashes are reported, not raised."""
        async with self._lock:
            await self.start()
            self.snippets += 1
            limit = timeout if timeout is not None else self.pool.config.timeout_s
            async with self.pool._exec_slots:
                result = await self._run_locked(code, limit)
            if self._lost_between:
                result.state_lost, self._lost_between = True, False
            return result

    async def _run_locked(self, code: str, limit: float) -> ExecResult:
        worker = self._worker
        assert worker is not None
        start = time.perf_counter()
        fut = worker.request({"op": "exec", "code": code})
        if self._doomed:
            self._doomed = False
            if not worker.signal(signal.SIGKILL):  # no pidfd: through the zygote
                self.pool.release_worker(worker)
        # A timer on the reply future is much cheaper than asyncio.wait_for (no extra task).
        timer = asyncio.get_running_loop().call_later(limit, _expire, fut)
        try:
            reply = await fut
        except TimeoutError:
            self.pool.release_worker(worker)
            await self._replace_worker()
            return ExecResult(
                error=(f"TimeoutError: the snippet did not finish within {limit:g} s and was "
                       "stopped; the session was restarted and earlier variables are lost"),
                error_type="TimeoutError", timed_out=True, state_lost=True,
                duration_ms=(time.perf_counter() - start) * 1000.0)
        except (ConnectionResetError, OSError, ValueError) as exc:
            status = None
            with contextlib.suppress(TimeoutError):
                status = await asyncio.wait_for(asyncio.shield(worker.exit_status), _EXIT_WAIT_S)
            self.pool.release_worker(worker)
            await self._replace_worker()
            if worker.channel.violation is not None:
                reason = (f"the sandbox process broke the protocol "
                          f"({worker.channel.violation}) and was stopped")
            else:
                reason = death_reason(status) if status else f"the sandbox channel failed ({exc})"
            return ExecResult(
                error=f"SandboxCrash: {reason}; the session was restarted and earlier "
                      "variables are lost",
                error_type="SandboxCrash", crashed=True, state_lost=True,
                infra=infra_death(status, worker.channel.violation),
                duration_ms=(time.perf_counter() - start) * 1000.0)
        finally:
            timer.cancel()
        return _result_from_reply(reply, self.pool.config)

    async def _replace_worker(self) -> None:
        self.restarts += 1
        self._worker = None
        self._worker = await self.pool.acquire_worker()

    async def restart(self) -> None:
        """Discard the session's state and continue on a fresh worker."""
        async with self._lock:
            if self._worker is not None:
                self.pool.release_worker(self._worker)
            await self._replace_worker()

    async def close(self) -> None:
        """Kill the worker and free the session's slot. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self.pool.release_worker(self._worker)
            self._worker = None
        if self._holds_slot:
            self.pool._session_slots.release()
            self._holds_slot = False


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


_RESULT_FIELDS = {"stdout", "stderr", "value", "error", "error_type", "error_line",
                  "truncated", "duration_ms"}  # fmt: skip
_MAX_ERROR_CHARS = 4000


def _recap(text: str, limit: int) -> tuple[str, bool]:
    """Head and tail of ``text`` within ``limit`` (plus a marker): the host's own cap."""
    slack = 100  # the worker's own truncation marker fits within this
    if len(text) <= limit + slack:
        return text, False
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters omitted] ...\n" \
           f"{text[-half:]}", True


def _result_from_reply(reply: dict[str, Any], config: SandboxConfig) -> ExecResult:
    """Build a result from a worker's reply: known fields of the right types, re-capped.

    The worker caps its output itself, but a snippet controls its worker and could send
    anything, so the host enforces the limits again.
    """
    fields: dict[str, Any] = {}
    truncated = bool(reply.get("truncated", False))
    limits = {"stdout": config.max_output_chars, "stderr": config.max_output_chars,
              "value": config.max_value_chars, "error": _MAX_ERROR_CHARS, "error_type": 200}
    sanitized = 0
    for key in _RESULT_FIELDS & reply.keys():
        value = reply[key]
        if key in limits and isinstance(value, str):
            text, cut = _recap(value, limits[key])
            fields[key], replaced = sanitize_text(text)
            sanitized += replaced
            truncated = truncated or (cut and key != "error")
        elif key == "error_line" and isinstance(value, int) and not isinstance(value, bool):
            fields[key] = value
        elif key == "duration_ms" and isinstance(value, int | float):  # NaN fails decoding
            fields[key] = min(max(float(value), 0.0), 1e9)
    return ExecResult(truncated=truncated, sanitized=sanitized, **fields)
