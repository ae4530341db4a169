"""RL iterations on the rollout engine, with partial rollout and a staleness bound.

An RL step needs a batch of complete groups. Three ways to get one, as in AgentMath's table:

* sync (``mode="sync"``): B new groups in lockstep (a barrier per turn), all to the end;
* async (``mode="async"``, no segment budget): B new groups, request-level, all to the end
  (only the iteration itself is a barrier, so its longest episode still sets its length);
* partial (``segment_tokens`` set; Kimi k1.5, AgentMath): each episode may generate at most
  ``segment_tokens`` (and ``segment_tool_calls``) per iteration; more groups are admitted
  than the batch needs, and as soon as B groups are complete the iteration ends: running
  episodes park at their next turn boundary (or at once, their running turn cut, with
  ``interrupt_turns`` and an interruptible backend), episodes out of budget park at once, and all of
  them continue in the next iteration under the new weights, their sandbox sessions kept.
  Groups finished beyond B are carried into the next iteration's batch. An iteration draws
  at most ``max_new_groups`` new groups (:func:`may_draw`): one whose episodes all outlast a
  segment completes no group, and would otherwise draw and park without end until the
  sandbox ran out of sessions; at the bound it ends short (counted and logged) with what is
  complete. Beyond ``max_parked_sessions`` (lowered to what the sandbox can spare:
  :func:`parked_session_bound`), episodes parked during an iteration release their sessions
  at once (their cells replayed when they resume).

Staleness: when a parked sample is resumed under policy version v and its oldest model segment
is older than ``v - max_staleness``, it is stale: regenerated from scratch (``stale =
"regenerate"``) or its whole group is dropped (``"drop"``). A finished group held back for the
next iteration is checked the same way (under ``"regenerate"`` its stale samples run again).
With ``stale = "wait"`` no parked sample goes stale: the episodes of a group whose oldest
segment is ``max_staleness`` versions old run to their end in this iteration instead of
parking (the iteration waits for them, counted ``stale_waited``), the batch takes the groups
that would be stale in the next iteration first, and an iteration draws no more new groups
than its batch still needs (pacing: the groups one iteration begins are at most a batch, so
those due together fit one); a held group that is stale anyway is dropped. Each case is
counted in the stats, with the tokens thrown away, and logged.

Resume: :meth:`PartialRollout.pending_groups` is what a checkpoint keeps of the groups drawn
and not yet handed out (their finished samples and each parked episode's
:class:`~agentmath.agent.episode.Progress`), and :meth:`PartialRollout.restore` puts one back
after a resume: its parked episodes continue (their cells replayed in a new sandbox session).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from agentmath.rollout.records import Group, GroupRequest, PendingGroup, RolloutStats, Sample
from agentmath.rollout.rules import (
    RequestDraws,
    is_stale,
    may_draw,
    note_draw_bound,
    oldest_version,
    parked_session_bound,
    take_batch,
)
from agentmath.rollout.scheduler import GroupState, RolloutEngine, _cancel
from agentmath.sandbox.client import SessionLimited

log = logging.getLogger(__name__)

Slot = tuple[GroupState, int]


@dataclass(slots=True)
class IterationResult:
    """One iteration's batch, the policy version it ran under, and its counters."""

    version: int
    groups: list[Group]
    stats: RolloutStats
    exhausted: bool  # no request left and nothing parked: the run is over


class PartialRollout:
    """Successive RL iterations over ``requests``; parked work carries across iterations."""

    def __init__(self, engine: RolloutEngine, requests: Iterable[GroupRequest]) -> None:
        self.engine = engine
        self._draws = RequestDraws(requests)
        self._parked: list[Slot] = []
        self._ready: list[Group] = []
        self._bound_noted = False

    @property
    def parked(self) -> int:
        """Episodes waiting for the next iteration."""
        return len(self._parked)

    async def iteration(self, batch_groups: int) -> IterationResult:
        """Run until ``batch_groups`` groups are complete (fewer once the requests run out)."""
        if batch_groups < 1:
            raise ValueError("batch_groups must be at least 1")
        engine = self.engine
        engine.stats = stats = RolloutStats()
        if engine.config.mode == "sync":
            groups = await self._lockstep(batch_groups)
        else:
            groups = await self._request_level(batch_groups)
        held = self._ready
        if engine.config.stale == "wait":  # what would be stale next iteration goes now
            groups, held = self._due_first(held + groups), []
        groups, self._ready = take_batch(held, groups, batch_groups)
        exhausted = self._draws.exhausted and not self._parked and not self._ready
        return IterationResult(engine.version, groups, stats, exhausted)

    def pending_groups(self) -> list[PendingGroup]:
        """The groups drawn and not yet handed out, in order: those finished and held back,
        then those with parked episodes, each with its finished samples and its parked
        episodes' progress (what a checkpoint keeps; :meth:`restore` puts it back)."""
        out = [PendingGroup(g.request.position, g.request.task.id, list(g.samples))
               for g in self._ready]
        by_state: dict[int, PendingGroup] = {}
        for state, index in self._parked:
            pending = by_state.get(id(state))
            if pending is None:
                pending = by_state[id(state)] = PendingGroup(
                    state.request.position, state.request.task.id, list(state.group.samples))
                out.append(pending)
            pending.progress[index] = state.episodes[index].progress()
        return out

    def restore(self, request: GroupRequest, pending: PendingGroup) -> RolloutStats:
        """Put back a group a checkpoint kept (``request``: its request, drawn again at its
        position): finished samples as they were, parked episodes continued from their
        progress, the other samples run from scratch; how many of each (``resumed_*``)."""
        counts = RolloutStats()
        state = GroupState(request)
        done = {s.index for s in pending.samples}
        state.group.samples += [s for s in pending.samples if s.index in
                                request.sample_indices]
        counts.resumed_kept += len(state.group.samples)
        for index in request.sample_indices:
            if index in done:
                continue
            episode = self.engine.new_episode(state, index)
            progress = pending.progress.get(index)
            if progress is not None:
                episode.restore(progress)
                counts.resumed_continued += 1
            else:
                counts.resumed_regenerated += 1
            self._parked.append((state, index))
        if state.group.complete:
            state.group.samples.sort(key=lambda s: s.index)
            self._ready.append(state.group)
        return counts

    async def aclose(self) -> None:
        """Close the parked episodes' sandbox sessions."""
        for state, index in self._parked:
            await state.episodes[index].close()
        self._parked = []

    # --------------------------------------------------------------------------- modes
    async def _lockstep(self, batch_groups: int) -> list[Group]:
        states = []
        while len(states) < batch_groups and (request := self._draws.next()) is not None:
            states.append(GroupState(request))
        return await self.engine.run_lockstep(states)

    async def _request_level(self, batch_groups: int) -> list[Group]:
        engine, config = self.engine, self.engine.config
        partial = config.segment_tokens is not None
        stop = asyncio.Event()
        gate = engine.admission()
        ready: list[Group] = []
        parked: list[Slot] = []
        tasks: set[asyncio.Task[None]] = set()
        regenerated = await self._fresh_ready()
        need = batch_groups - len(self._ready)
        if need <= 0 and not regenerated:
            return []

        async def run(state: GroupState, index: int) -> None:
            episode = state.episodes[index]
            wait = partial and self._due(state)  # parked, it would go stale: finish it
            engine.stats.stale_waited += wait
            try:
                finished = await engine.advance(
                    episode, max_tokens=None if wait else config.segment_tokens,
                    max_tool_calls=None if wait else config.segment_tool_calls,
                    stop=stop if partial and not wait else None,
                    interrupt_turns=partial and config.interrupt_turns and not wait,
                    before_turn=gate.before_turn)
            finally:
                await gate.release(episode)
            if not finished:
                parked.append((state, index))
                engine.stats.parked += 1
                engine.stats.interrupted += episode.interrupted
                await self._over_parked_bound(parked)
            elif (group := engine.collect(state, index)) is not None:
                ready.append(group)
                if partial and len(ready) >= need:
                    stop.set()

        if need <= 0:
            stop.set()

        async def start(slot: Slot) -> None:
            episode = slot[0].episodes[slot[1]]
            await gate.acquire(episode)
            if stop.is_set() and not (partial and self._due(slot[0])):
                await gate.release(episode)
                parked.append(slot)
                return
            task = asyncio.create_task(run(*slot))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        drawn: dict[int, int] = {}  # id(request) -> its draw order in this iteration
        episodes, bounded = 0, False
        try:
            for slot in await self._resumable() + regenerated:
                engine.stats.resumed += 1
                await start(slot)
            while not stop.is_set() and (partial or len(drawn) < need):
                if partial and config.stale == "wait" and len(drawn) >= need:
                    break  # pacing (the module docstring)
                if partial and not may_draw(config, need, len(drawn), episodes):
                    bounded = True
                    break
                request = self._draws.next()
                if request is None:
                    break
                drawn[id(request)] = len(drawn)
                episodes += len(request.sample_indices)
                state = GroupState(request)
                if not request.sample_indices:
                    ready.append(state.group)
                for index in request.sample_indices:
                    engine.new_episode(state, index)
                    await start((state, index))
            while tasks:
                await asyncio.gather(*list(tasks))
        except BaseException:
            await _cancel(*tasks)
            for state, index in parked:
                await state.episodes[index].close()
            raise
        self._parked = parked
        if bounded and len(ready) < need:
            note_draw_bound(engine.stats, need, len(ready), len(drawn), len(parked))
        await self._limit_parked_sessions()
        if not partial:  # the batch is every group drawn: in draw order, not completion order,
            ready.sort(key=lambda g: drawn.get(id(g.request), -1))  # so a rerun trains alike
        return ready

    # --------------------------------------------------------------------------- staleness
    def _due(self, state: GroupState) -> bool:
        """Under ``stale = "wait"``: whether the group, were it not finished in this
        iteration, would be stale in the next one (its oldest segment, or this iteration for
        a group not begun, is ``max_staleness`` versions old). Judged by the group, not the
        episode: an episode begun late still finishes with its group."""
        config, version = self.engine.config, self.engine.version
        if config.stale != "wait":
            return False
        firsts = [e.trajectory.policy_versions[0] for e in state.episodes.values()
                  if e.trajectory.policy_versions]
        done = oldest_version(state.group)
        oldest = min(firsts + ([done] if done is not None else []), default=version)
        return version - oldest >= config.max_staleness

    def _due_first(self, groups: list[Group]) -> list[Group]:
        """``groups`` with those that would be stale in the next iteration first (in order)."""
        config, version = self.engine.config, self.engine.version

        def later(group: Group) -> bool:
            oldest = oldest_version(group)
            return oldest is None or version + 1 - oldest <= config.max_staleness

        return sorted(groups, key=later)

    async def _fresh_ready(self) -> list[Slot]:
        """The held-back groups checked against the bound like parked samples: a stale one is
        dropped (``stale = "drop"`` or ``"wait"``), or its stale samples are regenerated
        (``"regenerate"``: the slots to start, the group held no more)."""
        engine, config = self.engine, self.engine.config
        kept: list[Group] = []
        slots: list[Slot] = []
        for group in self._ready:
            oldest = oldest_version(group)
            if oldest is None or not is_stale([oldest], engine.version, config.max_staleness):
                kept.append(group)
                continue
            if config.stale != "regenerate":
                state = GroupState(group.request)
                state.group.samples = list(group.samples)
                await self._drop(state)
                continue
            state = GroupState(group.request)
            state.group.samples = list(group.samples)
            slots += self._regenerate_samples(state, [
                s for s in group.samples
                if is_stale(s.policy_versions, engine.version, config.max_staleness)])
        self._ready = kept
        return slots

    async def _resumable(self) -> list[Slot]:
        """The parked slots to continue, stale ones regenerated or their groups dropped
        (``stale = "drop"``, or ``"wait"`` where one went stale anyway). A group's finished
        samples are checked too: a group is handed out whole, its oldest sample with it."""
        engine, config = self.engine, self.engine.config
        slots, self._parked = self._parked, []
        dropped: set[int] = set()
        checked: set[int] = set()
        out: list[Slot] = []
        for state, index in slots:
            if id(state) in dropped:
                continue
            if id(state) not in checked:
                checked.add(id(state))
                stale = [s for s in state.group.samples
                         if is_stale(s.policy_versions, engine.version, config.max_staleness)]
                if stale and config.stale != "regenerate":
                    dropped.add(id(state))
                    await self._drop(state)
                    continue
                out += self._regenerate_samples(state, stale)
            episode = state.episodes[index]
            versions = episode.trajectory.policy_versions
            if not is_stale(versions, engine.version, config.max_staleness):
                out.append((state, index))
                continue
            if config.stale != "regenerate":
                dropped.add(id(state))
                await self._drop(state)
                continue
            engine.stats.regenerated += 1
            engine.stats.wasted_tokens += episode.model_used
            log.info("sample %s is stale (versions %s, now %d): regenerated", episode.id,
                     versions, engine.version)
            await episode.close()
            state.restarts[index] = state.restarts.get(index, 0) + 1
            engine.new_episode(state, index)
            out.append((state, index))
        return [slot for slot in out if id(slot[0]) not in dropped]

    def _regenerate_samples(self, state: GroupState, stale: list[Sample]) -> list[Slot]:
        """Finished samples of ``state`` that went stale, taken out and begun anew."""
        engine = self.engine
        for sample in stale:
            state.group.samples.remove(sample)
            engine.stats.regenerated += 1
            engine.stats.wasted_tokens += sample.trajectory.model_tokens
            log.info("sample %s#%d is stale (versions %s, now %d): regenerated",
                     sample.group_id, sample.index, sample.policy_versions, engine.version)
            state.restarts[sample.index] = sample.restarts + 1
            engine.new_episode(state, sample.index)
        return [(state, sample.index) for sample in stale]

    async def _drop(self, state: GroupState) -> None:
        stats = self.engine.stats
        stats.dropped_groups += 1
        stats.dropped_ids.append(state.request.group_id)
        wasted = sum(s.trajectory.model_tokens for s in state.group.samples)
        for episode in state.episodes.values():
            wasted += episode.model_used
            await episode.close()
        stats.wasted_tokens += wasted
        log.info("group %s dropped: a sample lagged more than %d policy versions (%d tokens "
                 "thrown away)", state.request.group_id, self.engine.config.max_staleness,
                 wasted)
        state.episodes.clear()

    def _session_bound(self) -> int:
        """``max_parked_sessions``, lowered to what the sandbox can spare (noted once in the
        debug log: the lowering is automatic and needs nothing of the user)."""
        config = self.engine.config
        bound = parked_session_bound(config.max_parked_sessions, self.engine.sandbox,
                                     config.max_in_flight)
        if bound < config.max_parked_sessions and not self._bound_noted:
            self._bound_noted = True
            sandbox = self.engine.sandbox  # lowered only for a SessionLimited one
            held = sandbox.max_sessions if isinstance(sandbox, SessionLimited) else "?"
            log.debug("max_parked_sessions %d lowered to %d: the sandbox holds %s live "
                      "sessions and max_in_flight is %d (parked episodes beyond it replay "
                      "their cells when they resume)", config.max_parked_sessions, bound,
                      held, config.max_in_flight)
        return bound

    async def _over_parked_bound(self, parked: list[Slot]) -> None:
        """An episode just parked: the one it pushes past the parked-session bound releases
        its session now, not at the iteration's end, so that episodes parked during an
        iteration never hold the session slots the running ones wait for."""
        beyond = len(parked) - self._session_bound()
        if beyond > 0:
            state, index = parked[beyond - 1]
            await state.episodes[index].close()

    async def _limit_parked_sessions(self) -> None:
        """Beyond the parked-session bound, the oldest parked episodes release their
        sessions (their cells are replayed when they resume)."""
        extra = len(self._parked) - self._session_bound()
        for state, index in self._parked[:max(0, extra)]:
            await state.episodes[index].close()
