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

from agentmath.sandbox.pool import PROTECTIONS, SandboxPool, Session
from agentmath.sandbox.result import ExecResult
from agentmath.sandbox.sync import Sandbox, SyncSession

__all__ = ["PROTECTIONS", "ExecResult", "Sandbox", "SandboxPool", "Session", "SyncSession"]
