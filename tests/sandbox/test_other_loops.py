"""The sandbox on another event loop: uvloop, which vLLM and many servers run on.

uvloop may deliver a new connection's first data in the same iteration as ``connection_made``;
a worker's hello then arrived before the host expected it and counted as a protocol violation
("a sandbox worker died while starting"), on cold spawns only. The host now expects the hello
before it connects.
"""

from __future__ import annotations

import asyncio

import pytest

from agentmath.config import SandboxConfig
from agentmath.sandbox import SandboxPool

uvloop = pytest.importorskip("uvloop")  # in the dev extra, so CI always runs this


async def _cold_sessions(n: int) -> list[str | None]:
    async with SandboxPool(SandboxConfig(spare_workers=0)) as pool:
        values = []
        for i in range(n):  # one cold fork per session: no spare is ever ready
            async with pool.session() as session:
                await session.run(f"x = {i}")
                values.append((await session.run("x * 2")).value)
        return values


class LateConnectingLoop(uvloop.Loop):  # type: ignore[misc,name-defined]
    """uvloop that connects a socket only after 50 ms: the worker's hello is then always
    waiting in the socket, the case that used to fail (now deterministic, not a race)."""

    async def create_unix_connection(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.05)
        return await super().create_unix_connection(*args, **kwargs)


def test_cold_spawns_under_uvloop() -> None:
    assert uvloop.run(_cold_sessions(20)) == [str(2 * i) for i in range(20)]


def test_hello_already_waiting_when_the_host_connects() -> None:
    with asyncio.Runner(loop_factory=LateConnectingLoop) as runner:
        assert runner.run(_cold_sessions(5)) == [str(2 * i) for i in range(5)]


def test_concurrent_sessions_under_uvloop() -> None:
    async def main() -> list[str | None]:
        async with SandboxPool(SandboxConfig(spare_workers=2)) as pool:
            async def one(i: int) -> str | None:
                async with pool.session() as session:
                    await session.run(f"y = {i}")
                    return (await session.run("y + 1")).value
            return list(await asyncio.gather(*(one(i) for i in range(16))))

    assert uvloop.run(main()) == [str(i + 1) for i in range(16)]
