"""Partial rollout on a Ray cluster: episodes cut into segments, parked on their workers
between RL iterations.

The rules are the local engine's (:class:`~agentmath.rollout.partial.PartialRollout`), run
where the episodes live:

* each iteration resumes the parked episodes first, then draws new groups (all it can place
  under ``max_in_flight`` with ``segment_tokens``, up to the draw bound of
  :func:`~agentmath.rollout.partial.may_draw`; exactly the groups it needs without); every
  segment runs at most ``segment_tokens`` model tokens and ``segment_tool_calls`` snippets;
  an iteration at its draw bound with its batch short ends with what is complete;
* with ``segment_tokens``, once the batch's groups are complete the workers are told to
  ``stop``: running segments park at their next turn boundary, segments not started park at
  once, and groups finished beyond the batch are held for the next iteration
  (:func:`~agentmath.rollout.partial.take_batch`);
* a parked episode resumed under a policy version it lags by more than ``max_staleness``
  (:func:`~agentmath.rollout.partial.is_stale`) is regenerated from scratch with the sampling
  of the current step, or its whole group is dropped; either is counted and logged.

Where: a parked episode stays on its worker with its sandbox session open, and its next
segment goes to that worker (waiting for room there), under the new policy version. Every
parked segment also sends back what the episode has done
(:class:`~agentmath.agent.episode.Progress`); when its worker or node is gone, the segment is
placed on another worker with that progress, and the episode continues there: its context
re-prefilled by the next model call, its cells replayed in a new sandbox session before its
next snippet, so that it samples what it would have sampled at home. Seeds are the driver's
(drawn when an episode starts, as the local engine does), so a run gives the local engine's
samples wherever its episodes ran. A segment lost ``max_attempts`` times is an error sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentmath.agent.episode import Progress
from agentmath.backends.base import SamplingParams
from agentmath.distributed.cluster import import_ray
from agentmath.distributed.engine import RayRolloutEngine, Slot, await_ref, failed_sample
from agentmath.distributed.worker import SegmentOrder, SegmentOutcome
from agentmath.rollout.records import Group, GroupRequest, PendingGroup, Sample
from agentmath.rollout.rules import is_stale, may_draw, note_draw_bound, take_batch

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Group:
    """A group in progress on the driver (``serial``: its draw number in this run)."""

    request: GroupRequest
    serial: int
    group: Group = field(init=False)
    restarts: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.group = Group(self.request)


@dataclass(eq=False)
class _Episode:
    """One episode as the driver follows it across segments and workers."""

    owner: _Group
    index: int
    sampling: SamplingParams
    home: Slot | None = None  # the worker it is parked on, its session open there
    progress: Progress | None = None  # what it had done at its last park
    errors: list[str] = field(default_factory=list)  # failed placements of this episode

    @property
    def key(self) -> str:
        restarts = self.owner.restarts.get(self.index, 0)
        return (f"{self.owner.serial}:{self.owner.request.group_id}#{self.index}"
                + (f"r{restarts}" if restarts else ""))


class SegmentedIterations:
    """The partial-rollout iterations of :class:`~agentmath.distributed.iterations
    .RayIterations` (see the module docstring); ``draw`` gives the next request or None."""

    def __init__(self, engine: RayRolloutEngine,
                 draw: Callable[[], GroupRequest | None]) -> None:
        self.engine = engine
        self._draw = draw
        self._parked: list[_Episode] = []
        self._ready: list[Group] = []
        self._iteration = 0
        self._serial = 0

    @property
    def parked(self) -> int:
        return len(self._parked)

    @property
    def holding(self) -> bool:
        """Whether episodes are parked or finished groups held for the next iteration."""
        return bool(self._parked or self._ready)

    def pending_groups(self) -> list[PendingGroup]:
        """Held groups, then the parked groups, once each, by draw position (their episodes
        are not kept: a resumed run runs them again from scratch)."""
        requests = [g.request for g in self._ready]
        for episode in self._parked:
            if all(r is not episode.owner.request for r in requests):
                requests.append(episode.owner.request)
        return [PendingGroup(r.position, r.task.id) for r in requests]

    async def iteration(self, batch_groups: int) -> list[Group]:
        """The batch of ``batch_groups`` groups (fewer once the requests run out)."""
        need = batch_groups - len(self._ready)
        new = await self._run(need) if need > 0 else []
        batch, self._ready = take_batch(self._ready, new, batch_groups)
        return batch

    async def aclose(self) -> None:
        """Forget the parked episodes on their workers (their sessions closed)."""
        parked, self._parked = self._parked, []
        await self._release(parked, forget=True)

    # ------------------------------------------------------------------------------ one run
    async def _run(self, need: int) -> list[Group]:
        engine, rollout = self.engine, self.engine.rollout
        self._iteration += 1
        run = _Run(need, partial=rollout.segment_tokens is not None)
        todo: deque[_Episode] = deque(await self._resumable())
        engine.stats.resumed += len(todo)
        running: dict[asyncio.Future[Any], tuple[Slot, _Episode]] = {}
        try:
            while True:
                self._fill(run, todo, running)
                if not running:
                    if not todo or run.stopped:
                        break
                    await engine.wait_ready()
                    continue
                done = await engine.wait_any(running, placeable=bool(todo) and not run.stopped
                                             and len(running) < engine.max_in_flight)
                for fut in done:
                    slot, episode = running.pop(fut)
                    slot.inflight -= 1
                    self._settle(run, fut, slot, episode, todo)
        except BaseException:
            for fut in running:
                fut.cancel()
            await self._release(run.parked + list(todo), forget=True)
            raise
        finally:
            await _quietly(run.stops)
        self._parked = run.parked
        if run.bounded and len(run.ready) < run.need:
            note_draw_bound(engine.stats, run.need, len(run.ready), len(run.drawn),
                            len(run.parked))
        await self._limit_parked_sessions()
        if not run.partial:  # every group drawn, in draw order (as the local engine)
            run.ready.sort(key=lambda g: run.drawn.get(id(g.request), -1))
        return run.ready

    def _fill(self, run: _Run, todo: deque[_Episode],
              running: dict[asyncio.Future[Any], tuple[Slot, _Episode]]) -> None:
        """Place segments while the cluster has room: parked ones first, then new groups."""
        engine = self.engine
        while len(running) < engine.max_in_flight:
            if run.stopped:  # not started: parked as they are (kept on their workers)
                run.parked.extend(todo)
                todo.clear()
                return
            if not todo and self._may_draw(run):
                self._draw_group(run, todo)
                continue
            placed = self._pick(todo, run)
            if placed is None:
                return
            slot, episode = placed
            running[self._submit(slot, episode)] = (slot, episode)
            run.homes[episode.owner.serial] = slot

    def _may_draw(self, run: _Run) -> bool:
        """Whether the iteration draws another group (the local engine's rule)."""
        if run.exhausted or run.bounded:
            return False
        if not run.partial:
            return len(run.drawn) < run.need
        run.bounded = not may_draw(self.engine.rollout, run.need, len(run.drawn), run.episodes)
        return not run.bounded

    def _draw_group(self, run: _Run, todo: deque[_Episode]) -> None:
        request = self._draw()
        if request is None:
            run.exhausted = True
            return
        run.drawn[id(request)] = len(run.drawn)
        run.episodes += len(request.sample_indices)
        self._serial += 1
        owner = _Group(request, self._serial)
        if not request.sample_indices:
            run.ready.append(owner.group)
        for index in request.sample_indices:  # seeds drawn now, as the local engine's
            todo.append(_Episode(owner, index, self.engine.sampling(request, index)))

    def _pick(self, todo: deque[_Episode], run: _Run) -> tuple[Slot, _Episode] | None:
        """The first episode that can be placed now, and where: a parked one on its worker
        (waiting while that one is full), else its group's worker, else the least loaded."""
        cap = self.engine.spec.in_flight
        free = [s for s in self.engine.usable() if s.inflight < cap]
        for position, episode in enumerate(todo):
            home = episode.home
            if home is not None and home.dead:
                episode.home = home = None  # gone with its worker: continued elsewhere
            if home is not None:
                slot: Slot | None = home if home.inflight < cap else None
            else:
                group_home = run.homes.get(episode.owner.serial)
                slot = (group_home if group_home in free
                        else min(free, key=lambda s: s.inflight) if free else None)
            if slot is not None:
                del todo[position]
                return slot, episode
        return None

    def _submit(self, slot: Slot, episode: _Episode) -> asyncio.Future[Any]:
        engine, rollout = self.engine, self.engine.rollout
        moved = episode.progress is not None and episode.home is not slot
        if moved:
            log.info("episode %s continues on another worker (its cells replayed)", episode.key)
        order = SegmentOrder(
            episode.key, episode.owner.request, episode.index, episode.sampling,
            self._iteration, rollout.segment_tokens, rollout.segment_tool_calls,
            episode.owner.restarts.get(episode.index, 0), resume=episode.progress is not None,
            progress=episode.progress if moved else None,
            interrupt_turns=rollout.segment_tokens is not None and rollout.interrupt_turns)
        slot.inflight += 1
        engine.stats.segments += 1
        return asyncio.ensure_future(await_ref(slot.actor.advance.remote(order, engine.policy)))

    def _settle(self, run: _Run, fut: asyncio.Future[Any], slot: Slot, episode: _Episode,
                todo: deque[_Episode]) -> None:
        """A segment's end: parked, finished, or lost with its worker (placed again)."""
        engine = self.engine
        exc = fut.exception()
        if exc is not None:
            if not isinstance(exc, import_ray().exceptions.RayError):
                raise exc
            episode.errors.append(f"{type(exc).__name__}: {str(exc)[:500]}")
            log.warning("episode %s lost its worker (attempt %d): %s", episode.key,
                        len(episode.errors), episode.errors[-1])
            engine.lose(slot)
            episode.home = None
            if len(episode.errors) < engine.config.max_attempts:
                todo.appendleft(episode)
                return
            sample = failed_sample(episode.owner.request, episode.index, episode.errors,
                                   episode.owner.restarts.get(episode.index, 0))
        else:
            outcome: SegmentOutcome = fut.result()
            if outcome.sample is None:
                episode.home, episode.progress = slot, outcome.progress
                run.parked.append(episode)
                engine.stats.parked += 1
                engine.stats.interrupted += outcome.interrupted
                self._over_parked_bound(run)
                return
            sample = outcome.sample
        self._finished(run, episode.owner, sample)

    def _finished(self, run: _Run, owner: _Group, sample: Sample) -> None:
        stats, group = self.engine.stats, owner.group
        group.samples.append(sample)
        stats.samples_done += 1
        stats.version_spans[len(sample.policy_versions)] += 1
        if not group.complete:
            return
        group.samples.sort(key=lambda s: s.index)
        stats.groups_done += 1
        run.ready.append(group)
        if run.partial and len(run.ready) >= run.need and not run.stopped:
            run.stopped = True
            run.stops = [asyncio.ensure_future(await_ref(s.actor.stop.remote(self._iteration)))
                         for s in self.engine.usable()]

    # ------------------------------------------------------------------------------ staleness
    async def _resumable(self) -> list[_Episode]:
        """The parked episodes to continue: stale ones regenerated or their groups dropped."""
        engine, rollout = self.engine, self.engine.rollout
        slots, self._parked = self._parked, []
        dropped: set[int] = set()
        out: list[_Episode] = []
        for episode in slots:
            owner = episode.owner
            if owner.serial in dropped:
                continue
            versions = episode.progress.trajectory.policy_versions if episode.progress else []
            if not is_stale(versions, engine.version, rollout.max_staleness):
                out.append(episode)
                continue
            if rollout.stale == "drop":
                dropped.add(owner.serial)
                await self._drop(owner, [e for e in slots if e.owner is owner])
                continue
            used = episode.progress.model_used if episode.progress else 0
            engine.stats.regenerated += 1
            engine.stats.wasted_tokens += used
            log.info("sample %s is stale (versions %s, now %d): regenerated", episode.key,
                     versions, engine.version)
            await self._release([episode], forget=True)
            episode.progress = None  # thrown away (and counted): a drop counts it no more
            owner.restarts[episode.index] = owner.restarts.get(episode.index, 0) + 1
            out.append(_Episode(owner, episode.index,
                                engine.sampling(owner.request, episode.index)))
        return [e for e in out if e.owner.serial not in dropped]

    async def _drop(self, owner: _Group, parked: list[_Episode]) -> None:
        stats = self.engine.stats
        stats.dropped_groups += 1
        stats.dropped_ids.append(owner.request.group_id)
        wasted = sum(s.trajectory.model_tokens for s in owner.group.samples)
        wasted += sum(e.progress.model_used for e in parked if e.progress is not None)
        stats.wasted_tokens += wasted
        await self._release(parked, forget=True)
        log.info("group %s dropped: a sample lagged more than %d policy versions (%d tokens "
                 "thrown away)", owner.request.group_id, self.engine.rollout.max_staleness,
                 wasted)

    def _over_parked_bound(self, run: _Run) -> None:
        """An episode just parked: the one it pushes past ``max_parked_sessions`` closes its
        session on its worker now (awaited with the stops), not at the iteration's end, so
        that parked episodes never hold the session slots running ones wait for."""
        beyond = len(run.parked) - self.engine.rollout.max_parked_sessions
        if beyond <= 0:
            return
        episode = run.parked[beyond - 1]
        if episode.home is not None and not episode.home.dead:
            run.stops.append(asyncio.ensure_future(await_ref(
                episode.home.actor.release.remote([episode.key], False))))

    async def _limit_parked_sessions(self) -> None:
        """Beyond ``max_parked_sessions``, the oldest parked episodes close their sessions
        on their workers (their cells are replayed when they resume)."""
        extra = len(self._parked) - self.engine.rollout.max_parked_sessions
        await self._release(self._parked[:max(0, extra)], forget=False)

    async def _release(self, episodes: list[_Episode], *, forget: bool) -> None:
        """Close (and with ``forget``, drop) parked episodes on their live workers."""
        by_slot: dict[Slot, list[str]] = {}
        for episode in episodes:
            if episode.home is not None and not episode.home.dead:
                by_slot.setdefault(episode.home, []).append(episode.key)
            if forget:
                episode.home = None
        await _quietly([asyncio.ensure_future(await_ref(slot.actor.release.remote(keys, forget)))
                        for slot, keys in by_slot.items()])


@dataclass(eq=False)
class _Run:
    """One iteration's state: what it needs, what it drew, finished and parked."""

    need: int
    partial: bool
    ready: list[Group] = field(default_factory=list)
    parked: list[_Episode] = field(default_factory=list)
    drawn: dict[int, int] = field(default_factory=dict)  # id(request) -> draw order
    homes: dict[int, Slot] = field(default_factory=dict)  # group serial -> its worker
    stops: list[asyncio.Future[Any]] = field(default_factory=list)
    stopped: bool = False
    exhausted: bool = False
    episodes: int = 0  # episodes of the groups drawn
    bounded: bool = False  # reached its draw bound (RolloutConfig.max_new_groups)


async def _quietly(futures: list[asyncio.Future[Any]], timeout: float = 30.0) -> None:
    """Wait for best-effort calls (a stop, a release) without raising: a worker that is gone
    has nothing left to stop or close."""
    if futures:
        with contextlib.suppress(Exception):  # noqa: BLE001
            await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout)
