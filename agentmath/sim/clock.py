"""Virtual time for asyncio: an event loop whose clock is a simpy environment's ``env.now``.

Why: the rollout scheduler and router are plain asyncio code (``await backend.generate``,
``asyncio.sleep``, ``loop.call_later``, ``asyncio.wait_for``). To measure them at paper scale
(thousands of episodes, hours of GPU time) without GPUs, the *same* code must run against
simulated servers and a simulated sandbox, in simulated time. simpy is the discrete-event
engine of the simulated side; this module makes asyncio's clock *be* simpy's clock, so both
sides share one timeline and nothing waits in real time.

How (the approach of the ``looptime`` package, reduced to what we need):

* :class:`SimEventLoop` subclasses :class:`asyncio.SelectorEventLoop`; ``time()`` returns
  ``env.now``, so every asyncio timer is a point on simpy's timeline.
* Its selector is wrapped (:class:`_SimSelector`). asyncio calls ``select(timeout)`` when it
  has no ready callbacks and its next timer is ``timeout`` seconds away (``None``: no timer).
  The wrapper first polls the real selector with timeout 0 (real I/O still works); if nothing
  is ready it *advances simpy* instead of sleeping: it processes simpy events one by one up to
  ``now + timeout`` and stops early as soon as a simpy callback has made asyncio work ready
  (resolved a future). If no simpy event is due before the target, the clock jumps to it.
* When asyncio has no timer, simpy has no event and no executor work is pending, nothing can
  ever happen again: :class:`SimulationDeadlock` is raised instead of hanging.
* simpy hands results to asyncio by resolving futures from simpy callbacks
  (:func:`wait_event`); both run on the one thread, inside the wrapped ``select``.

Work done in executor threads (``run_in_executor``, ``asyncio.to_thread``) takes zero virtual
time: while such work is pending the loop waits for it in real time before advancing the clock.
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import simpy

__all__ = ["SimEventLoop", "SimulationDeadlock", "current_env", "run_simulated", "wait_event"]

T = TypeVar("T")


class SimulationDeadlock(RuntimeError):
    """asyncio waits for something no timer, simpy event or executor job will ever bring."""


class _SimSelector(selectors.BaseSelector):
    """A real selector whose blocking ``select`` advances simulated time instead of waiting."""

    def __init__(self, real: selectors.BaseSelector, env: simpy.Environment) -> None:
        self.real = real
        self.env = env
        self.loop: SimEventLoop | None = None  # set once the loop exists

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self.real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.real.modify(fileobj, events, data)

    def get_map(self) -> Any:
        return self.real.get_map()

    def close(self) -> None:
        self.real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self.real.select(0)
        if events or timeout == 0:
            return events
        loop = self.loop
        if loop is not None and loop.executor_jobs:
            # Threads run in zero virtual time: wait for them (really) before time moves on.
            return self.real.select(None)
        self._advance(timeout)
        return []

    def _advance(self, timeout: float | None) -> None:
        """Process simpy events up to ``now + timeout`` (``None``: up to the next one), stopping
        as soon as asyncio has work; jump the clock to the target when no event comes first."""
        env = self.env
        target = math.inf if timeout is None else env.now + timeout
        ready = self.loop._ready if self.loop is not None else ()  # noqa: SLF001
        stepped = False
        while True:
            nxt = env.peek()
            if nxt > target or math.isinf(nxt):
                break
            env.step()
            stepped = True
            if ready:
                return
        if math.isinf(target):
            if not stepped:
                raise SimulationDeadlock(
                    f"deadlock at simulated time {env.now:.6f}: asyncio is waiting (no ready "
                    "callback, no timer) and simpy has no scheduled event, so nothing can "
                    "resolve what it waits for")
            return
        if target > env.now:
            env.run(until=target)  # no event before target: only moves the clock


class SimEventLoop(asyncio.SelectorEventLoop):
    """An asyncio loop in simulated time: ``time()`` is ``env.now`` (see the module doc)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.executor_jobs = 0  # run_in_executor calls not finished yet
        selector = _SimSelector(selectors.DefaultSelector(), env)
        super().__init__(selector)
        selector.loop = self

    def time(self) -> float:
        return float(self.env.now)

    def run_in_executor(self, executor: Any, func: Callable[..., T],
                        *args: Any) -> asyncio.Future[T]:
        fut = super().run_in_executor(executor, func, *args)
        self.executor_jobs += 1

        def done(_: asyncio.Future[T]) -> None:
            self.executor_jobs -= 1

        fut.add_done_callback(done)
        return fut

    async def shutdown_default_executor(self, *args: Any) -> None:
        # Its joining thread wakes the loop from outside: real work, like run_in_executor.
        self.executor_jobs += 1
        try:
            await super().shutdown_default_executor(*args)
        finally:
            self.executor_jobs -= 1


def current_env() -> simpy.Environment:
    """The simpy environment of the running :class:`SimEventLoop` (RuntimeError outside one)."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, SimEventLoop):
        raise RuntimeError("not running in simulated time: drive the coroutine with "
                           "agentmath.sim.run_simulated(main, env)")
    return loop.env


def wait_event(event: simpy.events.Event) -> asyncio.Future[Any]:
    """An asyncio future resolved (with the event's value or exception) when the simpy
    ``event`` is processed. Call it from inside the simulated loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def resolve(ev: simpy.events.Event) -> None:
        if fut.done():  # the awaiting task was cancelled meanwhile
            return
        if ev.ok:
            fut.set_result(ev.value)
        else:
            ev.defused = True
            fut.set_exception(ev.value)

    if event.processed:
        resolve(event)
    else:
        event.callbacks.append(resolve)
    return fut


def run_simulated(main: Callable[[], Awaitable[T]] | Coroutine[Any, Any, T],
                  env: simpy.Environment | None = None, *, debug: bool = False) -> T:
    """Run ``main()`` (a coroutine function, or a coroutine) to completion in simulated time on
    ``env`` (a new environment when None) and return its result.

    Inside, ``asyncio.get_running_loop().time()`` is ``env.now``; ``asyncio.sleep(3600)``
    returns at once in wall time with ``env.now`` 3600 s later. Simulated servers and sandboxes
    built on the same ``env`` advance with it. Raises :class:`SimulationDeadlock` when the
    coroutine waits for something that can never happen.
    """
    env = env if env is not None else simpy.Environment()
    coro = main if asyncio.iscoroutine(main) else main()  # type: ignore[operator]
    with asyncio.Runner(debug=debug, loop_factory=lambda: SimEventLoop(env)) as runner:
        return runner.run(coro)  # type: ignore[arg-type]
