"""Shared by the service benchmarks: the sandbox service in a subprocess, and its process tree.

``ServiceProcess`` runs ``agentmath sandbox serve`` in a child process on 127.0.0.1 (a free
port, a token file in a temporary directory, ``--no-access-log`` unless asked: a log line per
request would be measured as part of the service), waits for ``/health`` and stops it with
SIGTERM (the command's graceful shutdown). ``service_measure`` is the HTTP section of
``benchmarks/sandbox.py --service``: round trip, closed-loop throughput and paced latency with
three clients (agentmath's ``RemoteSandbox``, plain httpx, and ``RawSession``: a raw HTTP/1.1
client far cheaper in CPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _hiccups import Hiccups, by_chance, explain

TOKEN = "bench-token"


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants alive now, from /proc/*/stat (parent pids)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid == root and not os.path.exists(f"/proc/{root}"):
            continue
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def rss_mib(pid: int) -> float:
    """VmRSS of one process in MiB (0 if it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def tree_rss_mib(root: int) -> float:
    """VmRSS summed over ``root``'s process tree, in MiB (shared pages counted per process)."""
    return sum(rss_mib(p) for p in tree_pids(root))


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServiceProcess:
    """The sandbox service in a subprocess; a context manager giving ``url``, ``token``, ``pid``."""

    def __init__(self, service: dict[str, Any] | None = None, access_log: bool = False,
                 start_timeout: float = 60.0) -> None:
        self.service = service or {}
        self.access_log = access_log
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = TOKEN
        self.url = ""
        self.exit_code: int | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> ServiceProcess:
        import httpx

        self._tmp = tempfile.TemporaryDirectory(prefix="agentmath-bench-")
        token_file = Path(self._tmp.name) / "tokens"
        token_file.write_text(self.token + "\n")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        sets = [a for k, v in _flatten(self.service) for a in ("--set", f"{k}={json.dumps(v)}")]
        cmd = [sys.executable, "-m", "agentmath.cli", "sandbox", "serve", "--port", str(port),
               "--token-file", str(token_file),
               "--access-log" if self.access_log else "--no-access-log", *sets]
        self._log = open(Path(self._tmp.name) / "log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"the service did not start:\n{self.log()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            time.sleep(0.05)

    def log(self) -> str:
        assert self._tmp is not None
        return (Path(self._tmp.name) / "log").read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, wait; SIGKILL after ``timeout``. Returns the exit code."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.exit_code = self.proc.returncode if self.proc is not None else None
        return self.exit_code

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self._log.close()
        if self._tmp is not None:
            self._tmp.cleanup()


class RawSession:
    """A session over its own keep-alive HTTP/1.1 connection, with requests written and replies
    parsed by hand: a client far cheaper in CPU than httpx, to see the service's own limit."""

    def __init__(self, url: str, token: str) -> None:
        self.host, port = url.removeprefix("http://").split(":")
        self.port, self.token = int(port), token
        self.sid = ""
        self.cell = 0

    async def _request(self, path: str, body: bytes, method: str = "POST") -> tuple[int, bytes]:
        """One request; if the server closed the idle keep-alive connection (uvicorn does
        after 5 s), reconnect and send it again, as httpx does (a cell sent twice is
        answered from the stored result: cell numbers make it exactly-once)."""
        for attempt in (0, 1):
            try:
                return await self._send(path, body, method)
            except (asyncio.IncompleteReadError, ConnectionError):
                if attempt:
                    raise
                self.writer.close()
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        raise AssertionError("unreachable")

    async def _send(self, path: str, body: bytes, method: str) -> tuple[int, bytes]:
        self.writer.write(f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\nauthorization: "
                          f"Bearer {self.token}\r\ncontent-type: application/json\r\n"
                          f"content-length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    async def open(self) -> RawSession:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        status, body = await self._send("/v1/sessions", b"", "POST")
        assert status == 201, body
        self.sid = json.loads(body)["session_id"]
        return self

    async def run(self, code: str = "pass", timeout_s: float | None = None) -> dict[str, Any]:
        """Run the next cell; the reply as a dict (its cell number checked)."""
        req: dict[str, Any] = {"code": code, "cell": self.cell}
        if timeout_s is not None:
            req["timeout_s"] = timeout_s
        status, body = await self._request(f"/v1/sessions/{self.sid}/run",
                                           json.dumps(req).encode())
        reply = json.loads(body)
        assert status == 200 and reply["cell"] == self.cell, (status, body[:500])
        self.cell += 1
        return dict(reply)

    async def close(self) -> None:
        status, _ = await self._request(f"/v1/sessions/{self.sid}", b"", "DELETE")
        assert status == 204, status
        self.writer.close()


def _flatten(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


SERVICE = {"max_sessions_per_client": 1024, "max_inflight_per_client": 1024,
           "max_inflight_total": 1024, "sandbox": {"max_sessions": 64}}


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` (from /proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


class HttpxSession:
    """A session through a shared httpx.AsyncClient (keep-alive connection pool)."""

    def __init__(self, http: Any) -> None:
        self.http, self.sid, self.cell = http, "", 0

    async def open(self) -> HttpxSession:
        reply = await self.http.post("/v1/sessions")
        reply.raise_for_status()
        self.sid = str(reply.json()["session_id"])
        return self

    async def run(self, code: str = "pass") -> None:
        reply = await self.http.post(f"/v1/sessions/{self.sid}/run",
                                     json={"code": code, "cell": self.cell})
        reply.raise_for_status()
        assert reply.json()["cell"] == self.cell
        self.cell += 1

    async def close(self) -> None:
        assert (await self.http.delete(f"/v1/sessions/{self.sid}")).status_code == 204


class RemoteSandboxSession:
    """A session of agentmath's own client (``RemoteSandbox``: httpx's API on aiohttp's pool)."""

    def __init__(self, client: Any) -> None:
        self.session = client.session()

    async def open(self) -> RemoteSandboxSession:
        return self  # opened by its first cell, as in a rollout

    async def run(self, code: str = "pass") -> None:
        result = await self.session.run(code)
        assert result.ok, result.error

    async def close(self) -> None:
        await self.session.close()


async def service_measure(quick: bool) -> dict[str, Any]:
    """Trivial cells over HTTP against the service in a subprocess, with three clients
    (agentmath's ``RemoteSandbox``; plain httpx, its pool and transport, the client before
    2026-11-28; a hand-written raw HTTP/1.1 one): round trip, closed-loop throughput at several
    concurrencies, open-loop paced p99 at half the best rate and at 1,500/s."""
    import httpx

    from agentmath.sandbox.remote import RemoteSandbox

    res: dict[str, Any] = {}
    with ServiceProcess(SERVICE) as svc:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=svc.url, limits=limits, timeout=30,
                                     headers={"Authorization": f"Bearer {svc.token}"}) as http, \
                RemoteSandbox([svc.url], svc.token, max_connections=64) as remote:
            clients = {"agentmath RemoteSandbox": lambda: RemoteSandboxSession(remote),
                       "httpx": lambda: HttpxSession(http),
                       "raw": lambda: RawSession(svc.url, svc.token)}
            for kind, new in clients.items():
                res[kind] = await _client_measure(svc, new, quick)
    return res


async def _client_measure(svc: Any, new: Any, quick: bool) -> dict[str, Any]:
    k = 30 if quick else 1  # a smoke run: 30x fewer cells, paced phases of 0.25 s
    res: dict[str, Any] = {}
    one_s = await new().open()
    for _ in range(10 if quick else 50):
        await one_s.run()
    lat = []
    for _ in range(3000 // k):
        t = time.perf_counter()
        await one_s.run()
        lat.append((time.perf_counter() - t) * 1000)
    await one_s.close()
    res["rt"] = lat
    sessions = [await new().open() for _ in range(32)]

    async def drive(s: Any, n: int) -> None:
        for _ in range(n):
            await s.run()

    res["tput"] = {}
    for conc in (1, 8, 32):
        per = max(5 if quick else 20, 6000 // k // conc)
        pids = tree_pids(svc.pid)
        c0, main0 = time.process_time(), _cpu_s([svc.pid])
        w0 = _cpu_s([p for p in pids if p != svc.pid])
        t = time.perf_counter()
        await asyncio.gather(*(drive(s, per) for s in sessions[:conc]))
        wall = time.perf_counter() - t
        pids = tree_pids(svc.pid)
        res["tput"][conc] = {
            "rate": conc * per / wall, "wall_s": wall,
            "client_cpu": (time.process_time() - c0) / wall,
            "service_cpu": (_cpu_s([svc.pid]) - main0) / wall,
            "workers_cpu": (_cpu_s([p for p in pids if p != svc.pid]) - w0) / wall}
    best = max(v["rate"] for v in res["tput"].values())
    res["best"] = best
    free: asyncio.Queue[Any] = asyncio.Queue()
    for s in sessions:
        free.put_nowait(s)

    async def one(due: float, out: list[float], spans: list[tuple[float, float]]) -> None:
        s = await free.get()
        try:
            await s.run()
        finally:
            free.put_nowait(s)
        done = time.perf_counter()
        out.append((done - due) * 1000)
        spans.append((due, done))

    async def paced(rate: float, seconds: float) -> list[float]:
        """Open loop: cells sent on a fixed schedule; latency from the scheduled time (so a
        stall counts against every cell that should have been sent during it). Bystanders
        (benchmarks/_hiccups.py) watch the machine meanwhile: ``res["tail"]`` says how many
        cells over 5 ms had a stall of the machine in them or within 50 ms before, and how
        many the same intervals at random times would have."""
        out: list[float] = []
        spans: list[tuple[float, float]] = []
        tasks = []
        with Hiccups() as hic:
            start = time.perf_counter() + 0.05
            for i in range(int(rate * seconds)):
                due = start + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(due, out, spans)))
            await asyncio.gather(*tasks)
        slow = [span for span in spans if span[1] - span[0] > 0.005]
        run = (start, max(done for _, done in spans))
        res.setdefault("tail", {})[f"{rate:.0f}"] = {
            **hic.summary(), "cells": len(spans), "slow_cells": len(slow),
            "slow_cells_after_a_stall": explain(slow, hic.stalls),
            "slow_cells_by_chance": by_chance(slow, hic.stalls, run)}
        return out

    seconds = 0.25 if quick else 4.0
    # This client's heap (httpx, the sessions) out of its collector's reach, as the service
    # does with its own: a gen-2 pause of the client (12-45 ms measured) would stall every
    # cell in flight and be counted as the service's tail.
    gc.collect()
    gc.freeze()
    res["paced_half"] = (best / 2, await paced(best / 2, seconds))
    res["paced_1500"] = (1500.0, await paced(1500.0, seconds))
    for s in sessions:
        await s.close()
    return res
