"""A synchronous face for the sandbox, for scripts, notebooks and threads.

It runs a :class:`SandboxPool` on a private event loop in a daemon thread and forwards calls to
it, so the sync and async APIs share one implementation (and its timeouts, which never use
signals and so work from any thread).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from agentmath.config import SandboxConfig
from agentmath.sandbox.pool import SandboxPool, Session
from agentmath.sandbox.result import ExecResult

T = TypeVar("T")


class Sandbox:
    """Synchronous sandbox pool: ``with Sandbox() as sb: sb.session().run("1+1")``."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentmath-sandbox",
                                        daemon=True)
        self._thread.start()
        self.pool: SandboxPool = self._call(self._make_pool(config))
        self._call(self.pool.start())

    @staticmethod
    async def _make_pool(config: SandboxConfig | None) -> SandboxPool:
        return SandboxPool(config)  # created on the loop's thread: its primitives bind there

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def protections(self) -> dict[str, bool]:
        """Which kernel protections are active (see :data:`PROTECTIONS`)."""
        return dict(self.pool.protections)

    @property
    def notes(self) -> list[str]:
        """Human-readable notes on how each protection was (or was not) applied."""
        return list(self.pool.notes)

    @property
    def preload_errors(self) -> dict[str, str]:
        """The preloaded modules that failed to import in the zygote, with the error."""
        return dict(self.pool.preload_errors)

    def session(self) -> SyncSession:
        """A new stateful session."""
        return SyncSession(self, self.pool.session())

    def run(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run one snippet in a throwaway session."""
        return self._call(self.pool.run(code, timeout))

    def close(self) -> None:
        """Stop every worker and the zygote, then the loop thread. Idempotent."""
        if self._loop.is_closed():
            return
        self._call(self.pool.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncSession:
    """Synchronous view of a :class:`Session`."""

    def __init__(self, sandbox: Sandbox, session: Session) -> None:
        self._sandbox = sandbox
        self.session = session

    def run(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run one snippet in this session (state persists across calls)."""
        return self._sandbox._call(self.session.run(code, timeout))

    def restart(self) -> None:
        """Discard this session's state."""
        self._sandbox._call(self.session.restart())

    def close(self) -> None:
        """Free the session's worker."""
        self._sandbox._call(self.session.close())

    def __enter__(self) -> SyncSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
