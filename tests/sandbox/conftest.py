"""Shared fixtures for the sandbox tests: one started pool per module, host-side probes."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import pytest_asyncio

from agentmath.config import SandboxConfig
from agentmath.sandbox import Sandbox, SandboxPool

SECRET_ENV = "AGENTMATH_TEST_SECRET"
SECRET_VALUE = f"host-secret-{uuid.uuid4().hex}"
SANDBOX_UID_MIN = 61000


PF_EXITING = 0x4  # include/linux/sched.h: the process got its fatal signal and is tearing down


def proc_info(pid: int) -> dict[str, int] | None:
    """uid and ppid of a live process (None if it is gone, a zombie, or already exiting).

    A SIGKILLed worker can stay a few seconds in the exiting state on a loaded 2-core VM while
    the kernel tears down its address space; it runs no more user code, so it counts as gone.
    """
    try:
        with open(f"/proc/{pid}/status") as fh:
            text = fh.read()
        with open(f"/proc/{pid}/stat") as fh:
            stat_fields = fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    if fields.get("State", "").strip().startswith(("Z", "X")):
        return None
    if int(stat_fields[6]) & PF_EXITING:
        return None
    return {"uid": int(fields["Uid"].split()[0]), "ppid": int(fields["PPid"].strip())}


def sandbox_processes(uid_min: int = SANDBOX_UID_MIN, uid_max: int = 2**31) -> dict[int, dict]:
    """Every live process whose real uid is in [uid_min, uid_max)."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = proc_info(int(name))
            if info is not None and uid_min <= info["uid"] < uid_max:
                out[int(name)] = info
    return out


def pid_alive(pid: int | None) -> bool:
    return pid is not None and proc_info(pid) is not None


def wait_until(predicate: Callable[[], bool], timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


class Probe:
    """Host-side helpers, handed to tests as the ``probe`` fixture (test modules do not import
    conftest)."""

    secret_env = SECRET_ENV
    secret_value = SECRET_VALUE
    uid_min = SANDBOX_UID_MIN
    proc_info = staticmethod(proc_info)
    sandbox_processes = staticmethod(sandbox_processes)
    pid_alive = staticmethod(pid_alive)
    wait_until = staticmethod(wait_until)


@pytest.fixture(scope="session")
def probe() -> type[Probe]:
    return Probe


def _with_secret_env(make):
    """Set the host secret env var before the pool (and its zygote) start."""
    previous = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = SECRET_VALUE
    return make(), previous


def _restore_env(previous: str | None) -> None:
    if previous is None:
        os.environ.pop(SECRET_ENV, None)
    else:
        os.environ[SECRET_ENV] = previous


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    """A started synchronous sandbox shared by a module (short timeouts keep the suite fast)."""
    sb, previous = _with_secret_env(
        lambda: Sandbox(SandboxConfig(timeout_s=5, max_sessions=16, spare_workers=2)))
    try:
        yield sb
    finally:
        sb.close()
        _restore_env(previous)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> SandboxPool:
    """A started async pool shared by a module; small max_sessions to exercise queueing."""
    previous = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = SECRET_VALUE
    p = SandboxPool(SandboxConfig(timeout_s=5, max_sessions=4, spare_workers=2, base_uid=63000))
    await p.start()
    try:
        yield p
    finally:
        await p.close()
        _restore_env(previous)
