"""A small process pool whose calls have a hard wall-clock limit.

math-verify (and sympy under it) can spin for minutes on pathological LaTeX, and its own
timeouts use ``signal.alarm``, which works only in the main thread and not at all under a
running asyncio loop in another thread. So grading runs in separate *spawned* worker processes
(no fork of a threaded parent): a call that overruns its limit has its worker killed with
SIGKILL and replaced at once, and the caller gets a timeout instead of a hang.

Unlike ``concurrent.futures.ProcessPoolExecutor``, which cannot kill a single task, each call
here owns one worker for its duration, so killing it never disturbs other calls.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal

from agentmath.errors import GradingError

Status = Literal["ok", "timeout", "error"]
#: Largest reply a worker may send (an extracted answer can be as long as the response).
MAX_REPLY_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class CallResult:
    """Outcome of one pool call: ``value`` when ``status == "ok"``, else ``error`` says why.

    ``elapsed_s`` is the time the call spent in its worker (from sending it to the reply, or to
    the kill), not counting the wait for a free worker: callers that chain calls under one
    budget (extraction, then verification) subtract it.
    """

    status: Status
    value: Any = None
    error: str | None = None
    elapsed_s: float = 0.0


def _resolve(target: str | Callable[..., Any]) -> Callable[..., Any]:
    """A callable from itself or from a ``"package.module:function"`` name."""
    if callable(target):
        return target
    module, _, name = target.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


def _watch_parent(parent_pid: int) -> None:
    """Exit this worker once its parent is gone (a busy worker would otherwise linger)."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)


def worker_main(fd: int, parent_pid: int, preload: Sequence[str], memory_mb: int | None) -> None:
    """Worker loop: apply limits, import ``preload``, then run ``(target, args)`` requests.

    A ``preload`` entry is a module to import or a ``"module:function"`` to call once (warm-up).

    Exceptions of a call are sent back as text; the loop ends when the parent closes the socket
    or sends ``None``. SIGINT is ignored so that Ctrl-C in the parent leaves no tracebacks here.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_mb is not None:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    conn = Connection(fd)
    for name in preload:
        if ":" in name:
            _resolve(name)()
        else:
            importlib.import_module(name)
    _reply(conn, ("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        target, args = message
        try:
            reply: tuple[str, Any] = ("ok", _resolve(target)(*args))
        except Exception as exc:  # noqa: BLE001 - reported to the caller, never lost
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            _reply(conn, reply)
        except (TypeError, ValueError) as exc:
            _reply(conn, ("error", f"the result cannot be sent back: {exc}"))


def _reply(conn: Connection, reply: tuple[str, Any]) -> None:
    """Send a reply as JSON, never pickle: a worker parses untrusted model output (sympy's
    parser evaluates strings), so what it sends back must not be able to run code here."""
    conn.send_bytes(json.dumps(list(reply)).encode())


def _read_reply(conn: Connection) -> tuple[str, Any]:
    """Read a worker's JSON reply; anything malformed counts as the worker failing."""
    try:
        tag, value = json.loads(conn.recv_bytes(MAX_REPLY_BYTES))
    except (ValueError, TypeError) as exc:
        raise EOFError(f"malformed reply from a grading worker: {exc}") from exc
    return str(tag), value


# A plain subprocess, not multiprocessing's spawn: spawn re-imports the parent's __main__ in
# the child, which breaks scripts without an ``if __name__ == "__main__"`` guard.
_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from agentmath.grading.pool import worker_main; "
    "worker_main(int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), "
    "json.loads(sys.argv[5]))"
)


class _Worker:
    """One worker process and the parent's end of its socket."""

    def __init__(self, preload: Sequence[str], memory_mb: int | None) -> None:
        parent_sock, child_sock = socket.socketpair()
        try:
            argv = [
                sys.executable, "-c", _BOOT, json.dumps(sys.path), str(child_sock.fileno()),
                str(os.getpid()), json.dumps(list(preload)), json.dumps(memory_mb),
            ]
            self.process = subprocess.Popen(
                argv, pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.ready = False

    def wait_ready(self, timeout: float) -> None:
        """Block until the worker has imported its modules; GradingError if it cannot start."""
        if self.ready:
            return
        try:
            if self.conn.poll(timeout):
                tag, _ = _read_reply(self.conn)
                self.ready = tag == "ready"
        except (EOFError, OSError):
            pass
        if not self.ready:
            self.kill()
            raise GradingError(
                "grading worker failed to start within "
                f"{timeout:g} s (exit code {self.process.returncode}); see its stderr")

    def kill(self) -> None:
        """SIGKILL the worker and reap it; safe to call twice."""
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.conn.close()


class VerifierPool:
    """Up to ``workers`` spawned processes that run picklable calls under a hard time limit.

    Thread-safe: any thread (including threads serving an asyncio loop) may call :meth:`call`;
    a call waits for a free worker, then runs with its own deadline. Workers start lazily.
    ``preload`` names modules to import, or ``"module:function"`` warm-ups to call, in each
    worker before it takes calls, so that their cost is never charged to a call's timeout.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        preload: Sequence[str] = (),
        memory_mb: int | None = 4096,
        startup_timeout: float = 120.0,
    ) -> None:
        if workers < 1:
            raise GradingError(f"a verifier pool needs at least one worker, got {workers}")
        self.workers = workers
        self.preload = tuple(preload)
        self.memory_mb = memory_mb
        self.startup_timeout = startup_timeout
        self.pid = os.getpid()
        self._idle: list[_Worker] = []
        self._count = 0
        self._closed = False
        self._cond = threading.Condition()

    def _new_worker(self) -> _Worker:
        return _Worker(self.preload, self.memory_mb)

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise GradingError("the verifier pool is closed")
                if self._idle:
                    return self._pick_idle()
                if self._count < self.workers:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            return self._new_worker()
        except OSError as exc:
            self._forget(None)
            raise GradingError(f"cannot start a grading worker: {exc}") from exc

    def _pick_idle(self) -> _Worker:
        """Take an idle worker, preferring one that is ready over one still starting up."""
        for index, worker in enumerate(self._idle):
            if worker.ready or worker.conn.poll(0):
                return self._idle.pop(index)
        return self._idle.pop()

    def _release(self, worker: _Worker) -> None:
        with self._cond:
            if self._closed:
                worker.kill()
                return
            self._idle.append(worker)
            self._cond.notify()

    def _forget(self, worker: _Worker | None) -> None:
        """Drop a dead or killed worker and start its replacement in the same slot at once
        (the replacement becomes ready in the background; the slot is freed if it cannot start)."""
        if worker is not None:
            worker.kill()
        replacement = None
        if not self._closed:
            try:
                replacement = self._new_worker()
            except OSError:
                pass  # the next call starts one, and reports the error if it fails again
        if replacement is not None:
            self._release(replacement)
            return
        with self._cond:
            self._count -= 1
            self._cond.notify()

    def warm_up(self) -> None:
        """Start every worker and wait until all are ready (optional; calls start them lazily)."""
        taken = [self._acquire() for _ in range(self.workers)]
        try:
            for worker in taken:
                worker.wait_ready(self.startup_timeout)
        finally:
            for worker in taken:
                if worker.ready:
                    self._release(worker)
                else:
                    self._forget(worker)

    def call(
        self, fn: str | Callable[..., Any], args: tuple[Any, ...], timeout: float
    ) -> CallResult:
        """Run ``fn(*args)`` in a worker; kill the worker if it has not answered in ``timeout`` s.

        ``fn`` is a picklable callable or a ``"package.module:function"`` name, which is
        imported in the worker only (so the parent never imports heavy modules). The clock
        starts once a worker is free and ready: start-up and queueing do not count.
        """
        worker = self._acquire()
        try:
            worker.wait_ready(self.startup_timeout)
        except GradingError:
            self._forget(None)
            raise
        try:
            worker.conn.send((fn, args))  # pickles fully before writing: a failure sends nothing
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            self._release(worker)
            raise GradingError(f"cannot send this call to a grading worker: {exc}") from exc
        except OSError:
            return self._died(worker)
        return self._answer(worker, timeout)

    def _answer(self, worker: _Worker, timeout: float) -> CallResult:
        """Wait up to ``timeout`` s for the worker's reply; kill and replace it on overrun."""
        started = time.monotonic()
        try:
            if not worker.conn.poll(timeout):
                self._forget(worker)
                return CallResult("timeout", error=f"verification exceeded {timeout:g} s",
                                  elapsed_s=time.monotonic() - started)
            tag, value = _read_reply(worker.conn)
        except (EOFError, OSError):
            return self._died(worker)
        elapsed = time.monotonic() - started
        self._release(worker)
        if tag == "ok":
            return CallResult("ok", value=value, elapsed_s=elapsed)
        return CallResult("error", error=str(value), elapsed_s=elapsed)

    def _died(self, worker: _Worker) -> CallResult:
        """Report a worker that died mid-call (crash, OOM kill) and replace it."""
        try:  # its end of the pipe closes just before it is reaped: wait briefly for the code
            code = worker.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        self._forget(worker)
        return CallResult("error", error=f"grading worker died (exit code {code})")

    def close(self) -> None:
        """Stop all idle workers; busy ones are killed when their call returns."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for worker in idle:
            try:
                worker.conn.send(None)
                worker.process.wait(timeout=1)
            except (OSError, subprocess.TimeoutExpired):
                pass
            worker.kill()
