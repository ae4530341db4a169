"""A secure, fast, stateful Python sandbox for math agents.

Each session is its own OS process forked from a warm zygote (numpy, sympy, scipy, mpmath
preloaded), in an empty network namespace, under a read-only Landlock domain, a seccomp filter,
rlimits and an unprivileged uid. See ``docs/sandbox.md`` for the threat model.

Async::

    async with SandboxPool() as pool:
        async with pool.session() as s:
            await s.run("x = 2**10")
            print((await s.run("x + 1")).value)   # '1025'

Sync: :class:`Sandbox` has the same shape without ``await``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentmath.sandbox.client import SandboxClient, SandboxSession
    from agentmath.sandbox.pool import PROTECTIONS, SandboxPool, Session
    from agentmath.sandbox.result import ExecResult
    from agentmath.sandbox.sync import Sandbox, SyncSession

# Exports resolve lazily: the zygote imports agentmath.sandbox.zygote, and must not pay for
# (or depend on) the host side's pydantic/asyncio imports.
_EXPORTS = {"SandboxClient": "client", "SandboxSession": "client", "PROTECTIONS": "pool",
            "SandboxPool": "pool", "Session": "pool",
            "ExecResult": "result", "Sandbox": "sync", "SyncSession": "sync"}
__all__ = ["PROTECTIONS", "ExecResult", "Sandbox", "SandboxClient", "SandboxPool", "SandboxSession",
           "Session", "SyncSession"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'agentmath.sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentmath.sandbox.{_EXPORTS[name]}"), name)
