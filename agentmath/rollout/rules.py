"""The rules the local and the Ray partial rollout share (:mod:`agentmath.rollout.partial`,
:mod:`agentmath.distributed.partial`): when a sample is stale, how old a group is, how many
new groups an iteration may draw, how many parked episodes keep their sandbox sessions, how a
batch is cut, and the draws of a run's requests."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from agentmath.config import RolloutConfig
from agentmath.rollout.records import Group, GroupRequest, RolloutStats
from agentmath.sandbox.client import SessionLimited

log = logging.getLogger(__name__)


def is_stale(versions: list[int], version: int, max_staleness: int) -> bool:
    """Whether a parked sample whose model segments were sampled by ``versions`` (oldest
    first) is stale when resumed under ``version``: its oldest segment lags more than
    ``max_staleness`` versions (the rule of the local and the Ray partial rollout)."""
    return bool(versions) and version - versions[0] > max_staleness


def oldest_version(group: Group) -> int | None:
    """The oldest policy version that sampled a segment of ``group`` (None: none did)."""
    firsts = [s.policy_versions[0] for s in group.samples if s.policy_versions]
    return min(firsts) if firsts else None


def may_draw(config: RolloutConfig, need: int, groups: int, episodes: int) -> bool:
    """Whether a partial-rollout iteration that needs ``need`` groups and has drawn ``groups``
    new groups (``episodes`` episodes) may draw another (``RolloutConfig.max_new_groups``):
    without a bound, an iteration whose episodes all outlast one segment never completes a
    group and draws, and parks, without end (the rule of the local and the Ray partial
    rollout)."""
    if config.max_new_groups is not None:
        return groups < config.max_new_groups
    return groups < 2 * need or episodes < config.max_in_flight + config.max_parked_sessions


def parked_session_bound(max_parked: int, sandbox: object, running: int) -> int:
    """Parked episodes that may keep their sandbox sessions: ``max_parked``, lowered where
    ``sandbox`` holds fewer live sessions (:class:`~agentmath.sandbox.client.SessionLimited`)
    than they and the ``running`` episodes could: all its sessions but ``running`` stay for
    running episodes, at least half of them. Parked episodes then never hold every session a
    running one waits for (a deadlock: the iteration waits for that episode, the parked ones
    for the iteration's end)."""
    limit = sandbox.max_sessions if isinstance(sandbox, SessionLimited) else None
    if limit is None:
        return max_parked
    return min(max_parked, max(limit - running, limit // 2))


def note_draw_bound(stats: RolloutStats, need: int, done: int, drawn: int,
                    parked: int) -> None:
    """Count and log an iteration that reached its draw bound with its batch short."""
    stats.draws_stopped += 1
    log.warning("this iteration drew its bound of %d new groups and completed %d of the %d "
                "groups it needed: it ends with them, %d episodes parked for the next "
                "(episodes longer than one segment? see RolloutConfig.max_new_groups)",
                drawn, done, need, parked)


def take_batch(held: list[Group], new: list[Group], batch_groups: int
               ) -> tuple[list[Group], list[Group]]:
    """An iteration's batch: the groups held back from earlier iterations first, then this
    one's, at most ``batch_groups``; and the rest, held back for the next iteration."""
    groups = held + new
    return groups[:batch_groups], groups[batch_groups:]


class RequestDraws:
    """A run's group requests, drawn one at a time, remembering when they ran out (the
    local and the Ray iterations both draw through it)."""

    def __init__(self, requests: Iterable[GroupRequest]) -> None:
        self._requests = iter(requests)
        self.exhausted = False

    def next(self) -> GroupRequest | None:
        """The next request; None once there are none (and from then on)."""
        if self.exhausted:
            return None
        request = next(self._requests, None)
        self.exhausted = request is None
        return request
