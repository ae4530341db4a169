"""The event loop agentmath's commands run their coroutines on: uvloop when it is installed
(libuv's loop, the one vLLM and uvicorn run on; a core dependency on Linux and macOS), else
asyncio's own.

Why: the agent loop, the rollout engine, the evaluation harness and the sandbox's host spend
their time in the event loop's socket and timer machinery, which uvloop implements in C: the
sandbox's round trip is shorter and its many-session throughput higher on uvloop
(``benchmarks/sandbox.py --service``; docs/benchmarks.md has the figures).
``AGENTMATH_EVENT_LOOP=asyncio`` chooses asyncio's loop (to debug, or to rule the loop out);
``uvloop`` insists on uvloop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from agentmath.errors import ConfigError

__all__ = ["ENV", "choice", "loop_factory", "run"]

ENV = "AGENTMATH_EVENT_LOOP"
_T = TypeVar("_T")


def choice() -> str:
    """``AGENTMATH_EVENT_LOOP``: ``auto`` (the default: uvloop when installed), ``uvloop`` or
    ``asyncio``; any other value is a ConfigError naming it (the CLI checks it at start)."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "uvloop", "asyncio"):
        raise ConfigError(f"{ENV}={value!r}: choose auto, uvloop or asyncio")
    return value


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None for asyncio's loop, as :func:`choice` says."""
    chosen = choice()
    if chosen == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as exc:
        if chosen == "uvloop":
            raise ConfigError(f"{ENV}=uvloop but uvloop is not installed (pip install "
                              f"uvloop; it is a dependency of agentmath on Linux and macOS)"
                              ) from exc
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` chooses (the same semantics:
    a fresh loop, remaining tasks cancelled, async generators and the executor shut down)."""
    try:
        factory = loop_factory()
    except ConfigError:
        main.close()  # never to run: no "coroutine was never awaited" warning on top
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
