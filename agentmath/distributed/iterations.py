"""RL iterations on a Ray cluster: the trainer's rollouts placed on Ray rollout workers.

:class:`RayIterations` has the contract the trainer uses of
:class:`~agentmath.rollout.partial.PartialRollout` (``iteration``, ``pending_task_ids``,
``parked``, ``aclose``) in its request-level mode without segment budgets: each iteration
draws exactly the groups it needs from the request stream and runs every episode to its end on
the workers (:class:`~agentmath.distributed.engine.RayRolloutEngine`: group affinity, least
load, an episode whose node died re-run from scratch with the same seed). The batch comes back
in the order its prompts were drawn, as the local engine's does, so that a run on Ray trains on
the same batch, in the same order, as the same run in one process.

Partial rollout (episodes parked across steps with their sandbox sessions) is not run on Ray:
parked episodes would have to live on the workers between calls; the config refuses it.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentmath.distributed.engine import RayRolloutEngine
from agentmath.rollout.partial import IterationResult
from agentmath.rollout.records import Group, GroupRequest, RolloutStats


class RayIterations:
    """Successive RL iterations over ``requests`` on a started :class:`RayRolloutEngine`."""

    parked = 0  # nothing waits between iterations: every episode runs to its end

    def __init__(self, engine: RayRolloutEngine, requests: Iterable[GroupRequest]) -> None:
        self.engine = engine
        self._requests = iter(requests)
        self._exhausted = False

    async def iteration(self, batch_groups: int) -> IterationResult:
        """``batch_groups`` new groups run to their end (fewer once the requests run out)."""
        if batch_groups < 1:
            raise ValueError("batch_groups must be at least 1")
        drawn: list[GroupRequest] = []
        while len(drawn) < batch_groups and not self._exhausted:
            request = next(self._requests, None)
            self._exhausted = request is None
            if request is not None:
                drawn.append(request)
        self.engine.stats = stats = RolloutStats()
        groups: list[Group] = [group async for group in self.engine.stream(drawn)]
        rank = {id(request): i for i, request in enumerate(drawn)}
        groups.sort(key=lambda g: rank[id(g.request)])
        return IterationResult(self.engine.version, groups, stats, self._exhausted)

    def pending_task_ids(self) -> list[str]:
        """Nothing is parked or held back between iterations."""
        return []

    async def aclose(self) -> None:
        """Nothing to close: the engine's owner closes the workers."""
