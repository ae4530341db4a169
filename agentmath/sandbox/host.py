"""Host-side plumbing of the sandbox: the zygote process, its control channel, worker channels.

The zygote is started with ``python -I`` and a minimal environment (no secrets to inherit), in
``/``. Workers are forked by the zygote on a socketpair whose other end stays here; the host
talks to each worker over it with length-prefixed JSON (never pickle), parsed incrementally by an
asyncio protocol so thousands of sessions share one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from agentmath.config import SandboxConfig
from agentmath.errors import SandboxError
from agentmath.sandbox.protocol import FrameBuffer, ProtocolError, encode

_ZYGOTE_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/nonexistent",
    # One BLAS/OpenMP thread: workers may not create threads, and 2 cores are shared anyway.
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    # pandas -> pyarrow's jemalloc would start a background thread: the zygote must stay
    # single-threaded (user namespaces require it, Landlock and seccomp bind one thread).
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}


@functools.cache
def _matplotlib_cache_dir() -> str:
    """Where the zygote keeps matplotlib's font cache: the host user's cache directory, or one
    temporary directory for this process (made once, not per pool) when that is not writable."""
    cache = os.path.join(os.path.expanduser("~"), ".cache", "agentmath", "matplotlib")
    try:
        os.makedirs(cache, mode=0o700, exist_ok=True)
    except OSError:
        cache = tempfile.mkdtemp(prefix="agentmath-mpl-")
    return cache


def _zygote_env() -> dict[str, str]:
    """The zygote's whole environment: the fixed minimum plus matplotlib's settings.

    Plots render with the non-interactive Agg backend; the font cache is written by the zygote
    at preload time only (workers cannot write).
    """
    return {**_ZYGOTE_ENV, "MPLBACKEND": "Agg", "MPLCONFIGDIR": _matplotlib_cache_dir()}


class _WorkerChannel(asyncio.Protocol):
    """One worker's socket, held to a strict request/reply discipline.

    A snippet controls its whole worker process, so nothing the worker sends is trusted: a
    frame that does not answer the pending request (unsolicited, extra, oversized, undecodable
    or with the wrong request id) is a protocol violation, and the channel closes. At most one
    frame is ever buffered, so a worker cannot grow the host's memory.
    """

    def __init__(self, max_frame: int) -> None:
        self.frames = FrameBuffer(max_frame)
        self.on_reply: Callable[[], None] | None = None
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[dict[str, Any]] | None = None
        self.expect_id: int | None = None
        self.violation: str | None = None
        self.on_lost: Callable[[], None] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            messages = self.frames.feed(data)
        except ProtocolError as exc:
            self._violate(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - hostile bytes must never raise into asyncio
            self._violate(f"undecodable frame ({type(exc).__name__})")
            return
        for message in messages:
            waiter = self.waiter
            if waiter is None or waiter.done():
                self._violate("unsolicited data on the channel")
                return
            if message.get("id") != self.expect_id:
                self._violate("a reply that does not answer the request")
                return
            self.waiter = None
            if self.on_reply is not None:
                self.on_reply()  # freeze the worker as soon as it has answered
            waiter.set_result(message)

    def _violate(self, what: str) -> None:
        self.violation = what
        self._fail(ConnectionResetError(f"sandbox worker broke the protocol: {what}"))

    def _fail(self, exc: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionResetError("sandbox worker closed its channel"))
        if not self.closed.done():
            self.closed.set_result(None)
        if self.on_lost is not None:
            self.on_lost()  # a worker that is no longer reachable is killed at once

    def expect(self, request_id: int | None) -> asyncio.Future[dict[str, Any]]:
        """A future for the next frame, which must carry ``request_id``."""
        fut = asyncio.get_running_loop().create_future()
        if self.closed.done() or (self.transport is not None and self.transport.is_closing()):
            fut.set_exception(ConnectionResetError("sandbox worker closed its channel"))
        else:
            self.waiter, self.expect_id = fut, request_id
        return fut


class _Worker:
    """A forked worker process as the host sees it.

    With a pidfd (Linux >= 5.3) an idle worker is *frozen*: SIGSTOP as soon as it has
    answered, SIGCONT just before its next request. A stopped process runs nothing, so no
    work a snippet sets up (a signal handler on a timer, say) can go on between snippets,
    whatever the snippet did to its own interpreter: the guarantee is enforced from outside.
    """

    __slots__ = ("pid", "slot", "channel", "protections", "exit_status", "killed", "pidfd",
                 "freeze")

    def __init__(self, pid: int, slot: int, channel: _WorkerChannel, pidfd: int | None = None,
                 freeze: bool = True) -> None:
        self.pid = pid
        self.slot = slot
        self.channel = channel
        self.protections: dict[str, Any] = {}
        self.killed = False
        self.pidfd = pidfd
        self.freeze = freeze and pidfd is not None
        self.exit_status: asyncio.Future[dict[str, Any]] = (
            asyncio.get_running_loop().create_future())
        if self.freeze:
            channel.on_reply = self.pause

    def signal(self, signum: int) -> bool:
        """Send ``signum`` through the pidfd (never to a recycled pid); False if it is gone."""
        if self.pidfd is None:
            return False
        try:
            signal.pidfd_send_signal(self.pidfd, signum)
        except OSError:
            return False  # exited (ESRCH) or pidfd closed: nothing left to signal
        return True

    def pause(self) -> None:
        """Freeze the idle worker (no-op without a pidfd or with freezing disabled)."""
        if self.freeze:
            self.signal(signal.SIGSTOP)

    def close_pidfd(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None

    def request(self, message: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Send a request; the future resolves with the reply (or fails on EOF/violation).

        Each request carries a fresh random id that the reply must echo: a snippet that writes
        to its channel does not know it without digging through the interpreter's frames.
        """
        request_id = secrets.randbits(62)
        fut = self.channel.expect(request_id)
        if not fut.done() and self.channel.transport is not None:
            if self.freeze:
                self.signal(signal.SIGCONT)
            self.channel.transport.write(encode({**message, "id": request_id}))
        return fut


class _Zygote:
    """The zygote process and its SOCK_SEQPACKET control channel."""

    def __init__(self, config: SandboxConfig, uid_base: int | None = None) -> None:
        self.config = config
        self.uid_base = config.base_uid if uid_base is None else uid_base
        self.proc: subprocess.Popen[bytes] | None = None
        self.ctrl: socket.socket | None = None
        self.report: dict[str, Any] = {}
        self._spawn_waiters: dict[int, asyncio.Future[tuple[int, int | None]]] = {}
        self._workers: dict[int, _Worker] = {}
        self._next_id = 0
        self._stderr = tempfile.TemporaryFile()
        self.dead: asyncio.Future[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        # The zygote runs isolated (-I: no environment variables, no cwd on the path) but sees
        # the same libraries as the host, whether installed or on the host's PYTHONPATH.
        paths = [pkg_root] + [p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]
        boot = (f"import sys; sys.path[:] = {list(dict.fromkeys(paths))!r}; "
                "from agentmath.sandbox.zygote import main; main()")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", boot, str(child.fileno())],
            pass_fds=(child.fileno(),), env=_zygote_env(), cwd="/",
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
        )
        child.close()
        self.ctrl = host
        setup = {"preload": list(self.config.preload),
                 "allowed": list(self.config.allowed_modules),
                 "disable": list(self.config.disable_protections)}
        host.sendall(json.dumps(setup).encode())
        host.setblocking(False)
        self.dead = loop.create_future()
        try:
            data = await asyncio.wait_for(loop.sock_recv(host, 1 << 20),
                                          self.config.start_timeout_s)
        except TimeoutError as exc:
            self.close_control()
            if self.proc is not None:
                self.proc.kill()
            tail = self._stderr_tail()  # before wait() closes the file
            self.wait()
            raise SandboxError(
                f"sandbox zygote did not start within {self.config.start_timeout_s:g} s "
                "(sandbox.start_timeout_s; it imports the preload modules first, so a loaded "
                f"machine can take longer); its stderr: {tail}") from exc
        if not data:
            raise SandboxError(f"sandbox zygote failed to start: {self._stderr_tail()}")
        self.report = json.loads(data)
        loop.add_reader(host.fileno(), self._on_readable)

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:] or "(no output)"

    def _on_readable(self) -> None:
        assert self.ctrl is not None
        while True:
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.ctrl, 1 << 16, 1)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                for fd in fds:
                    os.close(fd)
                self._on_dead()
                return
            try:
                message = json.loads(data)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                for fd in fds:
                    os.close(fd)
                self._on_dead()  # the zygote runs no snippet code; garbage means it is broken
                return
            self._dispatch(message, fds[0] if fds else None)

    def _dispatch(self, message: dict[str, Any], pidfd: int | None) -> None:
        op = message.get("op")
        if op == "spawned":
            fut = self._spawn_waiters.pop(message["id"], None)
            if fut is not None and not fut.done():
                fut.set_result((int(message["pid"]), pidfd))
                return
        elif op == "exit":
            worker = self._workers.pop(int(message["pid"]), None)
            if worker is not None:
                worker.close_pidfd()
                if not worker.exit_status.done():
                    worker.exit_status.set_result(message)
        elif op == "error":
            fut = self._spawn_waiters.pop(message.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_exception(SandboxError(message.get("error", "zygote error")))
        if pidfd is not None:
            os.close(pidfd)

    def _on_dead(self) -> None:
        loop = asyncio.get_running_loop()
        if self.ctrl is not None:
            loop.remove_reader(self.ctrl.fileno())
        for fut in self._spawn_waiters.values():
            if not fut.done():
                fut.set_exception(SandboxError("sandbox zygote died"))
        self.kill_all()

    def kill_all(self) -> None:
        """SIGKILL every worker still known, through its pidfd; used when the zygote is gone.

        Workers die with the zygote (parent-death signal, which seccomp keeps them from
        undoing); this second layer needs no cooperation from them at all.
        """
        for worker in self._workers.values():
            worker.signal(signal.SIGKILL)
            worker.close_pidfd()
            if not worker.exit_status.done():
                worker.exit_status.set_result({"op": "exit", "pid": worker.pid, "signal": 9})
        self._workers.clear()
        if self.dead is not None and not self.dead.done():
            self.dead.set_result(None)

    async def spawn(self, slot: int) -> _Worker:
        """Fork a worker running as base_uid+slot; returns once it has applied its protections."""
        if self.dead is None or self.dead.done() or self.ctrl is None:
            raise SandboxError("sandbox zygote is not running")
        loop = asyncio.get_running_loop()
        cfg = self.config
        spec = {"uid": self.uid_base + slot, "memory_mb": cfg.memory_mb, "cpu_s": cfg.cpu_s,
                "allowed_modules": list(cfg.allowed_modules),
                "max_output_chars": cfg.max_output_chars, "max_value_chars": cfg.max_value_chars}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._next_id += 1
        req_id = self._next_id
        fut: asyncio.Future[tuple[int, int | None]] = loop.create_future()
        self._spawn_waiters[req_id] = fut
        try:
            socket.send_fds(self.ctrl, [json.dumps({"op": "spawn", "id": req_id,
                                                    "spec": spec}).encode()], [theirs.fileno()])
        finally:
            theirs.close()
        pid, pidfd = await fut
        max_frame = 6 * (2 * cfg.max_output_chars + cfg.max_value_chars + 4096) + 65536
        channel = _WorkerChannel(max_frame)
        # Expect the hello before connecting: a loop may deliver data in the same iteration as
        # connection_made (uvloop does), and a frame with no waiter is a protocol violation.
        hello_fut = channel.expect(None)
        await loop.create_unix_connection(lambda: channel, sock=ours)
        worker = _Worker(pid, slot, channel, pidfd,
                         freeze="idle_freeze" not in cfg.disable_protections)
        self._workers[pid] = worker
        channel.on_lost = lambda: self.kill_worker(worker)
        try:
            hello = await asyncio.wait_for(hello_fut, cfg.start_timeout_s)
        except TimeoutError as exc:
            self.kill_worker(worker)
            raise SandboxError(f"a sandbox worker did not report ready within "
                               f"{cfg.start_timeout_s:g} s (sandbox.start_timeout_s)") from exc
        except ConnectionResetError as exc:
            self.kill_worker(worker)
            raise SandboxError("a sandbox worker died while starting") from exc
        if "error" in hello:
            self.kill_worker(worker)
            raise SandboxError(f"a sandbox worker failed to start: {hello['error']}")
        worker.protections = dict(hello.get("protections", {}))
        worker.protections["idle_freeze"] = worker.freeze
        worker.pause()  # a spare waits frozen, like any idle worker
        return worker

    def kill_worker(self, worker: _Worker) -> None:
        """Ask the zygote to SIGKILL the worker (safe against pid reuse; see zygote.py)."""
        if worker.killed:
            return
        worker.killed = True
        if worker.channel.transport is not None:
            worker.channel.transport.close()
        if self.ctrl is not None and self.dead is not None and not self.dead.done():
            with contextlib.suppress(OSError):
                self.ctrl.send(json.dumps({"op": "kill", "pid": worker.pid}).encode())

    def close_control(self) -> None:
        """Close the control socket (on the loop's thread); the zygote then kills its workers."""
        if self.ctrl is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                asyncio.get_running_loop().remove_reader(self.ctrl.fileno())
            self.ctrl.close()
            self.ctrl = None

    def wait(self) -> None:
        """Wait for the zygote to exit (blocking: call it in a thread); SIGKILL after 5 s."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
        self._stderr.close()
