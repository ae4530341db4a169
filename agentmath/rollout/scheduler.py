"""Request-level scheduling of many episodes over one backend (a server, or a router over N).

:class:`RolloutEngine` runs groups of episodes (the G samples of a prompt) and hands each group
to its consumer the moment its last sample finishes:

* ``mode="async"`` (AgentMath's request-level scheduling): every episode advances on its own,
  generate -> tool -> generate, with no barrier between episodes; at most ``max_in_flight``
  episodes run at once and new ones are admitted as others finish, so a long episode never
  holds back a short one and the servers never wait for a batch.
* ``mode="sync"``: the baseline of TRL's tool loop and DeepMath: a batch of episodes advances
  in lockstep, one turn each with a barrier after every turn, and the batch's groups come out
  together when its last episode ends.

Partial rollout across RL iterations (segment budgets, parking, staleness) is
:class:`agentmath.rollout.partial.PartialRollout`, built on this engine.

The engine is plain asyncio, so the simulator (:mod:`agentmath.sim`) drives this
same code in virtual time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from agentmath.agent.episode import Episode
from agentmath.backends.base import Backend, PolicyVersioned, SamplingParams, StickyHomes
from agentmath.config import LoopConfig, RolloutConfig
from agentmath.formats.base import ToolFormat
from agentmath.rollout.admission import Admission
from agentmath.rollout.records import Group, GroupRequest, RolloutStats, Sample
from agentmath.sandbox.client import SandboxClient

log = logging.getLogger(__name__)

#: The sampling settings of one sample (so that each can have its own seed).
SamplingFn = Callable[[GroupRequest, int], SamplingParams]
#: Called with every sample as it finishes.
SampleHook = Callable[[Sample], Awaitable[None]]


@dataclass(slots=True)
class GroupState:
    """A group in progress: its live episodes by sample index and its finished samples."""

    request: GroupRequest
    episodes: dict[int, Episode] = field(default_factory=dict)
    restarts: dict[int, int] = field(default_factory=dict)
    group: Group = field(init=False)

    def __post_init__(self) -> None:
        self.group = Group(self.request)


class RolloutEngine:
    """Runs episodes of groups with a tool format, a backend and a shared sandbox client.

    ``sampling`` is either one :class:`SamplingParams` for every sample or a function of
    (request, sample index). ``chat`` runs native tool calling instead of a text format.
    """

    def __init__(self, backend: Backend, sandbox: SandboxClient | None, fmt: ToolFormat, *,
                 loop: LoopConfig | None = None, config: RolloutConfig | None = None,
                 sampling: SamplingParams | SamplingFn | None = None,
                 chat: bool = False) -> None:
        self.backend = backend
        self.sandbox = sandbox
        self.fmt = fmt
        self.loop = loop or LoopConfig()
        self.config = config or RolloutConfig()
        self._sampling = sampling or SamplingParams()
        self.chat = chat
        self.version = 0
        self.stats = RolloutStats()

    # --------------------------------------------------------------------------- episodes
    def sampling_for(self, request: GroupRequest, index: int) -> SamplingParams:
        if isinstance(self._sampling, SamplingParams):
            return self._sampling
        return self._sampling(request, index)

    def new_episode(self, state: GroupState, index: int,
                    sampling: SamplingParams | None = None) -> Episode:
        """A fresh episode for sample ``index`` of the group (also used to regenerate one);
        ``sampling`` overrides the engine's sampling for it."""
        request = state.request
        restarts = state.restarts.get(index, 0)
        episode_id = f"{request.group_id}#{index}" + (f"r{restarts}" if restarts else "")
        episode = Episode(request.task.problem, self.backend, self.fmt, self.sandbox, self.loop,
                          sampling or self.sampling_for(request, index), episode_id=episode_id,
                          group_id=request.group_id, chat=self.chat,
                          problem_id=request.task.id, sample_index=index)
        state.episodes[index] = episode
        return episode

    async def advance(self, episode: Episode, **segment: object) -> bool:
        """``episode.advance`` under the engine's policy version; an unexpected exception (a
        bug, never a model or sandbox failure) finishes the episode as an error instead of
        ending the run."""
        self.stats.segments += 1
        try:
            return await episode.advance(policy_version=self.version, **segment)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - one episode's bug is that episode's record
            log.debug("episode %s raised", episode.id, exc_info=True)
            traj = episode.trajectory
            traj.finish_reason = "error"
            traj.error = f"{type(exc).__name__} (unexpected, while running this sample): {exc}"
            episode.status = "finished"
            await episode.close()
            return True

    def collect(self, state: GroupState, index: int) -> Group | None:
        """Record a finished episode as a sample; the group once it is complete."""
        episode = state.episodes.pop(index)
        sticky = self.backend if isinstance(self.backend, StickyHomes) else None  # a router
        sample = Sample(state.request.group_id, index, episode.trajectory,
                        state.restarts.get(index, 0))
        state.group.samples.append(sample)
        self.stats.samples_done += 1
        self.stats.version_spans[len(sample.policy_versions)] += 1
        if not state.group.complete:
            if sticky is not None:
                sticky.forget(episode_id=episode.id)
            return None
        if sticky is not None:
            sticky.forget(episode_id=episode.id, group_id=state.request.group_id)
        state.group.samples.sort(key=lambda s: s.index)
        self.stats.groups_done += 1
        return state.group

    async def run_sample(self, request: GroupRequest, index: int,
                         sampling: SamplingParams | None = None) -> Sample:
        """One sample of ``request`` run to its end on its own (no admission gate): what a
        distributed worker does for each episode the driver places on it. ``sampling``
        overrides the engine's (the driver derives every sample's seed, so that where an
        episode runs does not change what it samples)."""
        state = GroupState(request)
        episode = self.new_episode(state, index, sampling)
        try:
            await self.advance(episode)
        except BaseException:  # cancelled: the episode's sandbox session must not leak
            await episode.close()
            raise
        self.collect(state, index)
        return state.group.samples[-1]

    def admission(self) -> Admission:
        """A gate bounding the episodes in flight (count, and context tokens if configured)."""
        return Admission(self.config.max_in_flight, self.config.max_in_flight_tokens)

    def set_policy_version(self, version: int) -> None:
        """New weights are live: later segments are sampled (and tagged) with ``version``;
        a backend that keeps prefix caches per version (the router) is told too."""
        self.version = version
        if isinstance(self.backend, PolicyVersioned):
            self.backend.set_policy_version(version)

    def use_model(self, name: str) -> None:
        """Requests from now on send ``name`` as the model (a LoRA adapter per version)."""
        from agentmath.backends import use_model

        use_model(self.backend, name)

    def set_budgets(self, loop: LoopConfig, rollout: RolloutConfig) -> None:
        """A stage's budgets: episodes started (or segments run) from now on use them."""
        self.loop, self.config = loop, rollout

    # --------------------------------------------------------------------------- streaming
    async def stream(self, requests: Iterable[GroupRequest],
                     on_sample: SampleHook | None = None) -> AsyncIterator[Group]:
        """Run every request's episodes; yield each group as soon as it is complete (async
        mode) or each lockstep batch's groups when the batch ends (sync mode). ``on_sample``
        is awaited for every sample the moment it finishes (an evaluator records it there,
        so a kill loses no finished sample); an exception from it ends the stream. Leaving
        the loop early cancels and closes whatever is still running."""
        if self.config.mode == "sync":
            async for group in self._stream_sync(requests, on_sample):
                yield group
            return
        async for group in self._stream_async(requests, on_sample):
            yield group

    async def _stream_async(self, requests: Iterable[GroupRequest],
                            on_sample: SampleHook | None) -> AsyncIterator[Group]:
        out: asyncio.Queue[Group | None] = asyncio.Queue()
        gate = self.admission()
        tasks: set[asyncio.Task[None]] = set()

        async def run_one(state: GroupState, index: int) -> None:
            episode = state.episodes[index]
            try:
                await self.advance(episode, before_turn=gate.before_turn)
            except BaseException:  # cancelled: the episode's sandbox session must not leak
                await episode.close()
                raise
            finally:
                await gate.release(episode)
            group = self.collect(state, index)
            if on_sample is not None:
                await on_sample(state.group.samples[-1] if group is None
                                else next(s for s in group.samples if s.index == index))
            if group is not None:
                out.put_nowait(group)

        async def feed() -> None:
            failure: Exception | None = None
            try:
                for request in requests:
                    state = GroupState(request)
                    if not request.sample_indices:
                        out.put_nowait(state.group)
                    for index in request.sample_indices:
                        await gate.acquire(self.new_episode(state, index))
                        task = asyncio.create_task(run_one(state, index))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
            except Exception as exc:  # noqa: BLE001 - a bad source: finish what started first
                failure = exc
            try:
                while tasks:
                    await asyncio.gather(*list(tasks))
            finally:
                out.put_nowait(None)
            if failure is not None:
                raise failure

        feeder = asyncio.create_task(feed())
        try:
            while (group := await out.get()) is not None:
                yield group
            await feeder  # re-raises a failure of the request iterator
        finally:
            await _cancel(feeder, *tasks)

    async def _stream_sync(self, requests: Iterable[GroupRequest],
                           on_sample: SampleHook | None) -> AsyncIterator[Group]:
        batch: list[GroupState] = []
        size = 0
        for request in requests:
            batch.append(GroupState(request))
            size += len(request.sample_indices)
            if size >= self.config.max_in_flight:
                for group in await self.run_lockstep(batch, on_sample):
                    yield group
                batch, size = [], 0
        if batch:
            for group in await self.run_lockstep(batch, on_sample):
                yield group

    async def run_lockstep(self, states: list[GroupState],
                           on_sample: SampleHook | None = None) -> list[Group]:
        """Run a batch to its end, one turn per episode between barriers; its groups."""
        groups = [s.group for s in states if not s.request.sample_indices]
        live: list[tuple[GroupState, int]] = []
        for state in states:
            for index in state.request.sample_indices:
                self.new_episode(state, index)
                live.append((state, index))
        try:
            while live:
                done = await asyncio.gather(*(self.advance(s.episodes[i], max_turns=1)
                                              for s, i in live))
                still: list[tuple[GroupState, int]] = []
                for (state, index), finished in zip(live, done, strict=True):
                    if not finished:
                        still.append((state, index))
                        continue
                    group = self.collect(state, index)
                    if on_sample is not None:
                        await on_sample(next(s for s in state.group.samples if s.index == index))
                    if group is not None:
                        groups.append(group)
                live = still
        finally:
            for state, index in live:
                await state.episodes[index].close()
        return groups


async def _cancel(*tasks: asyncio.Task[None]) -> None:
    """Cancel tasks and wait for them (episodes close their sessions as they unwind)."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
