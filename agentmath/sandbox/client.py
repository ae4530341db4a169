"""The sandbox as the agent loop and the rollout engine see it: a small client interface.

Anything with these two shapes can run an episode's code: the local :class:`SandboxPool`
(worker processes on this host), a remote sandbox service, or a test fake. One client is
shared by every episode of a run; each episode opens its own session, whose variables persist
from one snippet to the next, and closes it when the episode ends.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentmath.sandbox.result import ExecResult


@runtime_checkable
class SandboxSession(Protocol):
    """One episode's stateful interpreter."""

    async def run(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run one snippet; errors in the code, timeouts and crashes are reported in the
        result (``state_lost`` when the session's earlier state is gone), never raised.
        Raises :class:`~agentmath.errors.SandboxError` only when the sandbox itself fails."""
        ...

    async def alive(self) -> bool:
        """False when the session's state is known to be gone (its process died, the service
        expired it): the caller then rebuilds it by replaying its cells in a new session."""
        ...

    async def close(self) -> None:
        """Release the session (idempotent)."""
        ...


@runtime_checkable
class SandboxClient(Protocol):
    """A source of sessions (the local pool, a remote service, a fake)."""

    def session(self) -> SandboxSession:
        """A new session; resources are taken on its first run."""
        ...


@runtime_checkable
class SessionLimited(Protocol):
    """A client that holds at most ``max_sessions`` live sessions at once (the local pool),
    a session's first snippet waiting for a free one; None: no bound known. Partial rollout
    reads it so that parked episodes never hold every session a running one waits for."""

    @property
    def max_sessions(self) -> int | None: ...
