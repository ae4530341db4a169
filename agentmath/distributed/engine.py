"""The driver's side of distributed rollouts: episodes placed on Ray rollout workers.

:class:`RayRolloutEngine` has the contract of
:meth:`agentmath.rollout.scheduler.RolloutEngine.stream`: requests in, each sample handed to
``on_sample`` the moment it finishes, each group yielded once complete. Underneath, each
episode is one call on one worker actor:

* **placement**: an episode goes to the worker that already runs its group (its router then
  keeps the group's shared prompt on one model server, the prefix reuse of
  agentmath/backends/router.py) while that worker has room, else to the least loaded worker;
  at most ``max_in_flight`` episodes run in the cluster at once, ``ceil(max_in_flight /
  workers)`` per worker.
* **failure**: a call that fails inside Ray (its worker process or node died, or the worker
  could not start its sandbox or model client) marks the worker dead, starts a replacement
  (used once it answers ``ready``: on a smaller cluster it may never be placed, and nothing
  waits for it), and places the episode again, from scratch with the same seed, so a lost node
  changes no result. After ``max_attempts`` placements the episode is a failed sample (an
  error record), never a crash. Only when no worker is alive and none starts within
  ``start_timeout_s`` does the run stop, with a :class:`~agentmath.errors.ClusterError`; the
  caller has recorded every finished sample by then (an evaluation resumes from them).

An RL trainer changes the :class:`~agentmath.distributed.worker.EpisodePolicy` between steps
(``set_policy_version``, ``use_model``, ``set_budgets``, the methods the trainer calls on the
local engine too); every episode placed after that carries it to its worker. The stage's
:class:`~agentmath.config.RolloutConfig` (``rollout``: segment budgets, staleness) is read by
:class:`~agentmath.distributed.iterations.RayIterations`, which runs partial rollout on the
workers (:mod:`agentmath.distributed.partial`) with the slots and placement kept here.

Written here rather than taken from Ray: Ray's actor pools (``ray.util.ActorPool``) place by
submission order with no notion of groups, in-flight bounds or re-placement after a node loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from agentmath.agent.trajectory import Trajectory
from agentmath.config import LoopConfig, RayConfig, RolloutConfig
from agentmath.distributed.cluster import connect, cpu_nodes, import_ray
from agentmath.distributed.worker import EpisodePolicy, RolloutWorker, WorkerSpec
from agentmath.errors import ClusterError
from agentmath.rollout.records import Group, GroupRequest, RolloutStats, Sample
from agentmath.rollout.scheduler import SampleHook, SamplingFn

log = logging.getLogger(__name__)


#: Calls a worker serves beside its episodes: a stop of the iteration, releasing parked ones.
CONTROL_CALLS = 2


@dataclass(eq=False)
class Slot:
    """One worker actor as the driver sees it."""

    actor: Any
    ready: asyncio.Future[Any]
    inflight: int = 0
    dead: bool = False


@dataclass(eq=False)
class _Job:
    """One episode to place: its group, sample index and how often it was placed."""

    request: GroupRequest
    index: int
    attempts: int = 0
    errors: list[str] = field(default_factory=list)


class RayRolloutEngine:
    """Runs episodes of groups on Ray rollout workers (see the module docstring)."""

    def __init__(self, spec: WorkerSpec, config: RayConfig, sampling: SamplingFn, *,
                 max_in_flight: int) -> None:
        self.spec = spec
        self.config = config
        self.sampling = sampling
        self.max_in_flight = max_in_flight
        self.stats = RolloutStats()
        self.policy = EpisodePolicy()
        self.rollout = RolloutConfig(max_in_flight=max_in_flight)
        self.slots: list[Slot] = []
        self.replacements_left = 0  # workers that may still be started for dead ones
        self._started_ray = False
        self._actor_cls: Any = None

    # ----------------------------------------------------------------------------- policy
    @property
    def version(self) -> int:
        return self.policy.version

    def set_policy_version(self, version: int) -> None:
        """New weights are live: episodes placed from now on are tagged ``version``."""
        self.policy = replace(self.policy, version=version)

    def use_model(self, name: str) -> None:
        """Episodes placed from now on send ``name`` as the model (a LoRA adapter's)."""
        self.policy = replace(self.policy, model=name)

    def set_budgets(self, loop: LoopConfig, rollout: RolloutConfig) -> None:
        """A stage's budgets: episodes placed from now on get ``loop``; segments run from now
        on get ``rollout``'s segment budgets and staleness bound (``max_in_flight`` stays the
        one the workers were started with)."""
        self.policy = replace(self.policy, loop=loop)
        self.rollout = rollout

    # ----------------------------------------------------------------------------- workers
    async def start(self) -> None:
        """Join the cluster and start the workers; wait for at least one to be ready."""
        ray = import_ray()
        self._started_ray = connect(self.config.address)
        n = self.config.workers or max(1, len(cpu_nodes()))
        per = max(1, math.ceil(self.max_in_flight / n))
        self.spec = replace(self.spec, in_flight=per)
        self.replacements_left = n * self.config.max_attempts
        self._actor_cls = ray.remote(RolloutWorker).options(  # + room for stop and release calls
            num_cpus=self.config.worker_cpus, max_concurrency=per + CONTROL_CALLS, max_restarts=0,
            scheduling_strategy="SPREAD")
        self.slots = [self._new_slot() for _ in range(n)]
        await self.wait_ready()

    def _new_slot(self) -> Slot:
        actor = self._actor_cls.remote(self.spec)
        ready = asyncio.ensure_future(await_ref(actor.ready.remote()))
        slot = Slot(actor, ready)
        ready.add_done_callback(lambda fut: self._on_ready(slot, fut))
        return slot

    def _on_ready(self, slot: Slot, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            slot.dead = True
            if not fut.cancelled():
                log.warning("a rollout worker failed to start: %s", fut.exception())
            return
        log.debug("rollout worker ready: %s", fut.result())

    def usable(self) -> list[Slot]:
        """The workers that are started and alive."""
        return [s for s in self.slots if not s.dead and s.ready.done()]

    async def wait_ready(self) -> None:
        """Return once a worker is usable; ClusterError if none is within the timeout."""
        deadline = asyncio.get_running_loop().time() + self.config.start_timeout_s
        while not self.usable():
            pending = [s.ready for s in self.slots if not s.dead and not s.ready.done()]
            left = deadline - asyncio.get_running_loop().time()
            if not pending or left <= 0:
                errors = {str(s.ready.exception()) for s in self.slots
                          if s.ready.done() and not s.ready.cancelled()
                          and s.ready.exception() is not None}
                why = ("; ".join(sorted(errors))[:2000] if errors
                       else f"none started within {self.config.start_timeout_s:g} s")
                raise ClusterError(f"no Ray rollout worker is alive: {why}")
            await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)

    def lose(self, slot: Slot) -> None:
        """A worker failed: kill it and start a replacement (bounded)."""
        if slot.dead:
            return
        slot.dead = True
        ray = import_ray()
        with contextlib.suppress(Exception):  # noqa: BLE001 - it may be gone already
            if ray.is_initialized():  # (ray.kill would start a Ray instance otherwise)
                ray.kill(slot.actor)
        if self.replacements_left > 0:  # workers x max_attempts over the whole run
            self.replacements_left -= 1
            self.slots.append(self._new_slot())

    async def close(self) -> None:
        """Stop every worker (closing its sandbox) and leave Ray if this engine joined it."""
        ray = import_ray()
        for slot in self.slots:
            slot.ready.cancel()
        closing = [await_ref(s.actor.close.remote()) for s in self.slots if not s.dead]
        with contextlib.suppress(Exception):  # noqa: BLE001 - best effort on the way out
            await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), 30)
        for slot in self.slots:
            with contextlib.suppress(Exception):  # noqa: BLE001
                ray.kill(slot.actor)
        self.slots = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    async def wait_any(self, running: Collection[asyncio.Future[Any]], *,
                       placeable: bool) -> set[asyncio.Future[Any]]:
        """The calls of ``running`` that have finished, once one has. While work waits for a
        worker (``placeable``: queued episodes and room in the cluster), a worker that becomes
        ready ends the wait too, with nothing finished: the caller places again. Without it a
        worker that starts after the first ones would idle until an episode ends, which for
        long episodes (or a stalled server) is a whole wave of episodes."""
        starting = ([s.ready for s in self.slots if not s.dead and not s.ready.done()]
                    if placeable else [])
        done, _ = await asyncio.wait([*running, *starting],
                                     return_when=asyncio.FIRST_COMPLETED)
        return {fut for fut in done if fut in running}

    # ----------------------------------------------------------------------------- placement
    def _place(self, job: _Job, homes: dict[str, Slot]) -> Slot | None:
        cap = self.spec.in_flight
        home = homes.get(job.request.group_id)
        if home is not None and not home.dead and home.inflight < cap:
            return home
        free = [s for s in self.usable() if s.inflight < cap]
        return min(free, key=lambda s: s.inflight) if free else None

    async def stream(self, requests: Iterable[GroupRequest],
                     on_sample: SampleHook | None = None) -> AsyncIterator[Group]:
        """Run every request's episodes on the workers; yield each group once complete."""
        todo: deque[_Job] = deque()
        groups: dict[str, Group] = {}
        homes: dict[str, Slot] = {}
        running: dict[asyncio.Future[Any], tuple[Slot, _Job]] = {}
        source = iter(requests)
        try:
            while True:
                while len(running) < self.max_in_flight:
                    if not todo:
                        request = next(source, None)
                        if request is None:
                            break
                        if not request.sample_indices:  # nothing to run: complete as it is
                            yield Group(request)
                            continue
                        groups[request.group_id] = Group(request)
                        todo.extend(_Job(request, i) for i in request.sample_indices)
                    slot = self._place(todo[0], homes)
                    if slot is None:
                        break
                    job = todo.popleft()
                    running[self._submit(slot, job)] = (slot, job)
                    homes[job.request.group_id] = slot
                if not running:
                    if not todo:
                        return
                    await self.wait_ready()
                    continue
                done = await self.wait_any(
                    running, placeable=bool(todo) and len(running) < self.max_in_flight)
                for fut in done:
                    slot, job = running.pop(fut)
                    slot.inflight -= 1
                    sample = self._finish(fut, slot, job, todo)
                    if sample is None:
                        continue
                    group = groups[job.request.group_id]
                    group.samples.append(sample)
                    self.stats.samples_done += 1
                    self.stats.version_spans[len(sample.policy_versions)] += 1
                    if on_sample is not None:
                        await on_sample(sample)
                    if group.complete:
                        del groups[job.request.group_id]
                        homes.pop(job.request.group_id, None)
                        group.samples.sort(key=lambda s: s.index)
                        self.stats.groups_done += 1
                        yield group
        finally:
            for fut in running:
                fut.cancel()

    def _submit(self, slot: Slot, job: _Job) -> asyncio.Future[Any]:
        slot.inflight += 1
        job.attempts += 1
        sampling = self.sampling(job.request, job.index)
        return asyncio.ensure_future(await_ref(slot.actor.run.remote(
            job.request, job.index, sampling, self.policy)))

    def _finish(self, fut: asyncio.Future[Any], slot: Slot, job: _Job,
                todo: deque[_Job]) -> Sample | None:
        """The finished sample; None when the episode goes back to the queue."""
        exc = fut.exception()
        if exc is None:
            return fut.result()
        if not isinstance(exc, import_ray().exceptions.RayError):
            raise exc
        job.errors.append(f"{type(exc).__name__}: {str(exc)[:500]}")
        log.warning("episode %s#%d lost its worker (attempt %d): %s", job.request.group_id,
                    job.index, job.attempts, job.errors[-1])
        self.lose(slot)
        if job.attempts < self.config.max_attempts:
            todo.appendleft(job)
            return None
        return failed_sample(job.request, job.index, job.errors)


def failed_sample(request: GroupRequest, index: int, errors: list[str],
                  restarts: int = 0) -> Sample:
    """The error record of an episode whose Ray worker failed ``len(errors)`` times."""
    traj = Trajectory(problem=request.task.problem, finish_reason="error",
                      error=f"ClusterError: the episode's Ray worker failed {len(errors)} "
                            f"times; last: {errors[-1]}",
                      problem_id=request.task.id, sample_index=index)
    return Sample(request.group_id, index, traj, restarts)


async def await_ref(ref: Any) -> Any:
    """An ObjectRef as a coroutine (asyncio.wait takes futures, not refs)."""
    return await ref
