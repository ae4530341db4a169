"""The floor under the sandbox's in-process round trip, measured beside it: what two bare
processes take to pass a message back and forth on this machine, so that the sandbox's figure
can be read as "ours" (protocol, checks, Python on each side) plus "the machine's" (two
context switches, and with the idle freeze two signals).

The echo child is forked from this process and answers each message over a Unix socket pair
(as a sandbox worker answers over its channel); the parent drives it from an asyncio loop (as
the pool does), optionally sending SIGCONT before and SIGSTOP after each exchange through a
pidfd (the idle freeze). Nothing else: no JSON, no exec, no checks.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["floors", "on_loop", "one_core", "pingpong_p50_ms"]


def _echo(sock: socket.socket) -> None:
    while True:
        data = sock.recv(65536)
        if not data:
            os._exit(0)
        sock.sendall(data)


async def pingpong_p50_ms(n: int, freeze: bool) -> float:
    """Median round trip (ms) of ``n`` small messages to a forked echo process; with
    ``freeze`` the child is SIGCONT-ed before and SIGSTOP-ped after each (pidfd signals)."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the child: echo until the parent closes its end
        parent.close()
        try:
            _echo(child)
        finally:
            os._exit(0)
    child.close()
    pidfd = os.pidfd_open(pid)
    message = b'{"id": 1234567890, "code": "x = 1"}'
    try:
        reader, writer = await asyncio.open_connection(sock=parent)
        lat = []
        for _ in range(n):
            t = time.perf_counter()
            if freeze:
                signal.pidfd_send_signal(pidfd, signal.SIGCONT)
            writer.write(message)
            await reader.read(65536)
            if freeze:
                signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
            lat.append(time.perf_counter() - t)
        writer.close()
    finally:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(pidfd)
    return statistics.median(lat) * 1000


def on_loop(kind: str, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run ``main()`` on a fresh event loop of ``kind``: 'asyncio' (the standard one) or
    'uvloop' (libuv's, which vLLM and uvicorn run on; a dev dependency here)."""
    if kind == "asyncio":
        return asyncio.run(main())
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())


def floors(quick: bool, in_process: Callable[[], Coroutine[Any, Any, tuple[list[float], float]]]
           ) -> dict[str, Any]:
    """The floors on both loops, and ``in_process()`` (the sandbox's trivial round trips in
    ms and its 32-session throughput) again on uvloop, each on a fresh loop of its kind."""
    n = 500 if quick else 5000
    out: dict[str, Any] = {}
    for kind in ("asyncio", "uvloop"):
        out[f"floor_{kind}"] = on_loop(kind, lambda: pingpong_p50_ms(n, freeze=False))
        out[f"floor_freeze_{kind}"] = on_loop(kind, lambda: pingpong_p50_ms(n, freeze=True))
    out["rt_trivial_uvloop"], out["tput_trivial_uvloop"] = on_loop("uvloop", in_process)
    return out


@contextmanager
def pinned_to_one_cpu(pin: bool = True) -> Iterator[None]:
    """This process and every process it starts pinned to one CPU (its lowest allowed) within
    the block, the affinity restored after. ``pin`` False (a smoke run, which shares the
    machine with other jobs) leaves the affinity alone: pinned to a CPU that another job
    saturated, the sandbox's start once waited past its 60 s bound in the test suite, beside
    the Ray and vLLM tests."""
    saved = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, {min(saved)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


def one_core(quick: bool,
             in_process: Callable[[], Coroutine[Any, Any, tuple[list[float], float]]],
             baseline: Callable[[], tuple[list[float], float]]) -> dict[str, Any]:
    """The floor on uvloop, ``in_process()`` on uvloop and ``baseline()`` (``python -c``) with
    this process and every process it starts pinned to one CPU (its lowest allowed), then the
    affinity restored. On a VM a message between two processes on two CPUs waits for the
    other CPU to be woken (an inter-processor interrupt through the hypervisor); on one CPU
    the kernel switches to the woken process directly. What that costs the round trip is the
    difference between these rows and the unpinned ones of the same run. ``quick`` leaves the
    affinity alone (:func:`pinned_to_one_cpu`)."""
    n = 500 if quick else 5000
    with pinned_to_one_cpu(not quick):
        out: dict[str, Any] = {
            "one_core_floor_uvloop": on_loop("uvloop", lambda: pingpong_p50_ms(n, freeze=False)),
            "one_core_floor_freeze_uvloop": on_loop(
                "uvloop", lambda: pingpong_p50_ms(n, freeze=True))}
        out["one_core_rt_uvloop"], out["one_core_tput_uvloop"] = on_loop("uvloop", in_process)
        out["one_core_base"], out["one_core_base_tput"] = baseline()
    return out
