"""Partial rollout across a checkpoint and under the staleness bound's three policies: what a
checkpoint keeps of the pending groups goes back into a new rollout and nothing is lost or
handed out twice; no handed-out group lags more than ``max_staleness`` versions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentmath.config import LoopConfig, RolloutConfig
from agentmath.formats import get_format
from agentmath.rl.records import BoundSettings, CheckpointState
from agentmath.rl.schedules import StageState
from agentmath.rollout.partial import IterationResult, PartialRollout
from agentmath.rollout.records import GroupRequest
from agentmath.rollout.rules import oldest_version
from agentmath.rollout.scheduler import RolloutEngine
from agentmath.tasks import Task
from tests.fixtures.sandboxes import FakeSandbox
from tests.unit.test_scheduler import LONG, Tracing

FMT = get_format("code_interpreter")


def engine(**config: Any) -> RolloutEngine:
    return RolloutEngine(Tracing(turns=LONG, delays={"p0": 0.05}), FakeSandbox(), FMT,
                         loop=LoopConfig(), config=RolloutConfig(**config))


class Drawn:
    """Requests p0..p{n-1} with their positions, remembering how many were drawn."""

    def __init__(self, n: int, start: int = 0) -> None:
        self.all = [GroupRequest(Task(f"p{i}", f"problem {i}", "42"), 2, position=i)
                    for i in range(n)]
        self.drawn = start

    def __iter__(self) -> Iterator[GroupRequest]:
        while self.drawn < len(self.all):
            self.drawn += 1
            yield self.all[self.drawn - 1]


async def _run(run: PartialRollout, eng: RolloutEngine, batch: int, first: int,
               iterations: int) -> list[IterationResult]:
    results = []
    for version in range(first, first + iterations):
        eng.set_policy_version(version)
        results.append(result := await run.iteration(batch))
        if result.exhausted:
            break
    return results


def _ids(results: list[IterationResult]) -> list[str]:
    return [g.request.group_id for r in results for g in r.groups]


async def test_a_checkpoints_pending_groups_go_back_and_nothing_is_lost_or_doubled() -> None:
    config = {"segment_tokens": 120, "max_staleness": 10, "max_in_flight": 3}
    eng, source = engine(**config), Drawn(8)
    run = PartialRollout(eng, source)
    before = await _run(run, eng, 2, 0, 2)
    pending = run.pending_groups()
    assert any(p.progress for p in pending)  # parked episodes were there to keep
    # through the checkpoint's stored form (the one writer and the one reader)
    state = CheckpointState(2, 2, source.drawn, pending, StageState(0, []), [],
                            BoundSettings(False, 2, "m"))
    back = CheckpointState.from_payload(state.to_payload())
    assert [(p.position, p.task_id, sorted(p.progress), [s.index for s in p.samples])
            for p in back.pending] == [
        (p.position, p.task_id, sorted(p.progress), [s.index for s in p.samples])
        for p in pending]
    await run.aclose()

    eng2 = engine(**config)
    again = PartialRollout(eng2, Drawn(8, start=back.cursor))
    counts = [again.restore(source.all[p.position], p) for p in back.pending
              if p.position is not None]
    continued = sum(c.resumed_continued for c in counts)
    kept = sum(c.resumed_kept for c in counts)
    assert continued == sum(len(p.progress) for p in pending) > 0
    assert kept == sum(len(p.samples) for p in pending)
    assert sum(c.resumed_regenerated for c in counts) == 0
    after = await _run(again, eng2, 2, 2, 20)
    await again.aclose()
    assert sorted(_ids(before) + _ids(after)) == [f"p{i}" for i in range(8)]
    resumed = [s for r in after for g in r.groups for s in g.samples
               if s.policy_versions and s.policy_versions[0] < 2]
    assert resumed  # episodes begun before the checkpoint ended after it, not from scratch
    assert eng2.sandbox.open == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("policy", ["regenerate", "drop", "wait"])
async def test_no_group_handed_out_lags_more_than_the_bound(policy: str) -> None:
    eng = engine(segment_tokens=250, max_staleness=1, stale=policy, max_in_flight=4)
    run = PartialRollout(eng, Drawn(8))
    results = await _run(run, eng, 1, 0, 40)
    await run.aclose()
    for r in results:
        for g in r.groups:
            oldest = oldest_version(g)
            assert oldest is not None and r.version - oldest <= 1, (policy, r.version, oldest)
    stats = [r.stats for r in results]
    spans = [len(set(s.policy_versions)) for r in results for g in r.groups for s in g.samples]
    assert max(spans) == 2  # episodes spanned a weight update, within the bound
    waited = sum(s.stale_waited for s in stats)
    dropped = [i for s in stats for i in s.dropped_ids]
    assert len(dropped) == sum(s.dropped_groups for s in stats)
    if policy == "wait":
        assert waited > 0 and sum(s.regenerated for s in stats) == 0
    else:
        assert waited == 0
    if policy == "drop":
        assert dropped
    # every group is handed out or dropped, once
    assert sorted(_ids(results) + dropped) == [f"p{i}" for i in range(8)]


async def test_put_back_redraws_what_nothing_was_kept_of_at_its_position() -> None:
    from agentmath.rl.compose import put_back
    from agentmath.rl.rollouts import RequestStream
    from agentmath.rollout.records import PendingGroup

    tasks = [Task(f"p{i}", f"problem {i}", "42") for i in range(4)]
    first = RequestStream(tasks, 2, seed=1, shuffle=True)
    drawn = [next(first) for _ in range(6)]  # across an epoch boundary
    stream = RequestStream(tasks, 2, seed=1, shuffle=True, cursor=6)
    pending = [PendingGroup(1, drawn[1].task.id), PendingGroup(5, drawn[5].task.id)]
    counts = put_back(pending, stream, PartialRollout(engine(segment_tokens=120), stream))
    assert counts.resumed_regenerated == 4 and counts.resumed_continued == 0
    assert stream.requeued() == pending  # a checkpoint now would keep them as they were
    assert [(r.position, r.task.id) for r in (next(stream), next(stream))] == \
        [(1, drawn[1].task.id), (5, drawn[5].task.id)]
    assert next(stream).position == 6  # then on from the cursor
