"""The rollout half of an RL step: prompts in, scored groups with signal out.

* :class:`RequestStream` — the training prompts as an endless, seeded stream of GRPO groups
  (a new permutation each epoch), each request with its position in that order, and a cursor
  that a checkpoint saves, so that a resumed run draws exactly the prompts the uninterrupted
  one would have.
* :func:`collect_groups` — one step's groups from the rollout engine (sync or async, partial
  rollout with a staleness bound: :class:`~agentmath.rollout.partial.PartialRollout`), each
  sample scored by the reward model, and DAPO/AgentMath **dynamic sampling**: groups whose
  rewards are all equal carry no gradient, so they are dropped and back-filled from new
  prompts, for at most ``max_rounds`` rollout rounds; how many were dropped is returned.
  With ``draw_factor`` > 1 a round draws that many times the groups still missing (DAPO's
  generation batch larger than its training batch, verl's ``data.gen_batch_size``): the
  groups without signal are replaced in the same round instead of a later one, which would
  wait for its own longest episode again; the first groups with signal, in the order the
  round returns them, are trained on and the rest counted as surplus.
  Before dynamic sampling, the step's filters (:mod:`agentmath.rl.filters`: pass rate, void
  turns, resample-on-correct) take samples and groups out, each counted in :class:`Collected`.

The engine and iterations a run samples from (in this process or on Ray) are built by the
trainer's composition root, :mod:`agentmath.rl.compose`.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from agentmath.backends.base import SamplingParams
from agentmath.errors import DataError
from agentmath.rl.batch import ScoredGroup, ScoredSample, split_by_signal
from agentmath.rl.filters import FilterPlan, GroupVerdict, filter_group
from agentmath.rl.records import NoUpdate
from agentmath.rl.rewards import RewardModel
from agentmath.rollout.contract import Iterations
from agentmath.rollout.records import Group, GroupRequest, PendingGroup, RolloutStats
from agentmath.seeding import derive_seed
from agentmath.tasks import Task


class RequestStream(Iterator[GroupRequest]):
    """Groups of ``group_size * oversample`` episodes over ``tasks``, epoch after epoch, each
    epoch in a seeded order (``oversample`` > 1: resample-on-correct keeps ``group_size`` of
    them). Each request carries its ``position`` in that order (its samples' seeds derive from
    it); ``cursor`` requests were already drawn (resume). Requests put back with
    :meth:`requeue` come first (the groups a checkpoint found pending whose episodes it
    could not keep: run again from scratch at their own positions, so nothing is drawn twice
    or passed over)."""

    def __init__(self, tasks: Sequence[Task], group_size: int, *, seed: int, shuffle: bool,
                 cursor: int = 0, oversample: int = 1) -> None:
        if not tasks:
            raise ValueError("no training problems")
        if oversample < 1:
            raise ValueError(f"oversample must be at least 1, got {oversample}")
        self.tasks = list(tasks)
        self.group_size = group_size
        self.oversample = oversample
        self.seed = seed
        self.shuffle = shuffle
        self.cursor = cursor
        self._by_id = {t.id: t for t in self.tasks}
        self._requeue: list[GroupRequest] = []
        self._order: tuple[int, list[int]] | None = None

    def _task_at(self, position: int) -> Task:
        n = len(self.tasks)
        epoch, offset = divmod(position, n)
        if self._order is None or self._order[0] != epoch:
            order = list(range(n))
            if self.shuffle:
                random.Random(derive_seed(self.seed, "epoch", epoch)).shuffle(order)
            self._order = (epoch, order)
        return self.tasks[self._order[1][offset]]

    def _request(self, task: Task, position: int | None) -> GroupRequest:
        return GroupRequest(task, samples=self.group_size * self.oversample, position=position)

    def __next__(self) -> GroupRequest:
        if self._requeue:
            return self._requeue.pop(0)
        request = self._request(self._task_at(self.cursor), self.cursor)
        self.cursor += 1
        return request

    def redraw(self, pending: PendingGroup) -> GroupRequest | None:
        """The request of a group a checkpoint kept as pending, at its position (None: a
        checkpoint that kept only the problem id, of a problem no longer in the data).
        DataError when the data has another problem at that position (it changed since the
        checkpoint)."""
        if pending.position is None:
            task = self._by_id.get(pending.task_id)
            return None if task is None else self._request(task, None)
        if not 0 <= pending.position < self.cursor:
            raise DataError(f"checkpoint: pending group at position {pending.position} "
                            f"(problem {pending.task_id!r}) was never drawn (cursor "
                            f"{self.cursor})")
        task = self._task_at(pending.position)
        if task.id != pending.task_id:
            raise DataError(f"checkpoint: the problem drawn at position {pending.position} "
                            f"was {pending.task_id!r}, the data now has {task.id!r} there: "
                            f"the training data (or its seed or shuffle) changed since")
        return self._request(task, pending.position)

    def requeue(self, request: GroupRequest) -> None:
        """Draw ``request`` again before any new one (its episodes run from scratch)."""
        self._requeue.append(request)

    def requeued(self) -> list[PendingGroup]:
        """The requests put back and not yet drawn again (a checkpoint keeps them)."""
        return [PendingGroup(r.position, r.task.id) for r in self._requeue]

    def sample_seed(self, request: GroupRequest, index: int, step: int) -> int:
        position = request.position if request.position is not None else -1
        return derive_seed(self.seed, "sample", position, index, step)


@dataclass(slots=True)
class Sampling:
    """The sampling settings of new episodes: the temperature of the current step."""

    stream: RequestStream
    temperature: float = 1.0
    top_p: float = 1.0
    step: int = 0

    def __call__(self, request: GroupRequest, index: int) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p,
                              seed=self.stream.sample_seed(request, index, self.step),
                              logprobs=True)


@dataclass(slots=True)
class Collected:
    """One step's rollouts: groups to train on, and what happened on the way."""

    groups: list[ScoredGroup]
    dropped: list[ScoredGroup] = field(default_factory=list)  # no reward variance
    rounds: int = 0
    stats: RolloutStats = field(default_factory=RolloutStats)
    exhausted: bool = False
    filtered: list[ScoredGroup] = field(default_factory=list)  # dropped whole by a filter
    removed: list[ScoredSample] = field(default_factory=list)  # taken out of kept groups
    pass_rate_dropped: int = 0  # groups: pass rate out of bounds
    void_groups_dropped: int = 0  # groups: < 2 samples or no variance left without void ones
    void_dropped: int = 0  # samples with a void turn
    roc_dropped: int = 0  # samples resample-on-correct left out
    surplus: list[ScoredGroup] = field(default_factory=list)  # with signal, beyond the need
    infra_excluded: int = 0  # samples left out: their episode failed for the infra's reasons
    infra_dropped: list[ScoredGroup] = field(default_factory=list)  # < 2 valid samples left

    @property
    def all_samples(self) -> list[ScoredSample]:
        """Every sample generated this step: trained, dropped by a filter or for no signal,
        or with signal beyond the groups the step needed (``draw_factor``)."""
        groups = self.groups + self.dropped + self.filtered + self.surplus + self.infra_dropped
        return [s for g in groups for s in g.samples] + self.removed

    def prompt_ids(self) -> tuple[list[str], dict[str, list[str]]]:
        """The problem ids of the groups trained on, and of those drawn and not trained on
        by reason (only the reasons that occurred)."""
        def ids(groups: list[ScoredGroup]) -> list[str]:
            return [g.group.request.task.id for g in groups]

        dropped = {"no_variance": ids(self.dropped), "filtered": ids(self.filtered),
                   "surplus": ids(self.surplus), "infra": ids(self.infra_dropped),
                   "stale": list(self.stats.dropped_ids)}
        return ids(self.groups), {k: v for k, v in dropped.items() if v}

    def no_update(self, step: int) -> NoUpdate:
        """The record of step ``step`` when it has no group to train on, with its own reason:
        a partial rollout that reached its draw bound with no group complete is not a step
        whose groups had no reward variance (it had none to look at)."""
        came_back = len(self.dropped) + len(self.filtered) + len(self.infra_dropped)
        stopped = self.stats.draws_stopped
        if came_back == 0 and stopped:
            return NoUpdate(step, (
                f"no group completed: the partial rollout reached its draw bound "
                f"(max_new_groups) in {stopped} of {self.rounds} iteration(s) with every "
                f"episode it drew still running, parked for the next step"), "draw_bound")
        if came_back == 0:
            ran_out = " (the prompts ran out)" if self.exhausted else ""
            return NoUpdate(step, f"no group completed in {self.rounds} round(s){ran_out}",
                            "no_groups")
        if not self.dropped and not self.filtered:
            return NoUpdate(step, f"every group lost its samples to infrastructure failures "
                                  f"({len(self.infra_dropped)} group(s) left with fewer "
                                  f"than two valid samples)", "infra")
        if not self.dropped:
            return NoUpdate(step, f"the filters dropped every group ({len(self.filtered)})",
                            "filtered")
        short = (f"; the draw bound (max_new_groups) ended {stopped} iteration(s) short"
                 if stopped else "")
        return NoUpdate(step, f"no group with reward variance ({len(self.dropped)} "
                              f"group(s) without){short}", "no_variance")

    def count(self, verdict: GroupVerdict, original: ScoredGroup) -> None:
        """Add what the filters did to one group (``original``: the group as scored)."""
        if verdict.group is None:
            self.filtered.append(original)
        self.removed += verdict.removed
        self.pass_rate_dropped += verdict.pass_rate_dropped
        self.void_groups_dropped += verdict.void_group_dropped
        self.void_dropped += verdict.void_dropped
        self.roc_dropped += verdict.roc_dropped


async def score_group(group: Group, rewards: RewardModel) -> ScoredGroup:
    """Score every sample of a group (grading runs off the event loop)."""
    scored = ScoredGroup(group)
    breakdowns = await asyncio.gather(*(rewards.ascore(group.request.task, s.trajectory)
                                        for s in group.samples))
    for sample, b in zip(group.samples, breakdowns, strict=True):
        scored.samples.append(ScoredSample(sample.group_id, sample.index, sample.trajectory,
                                           b.total, dict(b.terms), b.correct))
    return scored


def exclude_infra_failures(scored: list[ScoredGroup], out: Collected) -> list[ScoredGroup]:
    """The groups without the samples whose episodes failed for the infrastructure's reasons
    (:attr:`~agentmath.agent.trajectory.Trajectory.infra_failure`): a fake zero reward would
    drag the group's mean and std (open-instruct found 5-15% of rewards were such zeros).
    The samples left out are counted in ``out.infra_excluded`` (and kept in
    ``out.removed``); a group left with fewer than two goes to ``out.infra_dropped`` whole."""
    kept = []
    for group in scored:
        failed = [s.trajectory.infra_failure is not None for s in group.samples]
        if not any(failed):
            kept.append(group)
            continue
        out.infra_excluded += sum(failed)
        valid = [s for s, f in zip(group.samples, failed, strict=True) if not f]
        if len(valid) < 2:
            out.infra_dropped.append(group)
            continue
        out.removed += [s for s, f in zip(group.samples, failed, strict=True) if f]
        kept.append(ScoredGroup(group.group, valid))
    return kept


def apply_filters(scored: list[ScoredGroup], plan: FilterPlan, out: Collected,
                  seen: Counter[str]) -> list[ScoredGroup]:
    """The groups the step's filters keep (maybe with fewer samples), counted into ``out``.

    Each group's random choices are seeded by the run seed, the step and the group's identity
    (its task id, and how many groups of that task came before in this step), so that a rerun
    of the step keeps the same samples."""
    kept = []
    for group in scored:
        gid = group.group.request.group_id
        rng = random.Random(derive_seed(plan.seed, "filters", plan.step, gid, seen[gid]))
        seen[gid] += 1
        verdict = filter_group(group, plan.config, plan.group_size, rng)
        out.count(verdict, group)
        if verdict.group is not None:
            kept.append(verdict.group)
    return kept


async def collect_groups(rollout: Iterations, rewards: RewardModel, need: int, *,
                         dynamic_sampling: bool, max_rounds: int,
                         filters: FilterPlan | None = None,
                         draw_factor: float = 1.0) -> Collected:
    """``need`` scored groups (fewer if the rounds or the prompts run out); ``filters`` (the
    run's :class:`~agentmath.rl.filters.FilterPlan` for this step; None: none) apply to every
    scored group before dynamic sampling (with which a group they drop is back-filled like
    one without signal). With dynamic sampling each round draws ``draw_factor`` times the
    groups still missing, rounded up (the module docstring); the groups with signal beyond
    ``need`` go to ``Collected.surplus``."""
    if draw_factor < 1:
        raise ValueError(f"draw_factor must be at least 1, not {draw_factor}")
    out = Collected([])
    seen: Counter[str] = Counter()
    while len(out.groups) < need and out.rounds < max_rounds and not out.exhausted:
        missing = need - len(out.groups)
        draw = math.ceil(missing * draw_factor) if dynamic_sampling else missing
        result = await rollout.iteration(draw)
        out.rounds += 1
        out.exhausted = result.exhausted
        out.stats.add(result.stats)
        scored = [await score_group(g, rewards) for g in result.groups]
        if filters is not None and filters.config.exclude_infra_failures:
            scored = exclude_infra_failures(scored, out)
        if filters is not None:
            scored = apply_filters(scored, filters, out, seen)
        if dynamic_sampling:
            good, bad = split_by_signal(scored)
        else:
            good, bad = scored, []
        out.groups += good[:missing]
        out.surplus += good[missing:]
        out.dropped += bad
        if not dynamic_sampling:
            break
    return out
