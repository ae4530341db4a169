"""RL iterations on a Ray cluster: the trainer's rollouts placed on Ray rollout workers.

:class:`RayIterations` has the contract the trainer uses of
:class:`~agentmath.rollout.partial.PartialRollout` (``iteration``, ``pending_groups``,
``parked``, ``aclose``), in its request-level mode:

* without segment budgets (the stage's ``RolloutConfig`` on the engine), each iteration draws
  exactly the groups it needs from the request stream and runs every episode to its end on the
  workers (:class:`~agentmath.distributed.engine.RayRolloutEngine`: group affinity, least
  load, an episode whose node died re-run from scratch with the same seed);
* with segment budgets, partial rollout: episodes cut into segments and parked on their
  workers between iterations, with their sandbox sessions, under the staleness bound
  (:class:`~agentmath.distributed.partial.SegmentedIterations`). Episodes parked or groups
  held back by an earlier stage with segments are finished that way too.

Without segments the batch comes back in the order its prompts were drawn, as the local
engine's does, so that a run on Ray trains on the same batch, in the same order, as the same
run in one process.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentmath.distributed.engine import RayRolloutEngine
from agentmath.distributed.partial import SegmentedIterations
from agentmath.rollout.partial import IterationResult
from agentmath.rollout.records import Group, GroupRequest, PendingGroup, RolloutStats
from agentmath.rollout.rules import RequestDraws


class RayIterations:
    """Successive RL iterations over ``requests`` on a started :class:`RayRolloutEngine`."""

    def __init__(self, engine: RayRolloutEngine, requests: Iterable[GroupRequest]) -> None:
        self.engine = engine
        self._draws = RequestDraws(requests)
        self._segments = SegmentedIterations(engine, self._draws.next)

    @property
    def parked(self) -> int:
        """Episodes parked on the workers, waiting for the next iteration."""
        return self._segments.parked

    async def iteration(self, batch_groups: int) -> IterationResult:
        """``batch_groups`` complete groups (fewer once the requests run out)."""
        if batch_groups < 1:
            raise ValueError("batch_groups must be at least 1")
        self.engine.stats = stats = RolloutStats()
        rollout = self.engine.rollout
        segmented = rollout.segment_tokens is not None or rollout.segment_tool_calls is not None
        if segmented or self._segments.holding:
            groups = await self._segments.iteration(batch_groups)
        else:
            groups = await self._whole(batch_groups)
        exhausted = self._draws.exhausted and not self._segments.holding
        return IterationResult(self.engine.version, groups, stats, exhausted)

    async def _whole(self, batch_groups: int) -> list[Group]:
        """``batch_groups`` new groups run to their end, in draw order."""
        drawn: list[GroupRequest] = []
        while len(drawn) < batch_groups and (request := self._draws.next()) is not None:
            drawn.append(request)
        groups: list[Group] = [group async for group in self.engine.stream(drawn)]
        rank = {id(request): i for i, request in enumerate(drawn)}
        groups.sort(key=lambda g: rank[id(g.request)])
        return groups

    def pending_groups(self) -> list[PendingGroup]:
        """Groups parked or held back, in order, by draw position only (none without
        segments): a resumed run draws their problems again first, from scratch."""
        return self._segments.pending_groups()

    async def aclose(self) -> None:
        """Forget the parked episodes on the workers (the engine's owner closes them)."""
        await self._segments.aclose()
