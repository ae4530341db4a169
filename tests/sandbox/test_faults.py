"""Whose failure it was: a snippet's own error, timeout or crash is the model's; a process
killed from outside (the fault injector, ``SandboxConfig.fault_kill_rate``) is the
infrastructure's (``ExecResult.infra``). Real faults on a real pool, no mocks."""

from __future__ import annotations

import pytest

from agentmath.config import SandboxConfig
from agentmath.sandbox import SandboxPool

pytestmark = pytest.mark.asyncio(loop_scope="function")

# the real os module, reached from inside the sandbox the way test_functional.py does
REAL_OS = ("os = [c for c in object.__subclasses__() if c.__name__ == '_wrap_close'][0]"
           ".__init__.__globals__['sys'].modules['os']\n")

# unbounded recursion through lru_cache's C wrapper: a C stack overflow, SIGSEGV
STACK_OVERFLOW = ("import sys\nsys.setrecursionlimit(10**8)\nfrom functools import lru_cache\n"
                  "@lru_cache(None)\ndef f(n):\n    return f(n + 1)\nf(0)")


async def test_the_models_own_failures_stay_the_models() -> None:
    cfg = SandboxConfig(base_uid=74000, max_sessions=2, spare_workers=1, timeout_s=5, cpu_s=2)
    async with SandboxPool(cfg) as pool, pool.session() as s:
        syntax = await s.run("x = (")
        raised = await s.run("1 / 0")
        slow = await s.run("while True:\n    pass", timeout=0.5)
        exited = await s.run(REAL_OS + "os._exit(3)")
        segv = await s.run(STACK_OVERFLOW, timeout=30)  # wall time: a loaded host is slow
        cpu = await s.run("while True:\n    pass", timeout=30)  # its CPU-time limit: SIGXCPU
    assert syntax.error_type == "SyntaxError" and raised.error_type == "ZeroDivisionError"
    assert slow.timed_out
    assert exited.crashed and segv.crashed and cpu.crashed, (exited, segv, cpu)
    assert "CPU-time limit" in (cpu.error or "") and "segmentation" in (segv.error or "")
    for result in (syntax, raised, slow, exited, segv, cpu):
        assert not result.infra, result


async def test_a_process_killed_from_outside_is_the_infrastructures() -> None:
    cfg = SandboxConfig(base_uid=74000, max_sessions=2, spare_workers=1, fault_kill_rate=1.0)
    async with SandboxPool(cfg) as pool, pool.session() as s:
        first = await s.run("1 + 1")
        second = await s.run("2 + 2")
    assert first.crashed and first.state_lost and first.infra, first
    assert "SIGKILL" in (first.error or "")
    assert second.value == "4" and not second.infra  # the injector kills a session once
    assert first.to_dict()["infra"] is True


async def test_the_fault_injector_kills_its_share_of_sessions_reproducibly() -> None:
    def doomed(seed: int) -> list[bool]:
        pool = SandboxPool(SandboxConfig(fault_kill_rate=0.25, fault_seed=seed))
        return [pool.draw_fault() for _ in range(200)]  # no process is started

    first = doomed(7)
    assert first == doomed(7) and first != doomed(8)
    assert 30 <= sum(first) <= 70  # about a quarter of 200
    assert not any(SandboxPool(SandboxConfig()).draw_fault() for _ in range(50))
