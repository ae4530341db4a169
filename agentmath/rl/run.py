"""One RL run's live state and its step: the typed object the trainer drives.

:class:`RLRun` holds what a run is made of (the learner, the generators and the rollouts, as
:mod:`agentmath.rl.compose` builds them in one place) and what it has done (step, policy
version, events). :meth:`RLRun.run_step` is one step of agentic GRPO (see
:mod:`agentmath.rl.trainer`) and :meth:`RLRun.checkpoint` saves what a resume needs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath.backends.base import Backend, ModelThread
from agentmath.rl.config import RLConfig
from agentmath.rl.dump import write_rollout_dump
from agentmath.rl.filters import FilterPlan
from agentmath.rl.metrics import advantage_stats, sample_stats, staleness_stats
from agentmath.rl.records import (
    BoundSettings,
    CheckpointState,
    RunEvent,
    StageMove,
    StepExtra,
    StepMetrics,
)
from agentmath.rl.rewards import RewardModel
from agentmath.rl.rollouts import Collected, RequestStream, Sampling, collect_groups
from agentmath.rl.schedules import Stage, StageController, linear
from agentmath.rl.sharded import ShardedLearner
from agentmath.rl.sync import WeightSync
from agentmath.rl.update import PolicyUpdater, UpdateStats
from agentmath.rollout.contract import EngineControl, Iterations
from agentmath.rollout.records import RolloutStats
from agentmath.tracking import MetricsSink
from agentmath.train.plumbing import save_checkpoint

if TYPE_CHECKING:
    from agentmath.config import LoopConfig, RolloutConfig
    from agentmath.rl.batch import ScoredGroup, ScoredSample

log = logging.getLogger(__name__)


def bound_settings(config: RLConfig) -> BoundSettings:
    """Settings a checkpoint is bound to: resuming it under other values is refused."""
    return BoundSettings(lora=config.optim.lora, group_size=config.group_size,
                         model=config.model)


def stages_of(config: RLConfig) -> list[Stage]:
    """The run's stages (one from the loop budgets when none are configured)."""
    if not config.stages.stages:
        return [Stage(config.loop.max_total_tokens, config.loop.max_model_tokens,
                      config.loop.max_tool_calls, config.rollout.segment_tokens)]
    return [Stage(s.max_total_tokens, s.max_model_tokens, s.max_tool_calls,
                  s.segment_tokens if s.segment_tokens is not None
                  else config.rollout.segment_tokens) for s in config.stages.stages]


def stage_budgets(config: RLConfig, stage: Stage) -> tuple[LoopConfig, RolloutConfig]:
    """Loop and rollout configs of ``stage``."""
    loop = config.loop.model_copy(update={"max_total_tokens": stage.max_total_tokens,
                                          "max_model_tokens": stage.max_model_tokens,
                                          "max_tool_calls": stage.max_tool_calls})
    return loop, config.rollout.model_copy(update={"segment_tokens": stage.segment_tokens})


@dataclass(eq=False)
class Learner:
    """The trained side: the model (prepared by ``accelerator``), its tokenizer and the
    optimizer step (:class:`~agentmath.rl.update.PolicyUpdater`). Torch objects are ``Any``:
    this module does not import torch."""

    accelerator: Any
    model: Any
    tokenizer: Any
    updater: PolicyUpdater
    sharded: ShardedLearner | None = None  # optim.sharding 'fsdp': the collective operations

    @property
    def unwrapped(self) -> Any:
        """The model without the accelerator's wrapper (sharded: this rank's FSDP module)."""
        return self.accelerator.unwrap_model(self.model)

    def update(self, groups: list[ScoredGroup]) -> UpdateStats:
        """The optimizer step(s) on ``groups`` (sharded: every rank trains its share)."""
        if self.sharded is not None:
            return self.sharded.update(groups)
        return self.updater.update(groups)

    def saved(self, with_optimizer: bool = False) -> tuple[Any, dict[str, Any] | None]:
        """The model as generators and checkpoints take it: the unwrapped model, or a sharded
        learner's gathered unsharded copy and, ``with_optimizer``, its optimizer state keyed
        by parameter name (None unsharded: the optimizer saves its own)."""
        if self.sharded is None:
            return self.unwrapped, None
        return self.sharded.gathered(with_optimizer)


@dataclass(eq=False)
class Generators:
    """What samples the episodes: the backend of the local engine (None on Ray, where each
    worker has its own) and the weight sync that feeds it."""

    backend: Backend | None
    sync: WeightSync


@dataclass(eq=False)
class RLRun:
    """A run's live objects and progress (built by :func:`agentmath.rl.compose.open_run`)."""

    config: RLConfig
    out_dir: Path
    learner: Learner
    generators: Generators
    engine: EngineControl
    iterations: Iterations
    stream: RequestStream
    sampling: Sampling
    rewards: RewardModel
    controller: StageController
    sink: MetricsSink
    step: int = 0
    version: int = 0
    events: list[RunEvent] = field(default_factory=list)
    resumed_from: int | None = None
    last: StepMetrics | None = None
    #: what became of the resumed checkpoint's pending groups (``resumed_*``), counted in
    #: the first step's metrics
    carried: RolloutStats = field(default_factory=RolloutStats)

    async def push_weights(self) -> None:
        """Make the learner's weights live on the generators as the current version."""
        model, _ = self.learner.saved()
        name = await self.generators.sync.push(model, self.learner.tokenizer, self.version)
        if name:  # a LoRA adapter per version: requests must name the new one
            self.engine.use_model(name)

    async def run_step(self) -> StepMetrics:
        """One step (the trainer's module docstring); its metrics, logged to the sink."""
        cfg, started = self.config, time.monotonic()
        self.step += 1
        end = cfg.temperature.end if cfg.temperature.end is not None else cfg.temperature.start
        self.sampling.temperature = linear(cfg.temperature.start, end, self.step - 1, cfg.steps)
        self.sampling.step = self.step
        self.learner.unwrapped.eval()
        collected = await collect_groups(self.iterations, self.rewards, cfg.prompts_per_step,
                                         dynamic_sampling=cfg.dynamic_sampling,
                                         max_rounds=cfg.max_sampling_rounds,
                                         filters=FilterPlan.of(cfg, self.step),
                                         draw_factor=cfg.generation_batch_factor)
        collected.stats.add(self.carried)
        self.carried = RolloutStats()
        rolled = time.monotonic()
        events: list[RunEvent] = []
        upd = await self._update(collected, events)
        trained = time.monotonic()
        samples = collected.all_samples
        change = self.controller.observe(self.step, sum(s.truncated for s in samples),
                                         len(samples))
        if change is not None:
            self.engine.set_budgets(*stage_budgets(cfg, self.controller.stage))
            log.info("stage %d -> %d at step %d (truncation rate %.3f)", change.old,
                     change.new, change.step, change.rate)
            events.append(StageMove(change.step, change.old, change.new, change.rate,
                                    self.controller.stage))
        self.events += events
        metrics = self._metrics(collected, samples, upd, (started, rolled, trained), events)
        if cfg.dump_rollouts:
            write_rollout_dump(self.out_dir, self.step, collected)
        record = metrics.to_dict()
        self.sink.log(metrics.step, record, metrics.scalars())
        for event in events:
            self.sink.event(metrics.step, event.to_dict()["event"], event.to_dict())
        self.last = metrics
        return metrics

    async def _update(self, collected: Collected, events: list[RunEvent]) -> UpdateStats:
        """The optimizer step(s) on the collected groups, then the new weights pushed."""
        if not collected.groups:
            events.append(collected.no_update(self.step))
            return UpdateStats()
        backend, learner = self.generators.backend, self.learner
        if isinstance(backend, ModelThread):  # in-process: one thread, one OpenMP pool
            upd = await backend.run_on_model_thread(learner.update, collected.groups)
        else:
            upd = learner.update(collected.groups)
        self.version += 1
        await self.push_weights()
        self.engine.set_policy_version(self.version)
        return upd

    def _metrics(self, collected: Collected, samples: list[ScoredSample], upd: UpdateStats,
                 times: tuple[float, float, float], events: list[RunEvent]) -> StepMetrics:
        """``samples``: every sample of the step, trained, dropped or filtered out (the
        tool-call rate comes with the other sample figures of ``sample_stats``); ``times``:
        when the step started, its rollouts ended and its update ended."""
        started, rolled, trained = times
        done = time.monotonic()
        trained_samples = [s for g in collected.groups for s in g.samples]
        stats = sample_stats(samples)
        # the version that trained on them: _update has counted the update in already
        trained_at = self.version - (1 if collected.groups else 0)
        stale_max, stale_mean = staleness_stats(trained_samples, trained_at)
        prompts, prompts_dropped = collected.prompt_ids()
        return StepMetrics(
            step=self.step, policy_version=self.version, stage=self.controller.index,
            temperature=self.sampling.temperature, lr=upd.lr, **stats,
            **advantage_stats(collected.groups), loss=upd.loss, clip_frac=upd.clip_frac,
            is_weight_mean=upd.is_weight_mean, is_capped_frac=upd.is_capped_frac, kl=upd.kl,
            mismatch_kl=upd.mismatch_kl, mismatch_max=upd.mismatch_max,
            mismatch_masked=upd.mismatch_masked,
            entropy=upd.entropy, grad_norm=upd.grad_norm, loss_tokens=upd.loss_tokens,
            groups_trained=len(collected.groups), groups_dropped=len(collected.dropped),
            samples=len(trained_samples),
            samples_per_s=len(samples) / max(1e-9, rolled - started),
            rollout_s=rolled - started, train_s=trained - rolled, step_s=done - started,
            stale_dropped=collected.stats.dropped_groups,
            regenerated=collected.stats.regenerated, parked=collected.stats.parked,
            pass_rate_dropped=collected.pass_rate_dropped, void_dropped=collected.void_dropped,
            void_groups_dropped=collected.void_groups_dropped,
            roc_dropped=collected.roc_dropped, groups_surplus=len(collected.surplus),
            infra_excluded=collected.infra_excluded,
            staleness_max=stale_max, staleness_mean=stale_mean,
            stale_waited=collected.stats.stale_waited,
            resumed_kept=collected.stats.resumed_kept,
            resumed_continued=collected.stats.resumed_continued,
            resumed_regenerated=collected.stats.resumed_regenerated, prompts=prompts,
            prompts_dropped=prompts_dropped,
            extra=StepExtra(collected.rounds, sorted(
                {v for s in trained_samples for v in s.trajectory.policy_versions})),
            events=list(events))

    def checkpoint(self) -> None:
        """An atomic checkpoint of this step: weights, optimizer, schedule, RNG and the run
        state (:class:`~agentmath.rl.records.CheckpointState`)."""
        pending = self.iterations.pending_groups() + self.stream.requeued()
        state = CheckpointState(step=self.step, version=self.version, cursor=self.stream.cursor,
                                pending=pending,
                                stage=self.controller.state(), events=list(self.events),
                                config=bound_settings(self.config))
        learner = self.learner
        model, by_name = learner.saved(with_optimizer=True)
        save_checkpoint(self.out_dir, self.step, model, learner.tokenizer,
                        learner.updater.optimizer, learner.updater.scheduler,
                        state.to_payload(), self.config.keep_checkpoints,
                        optimizer_state=by_name)
