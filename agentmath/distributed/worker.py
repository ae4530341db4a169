"""The rollout worker: runs whole episodes on one node of a Ray cluster.

A worker is a plain class made into an async Ray actor by the driver (``ray.remote`` at run
time, so this module does not import Ray). On its first call it builds what an episode needs
on its own node: the model client (any backend: the openai client of the model servers, or a
router over several), the sandbox (a local pool on the node, or the sandbox services) and a
:class:`~agentmath.rollout.scheduler.RolloutEngine` over them; each call then runs one sample
to its end with the sampling the driver chose, and returns the finished
:class:`~agentmath.rollout.records.Sample` (its trajectory holds every token and tool result;
``ray_node`` names the node it ran on).

Partial rollout (:mod:`agentmath.distributed.partial`) calls ``advance`` instead: one segment
of an episode under the segment budgets of a :class:`SegmentOrder`. An episode that parks
stays on this worker, its sandbox session open, until the driver sends its next segment here
(under the policy version of that step); what it has done goes back to the driver too (a
:class:`~agentmath.agent.episode.Progress`), so that another worker can continue it, replaying
its cells in a new session, when this one is gone. ``stop`` parks this iteration's running
segments at their next turn boundary (the batch is complete); ``release`` closes parked
episodes' sessions (and forgets them, when the driver regenerates, drops or gives them up).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentmath.backends.base import SamplingParams
from agentmath.backends.registry import BackendSettings
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.rollout.records import GroupRequest, Sample

if TYPE_CHECKING:
    from agentmath.agent.episode import Episode, Progress


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to run episodes, sent to every worker (picklable).

    ``backend`` names a backend of :mod:`agentmath.backends.registry` and ``settings`` are what
    the worker builds it from (the model, its servers, HTTP retries and timeout);
    ``sandbox_token_file`` is read on the worker's node (the token itself is never sent).
    ``restore_weights`` (an RL trainer's, picklable) is awaited with the policy version the
    worker's episodes run under and the server that came back (None: every server) when its
    client reaches a server again after it was lost, before its next request there. A
    restarted server runs the weights it was started from (the trainer, which sends no
    request itself, cannot see the restart)."""

    backend: str
    settings: BackendSettings
    format: str = "code_interpreter"
    loop: LoopConfig = field(default_factory=LoopConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    sandbox_url: list[str] | None = None
    sandbox_token_file: str | None = None
    chat: bool = False
    in_flight: int = 32  # episodes one worker runs at once (its actor's max_concurrency)
    restore_weights: Callable[[int, str | None], Awaitable[None]] | None = None


@dataclass(frozen=True)
class EpisodePolicy:
    """What the driver may change between calls (an RL trainer, between steps): the policy
    version segments are tagged with, the model name requests send (a LoRA adapter per
    version) and the episode budgets (a stage's). None keeps the worker spec's."""

    version: int = 0
    model: str | None = None
    loop: LoopConfig | None = None


@dataclass(frozen=True)
class SegmentOrder:
    """One segment of one episode, as the driver sends it: the episode (``key``, unique in
    the run; its group's request, sample index, sampling and restarts), the driver's
    iteration (a ``stop`` of that iteration parks it) and the segment budgets. ``progress``
    is set only when the episode was parked on another worker, now gone: it is continued
    here from what it had done."""

    key: str
    request: GroupRequest
    index: int
    sampling: SamplingParams
    iteration: int
    max_tokens: int | None = None
    max_tool_calls: int | None = None
    restarts: int = 0
    resume: bool = False  # it ran before: parked on this worker, or continued from progress
    interrupt_turns: bool = False  # a stop cuts the running model turn (RolloutConfig's)
    progress: Progress | None = None


@dataclass(frozen=True)
class SegmentOutcome:
    """A segment's end: the finished ``sample``, or the parked episode's ``progress`` (the
    driver keeps the latest, for a replay elsewhere and for the staleness bound)."""

    sample: Sample | None = None
    progress: Progress | None = None
    interrupted: bool = False  # parked with its running turn cut (RolloutConfig.interrupt_turns)


class RolloutWorker:
    """An async actor that runs episodes; one per slot of the cluster."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self._engine: Any = None
        self._stack = contextlib.AsyncExitStack()
        self._starting: asyncio.Lock | None = None
        self._model = spec.settings.model
        self._node_id = ""  # the Ray node this actor runs on (set by _start)
        self._parked: dict[str, Episode] = {}  # parked episodes by key, sessions open
        self._stops: dict[int, asyncio.Event] = {}  # by driver iteration

    async def _start(self) -> Any:
        """The worker's rollout engine, built on first use (once, even under concurrency)."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._engine is not None:
                return self._engine
            import ray

            from agentmath.backends.base import Reconnecting
            from agentmath.backends.registry import build_backend
            from agentmath.config import RolloutConfig
            from agentmath.formats import get_format
            from agentmath.rollout.scheduler import RolloutEngine
            from agentmath.sandbox.factory import open_sandbox

            self._node_id = ray.get_runtime_context().get_node_id()
            spec = self.spec
            sandbox = await self._stack.enter_async_context(
                open_sandbox(spec.sandbox, spec.sandbox_url, spec.sandbox_token_file))
            backend = build_backend(spec.backend, spec.settings)
            self._stack.push_async_callback(backend.aclose)  # part of the Backend protocol
            # each server, before its first request after it was lost (maybe restarted)
            if spec.restore_weights is not None and isinstance(backend, Reconnecting):
                backend.on_reconnect(self._restore_weights)
            self._engine = RolloutEngine(backend, sandbox, get_format(spec.format),
                                         loop=spec.loop, chat=spec.chat,
                                         config=RolloutConfig(max_in_flight=spec.in_flight))
            return self._engine

    async def _restore_weights(self, server: str | None = None) -> None:
        """The client's reconnect hook: the current version's weights into ``server`` (None:
        every server)."""
        if self.spec.restore_weights is not None and self._engine is not None:
            await self.spec.restore_weights(self._engine.version, server)

    async def ready(self) -> dict[str, Any]:
        """Start (model client, sandbox) and say where this worker runs."""
        await self._start()
        return {"node_id": self._node_id, "pid": os.getpid()}

    async def run(self, request: GroupRequest, index: int, sampling: SamplingParams,
                  policy: EpisodePolicy | None = None) -> Sample:
        """Sample ``index`` of ``request`` run to its end with ``sampling`` under ``policy``
        (the driver sends the same policy to every episode in flight, so setting it on the
        shared engine is safe)."""
        engine = await self._start()
        self._apply(engine, policy or EpisodePolicy())
        sample = await engine.run_sample(request, index, sampling)
        # where it ran: for the user reading a cluster run's samples (and a test that must
        # remove a node known to be running episodes)
        sample.trajectory.ray_node = self._node_id
        return sample

    async def advance(self, order: SegmentOrder, policy: EpisodePolicy) -> SegmentOutcome:
        """One segment of ``order``'s episode under ``policy``: the episode parked here, or
        one continued from ``order.progress``, or a new one."""
        engine = await self._start()
        self._apply(engine, policy)
        episode = self._parked.pop(order.key, None) or self._episode(engine, order)
        try:
            finished = await engine.advance(
                episode, max_tokens=order.max_tokens, max_tool_calls=order.max_tool_calls,
                stop=self._stop_event(order.iteration), interrupt_turns=order.interrupt_turns)
        except BaseException:  # cancelled: the episode's sandbox session must not leak
            await episode.close()
            raise
        if not finished:
            self._parked[order.key] = episode
            await self._spare_sessions(engine)
            return SegmentOutcome(progress=episode.progress(), interrupted=episode.interrupted)
        sample = Sample(order.request.group_id, order.index, episode.trajectory, order.restarts)
        sample.trajectory.ray_node = self._node_id
        return SegmentOutcome(sample=sample)

    async def _spare_sessions(self, engine: Any) -> None:
        """Parked episodes here keep their sessions only while the sandbox can spare them
        (:func:`~agentmath.rollout.partial.parked_session_bound`, with this worker's
        ``in_flight``): beyond, the oldest close theirs (replayed when they resume), so that
        they never hold every session a running episode waits for. The driver's
        ``max_parked_sessions`` bounds them across the cluster."""
        from agentmath.rollout.rules import parked_session_bound

        holding = [e for e in self._parked.values() if e.session is not None]
        bound = parked_session_bound(len(holding), engine.sandbox, self.spec.in_flight)
        for episode in holding[:len(holding) - bound]:
            await episode.close()

    def _episode(self, engine: Any, order: SegmentOrder) -> Episode:
        """A new episode for ``order`` (the id the local engine gives it), continuing
        ``order.progress`` when set. A resumed episode that is neither parked here nor comes
        with its progress is an error (never silently a new episode: that is a restart)."""
        from agentmath.rollout.scheduler import GroupState

        if order.resume and order.progress is None:
            raise LookupError(f"episode {order.key} is not parked on this worker")

        state = GroupState(order.request, restarts={order.index: order.restarts})
        episode: Episode = engine.new_episode(state, order.index, order.sampling)
        if order.progress is not None:
            episode.restore(order.progress)
        return episode

    def _stop_event(self, iteration: int) -> asyncio.Event:
        """The event that parks iteration ``iteration``'s segments (older ones forgotten)."""
        if iteration not in self._stops:
            for old in [i for i in self._stops if i < iteration - 1]:
                del self._stops[old]
            self._stops[iteration] = asyncio.Event()
        return self._stops[iteration]

    async def stop(self, iteration: int) -> None:
        """The driver's batch is complete: iteration ``iteration``'s running segments park at
        their next turn boundary, and those not started yet park at once."""
        self._stop_event(iteration).set()

    async def release(self, keys: list[str], forget: bool) -> None:
        """Close the sessions of the parked episodes ``keys`` (their cells are replayed if
        they resume here); ``forget`` also drops them (regenerated, dropped, given up)."""
        for key in keys:
            episode = self._parked.pop(key, None) if forget else self._parked.get(key)
            if episode is not None:
                await episode.close()

    def _apply(self, engine: Any, policy: EpisodePolicy) -> None:
        if engine.version != policy.version:
            engine.set_policy_version(policy.version)
        engine.loop = policy.loop or self.spec.loop
        if policy.model is not None and policy.model != self._model:
            from agentmath.backends import use_model

            use_model(engine.backend, policy.model)
            self._model = policy.model

    async def close(self) -> None:
        """Close the parked episodes' sessions, the sandbox and the model client (the driver
        kills the actor after)."""
        parked, self._parked = list(self._parked.values()), {}
        for episode in parked:
            await episode.close()
        await self._stack.aclose()
        self._engine = None
