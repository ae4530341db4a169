"""Agentic GRPO on the rollout engine: ``train_rl(config, out_dir)``.

One step, top to bottom (:meth:`_Run.step`):

1. set the step's sampling temperature (linear schedule) and stage budgets;
2. collect ``prompts_per_step`` groups of G episodes from the rollout engine (sync lockstep or
   request-level async; partial rollout parks long episodes across steps within a staleness
   bound), score each sample with the weighted rewards, drop groups without reward variance
   and back-fill them (:mod:`agentmath.rl.rollouts`);
3. group advantages -> clipped, importance-corrected, masked policy loss -> optimizer step(s)
   (:mod:`agentmath.rl.update`);
4. push the weights to the generators and move the policy version (:mod:`agentmath.rl.sync`);
5. feed the truncation rate to the stage controller (budgets grow past the threshold);
6. write the metrics (JSONL, TensorBoard) and, when due, an atomic checkpoint holding the
   model, optimizer, LR schedule, stage, data cursor and policy version, from which a run
   killed with -9 resumes exactly (in sync mode bit-for-bit; with partial rollout, groups that
   were parked at the checkpoint are rerun from scratch first, since live episodes cannot be
   saved).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentmath._lazy import require
from agentmath.backends.base import ModelThread
from agentmath.config import LoopConfig, RolloutConfig
from agentmath.rl.config import RLConfig
from agentmath.rl.filters import FilterPlan
from agentmath.rl.metrics import MetricsWriter, StepMetrics, advantage_stats, sample_stats
from agentmath.rl.rewards import RewardModel
from agentmath.rl.rollouts import (
    RequestStream,
    Sampling,
    collect_groups,
    open_rollouts,
    served_name,
)
from agentmath.rl.schedules import Stage, StageController, linear, lr_factor
from agentmath.rl.update import PolicyUpdater, UpdateStats
from agentmath.runs.files import STEP_METRICS_FILE
from agentmath.train.plumbing import (
    build_optimizer,
    list_checkpoints,
    load_for_training,
    progress_bar,
    restore_checkpoint,
    save_checkpoint,
    save_final,
)

log = logging.getLogger(__name__)
StepHook = Callable[[StepMetrics], None]


def structural(config: RLConfig) -> dict[str, Any]:
    """Settings a checkpoint is bound to: resuming it under other values is refused."""
    return {"lora": config.optim.lora, "group_size": config.group_size, "model": config.model}


@dataclass
class RLResult:
    """What a run did and where it put things."""

    steps: int
    policy_version: int
    stage: int
    out_dir: str
    final_dir: str | None  # None when stopped early (stop_after)
    metrics: str
    checkpoints: list[str]
    resumed_from: int | None
    wall_time_s: float
    last: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


class _Run:
    """The live objects of one run (built by :func:`_setup`)."""

    def __init__(self, config: RLConfig, out_dir: Path) -> None:
        self.config = config
        self.out_dir = out_dir
        self.step = 0
        self.version = 0
        self.events: list[dict[str, Any]] = []
        self.resumed_from: int | None = None
        self.last: StepMetrics | None = None
        # set by _setup
        self.accelerator: Any = None
        self.model: Any = None
        self.tokenizer: Any = None
        self.updater: PolicyUpdater
        self.backend: Any = None
        self.sync: Any = None
        self.pool: Any = None
        self.engine: Any = None
        self.rollout: Any = None
        self.stream: RequestStream
        self.sampling: Sampling
        self.rewards: RewardModel
        self.controller: StageController
        self.writer: MetricsWriter

    @property
    def unwrapped(self) -> Any:
        return self.accelerator.unwrap_model(self.model)

    # ------------------------------------------------------------------ one step
    async def run_step(self) -> StepMetrics:
        cfg, started = self.config, time.monotonic()
        self.step += 1
        end = cfg.temperature.end if cfg.temperature.end is not None else cfg.temperature.start
        self.sampling.temperature = linear(cfg.temperature.start, end, self.step - 1, cfg.steps)
        self.sampling.step = self.step
        self.unwrapped.eval()
        collected = await collect_groups(self.rollout, self.rewards, cfg.prompts_per_step,
                                         dynamic_sampling=cfg.dynamic_sampling,
                                         max_rounds=cfg.max_sampling_rounds,
                                         filters=FilterPlan.of(cfg, self.step))
        rolled = time.monotonic()
        events: list[dict[str, Any]] = []
        upd = UpdateStats()
        if collected.groups:
            if isinstance(self.backend, ModelThread):  # in-process: one thread, one OpenMP pool
                upd = await self.backend.run_on_model_thread(self.updater.update,
                                                             collected.groups)
            else:
                upd = self.updater.update(collected.groups)
            self.version += 1
            name = await self.sync.push(self.unwrapped, self.tokenizer, self.version)
            if name:  # a LoRA adapter per version: requests must name the new one
                self.engine.use_model(name)
            self.engine.set_policy_version(self.version)
        else:
            events.append({"event": "no_update", "step": self.step,
                           "why": "no group with reward variance"})
        trained = time.monotonic()
        samples = collected.all_samples
        change = self.controller.observe(self.step, sum(s.truncated for s in samples),
                                         len(samples))
        if change is not None:
            self.engine.set_budgets(*stage_budgets(cfg, self.controller.stage))
            event = {"event": "stage", **asdict(change), "budgets": asdict(self.controller.stage)}
            log.info("stage %d -> %d at step %d (truncation rate %.3f)", change.old,
                     change.new, change.step, change.rate)
            events.append(event)
        self.events += events
        metrics = self._metrics(collected, samples, upd, started, rolled, trained)
        self.writer.write(metrics, events)
        self.last = metrics
        return metrics

    def _metrics(self, collected: Any, samples: list[Any], upd: UpdateStats, started: float,
                 rolled: float, trained: float) -> StepMetrics:
        """``samples``: every sample of the step, trained, dropped or filtered out (the
        tool-call rate comes with the other sample figures of ``sample_stats``)."""
        done = time.monotonic()
        trained_samples = [s for g in collected.groups for s in g.samples]
        stats = sample_stats(samples)
        return StepMetrics(
            step=self.step, policy_version=self.version, stage=self.controller.index,
            temperature=self.sampling.temperature, lr=upd.lr, **stats,
            **advantage_stats(collected.groups), loss=upd.loss, clip_frac=upd.clip_frac,
            is_weight_mean=upd.is_weight_mean, is_capped_frac=upd.is_capped_frac, kl=upd.kl,
            entropy=upd.entropy, grad_norm=upd.grad_norm, loss_tokens=upd.loss_tokens,
            groups_trained=len(collected.groups), groups_dropped=len(collected.dropped),
            samples=len(trained_samples),
            samples_per_s=len(samples) / max(1e-9, rolled - started),
            rollout_s=rolled - started, train_s=trained - rolled, step_s=done - started,
            stale_dropped=collected.stats.dropped_groups,
            regenerated=collected.stats.regenerated, parked=collected.stats.parked,
            pass_rate_dropped=collected.pass_rate_dropped, void_dropped=collected.void_dropped,
            void_groups_dropped=collected.void_groups_dropped,
            roc_dropped=collected.roc_dropped,
            extra={"rounds": collected.rounds, "sample_versions": sorted(
                {v for s in trained_samples for v in s.trajectory.policy_versions})})

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> None:
        state = {"config": structural(self.config),
                 "version": self.version, "cursor": self.stream.cursor,
                 "requeue": self.rollout.pending_task_ids(),
                 "stage": self.controller.state_dict(), "events": json.dumps(self.events)}
        save_checkpoint(self.out_dir, self.step, self.unwrapped, self.tokenizer,
                        self.updater.optimizer, self.updater.scheduler, state,
                        self.config.keep_checkpoints)


def _accelerator(config: RLConfig) -> Any:
    accelerate = require("accelerate", "train")
    torch = require("torch", "train")
    cpu = config.device == "cpu" or (config.device == "auto" and not torch.cuda.is_available())
    return accelerate.Accelerator(cpu=cpu, mixed_precision="bf16" if config.optim.bf16 else "no")


def _model_and_optimizer(run: _Run, resume: bool) -> None:
    """Model (LoRA optional), reference copy for KL, optimizer + schedule; restore if any."""
    cfg = run.config
    tasks = _tasks(cfg)  # a bad data file fails before any model is loaded
    model, tokenizer = load_for_training(
        cfg.model, None, seed=cfg.seed, lora=cfg.optim.lora, lora_r=cfg.optim.lora_r,
        lora_alpha=cfg.optim.lora_alpha, lora_dropout=cfg.optim.lora_dropout, what="rl")
    device = run.accelerator.device
    model = model.to(device)
    ref = None
    if cfg.loss.kl_coef > 0:
        ref = copy.deepcopy(model).eval().requires_grad_(False)
    total = cfg.steps * cfg.loss.mini_batches
    o = cfg.optim
    optimizer, scheduler = build_optimizer(
        model, o.learning_rate, o.weight_decay,
        lambda done: lr_factor(done, o.warmup_steps, total, o.decay, o.min_lr_factor))
    found = list_checkpoints(run.out_dir) if resume else []
    state: dict[str, Any] = {}
    if found:
        run.resumed_from, path = found[-1]
        state = restore_checkpoint(path, model, optimizer, scheduler, lora=o.lora,
                                   device=device, structural=structural(cfg))
        run.step, run.version = int(state["step"]), int(state["version"])
        run.events = json.loads(state["events"])
    model, optimizer = run.accelerator.prepare(model, optimizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    run.model, run.tokenizer = model, tokenizer
    run.updater = PolicyUpdater(cfg, model, optimizer, scheduler, run.accelerator, pad, ref)
    run.controller = StageController(stages_of(cfg), threshold=cfg.stages.truncation_threshold,
                                     window=cfg.stages.window)
    if state:
        run.controller.load_state_dict(state["stage"])
    run.stream = RequestStream(tasks, cfg.group_size, seed=cfg.seed,
                               shuffle=cfg.data.shuffle, cursor=int(state.get("cursor", 0)),
                               requeue=list(state.get("requeue", [])),
                               oversample=cfg.filters.oversample)


def _tasks(cfg: RLConfig) -> list[Any]:
    from agentmath.datasets import load_tasks

    d = cfg.data
    return load_tasks(d.dataset, data_dir=d.data_dir, limit=d.limit,
                      problem_field=d.problem_field, answer_field=d.answer_field,
                      id_field=d.id_field, allow_hub=False)


def _generators(run: _Run) -> None:
    """The backend the engine samples from and the weight sync that feeds it."""
    cfg = run.config
    if cfg.generator.backend == "hf":
        from agentmath.backends.hf import HFBackend
        from agentmath.rl.sync import InProcessSync

        run.backend = HFBackend(run.unwrapped, run.tokenizer, max_batch=cfg.generator.max_batch,
                                continuous=cfg.generator.continuous,
                                prefix_cache_rows=cfg.generator.prefix_cache_rows)
        run.sync = InProcessSync(run.backend.model)
        return
    from agentmath.backends import make_backend
    from agentmath.rl.sync_vllm import VLLMWeightSync

    g = cfg.generator
    name = served_name(cfg)
    if cfg.ray is None:  # on Ray, every worker has its own client of the servers
        run.backend = make_backend("openai", name, base_url=g.base_urls,
                                   timeout_s=g.http_timeout_s)
    run.sync = VLLMWeightSync(g.base_urls, g.sync_dir or run.out_dir / "weights",
                              lora=cfg.optim.lora, served_name=name)


async def _loop(run: _Run, progress: bool, stop_after: int | None,
                on_step: StepHook | None) -> None:
    cfg = run.config
    _generators(run)
    loop_cfg, rollout_cfg = stage_budgets(cfg, run.controller.stage)
    run.sampling = Sampling(run.stream, top_p=cfg.temperature.top_p)
    run.rewards = RewardModel(cfg.rewards)
    bar, task = progress_bar("rl", progress, cfg.steps, run.step)
    try:
        async with open_rollouts(cfg, run.backend, run.stream, run.sampling, loop_cfg,
                                 rollout_cfg, run.version) as (run.engine, run.rollout):
            # the servers may hold other weights (an earlier run's, or a version the killed
            # run pushed after its last checkpoint): start them on this run's
            name = await run.sync.push(run.unwrapped, run.tokenizer, run.version)
            if name:
                run.engine.use_model(name)
            with bar:
                while run.step < cfg.steps and (stop_after is None or run.step < stop_after):
                    m = await run.run_step()
                    if cfg.checkpoint_every and (run.step % cfg.checkpoint_every == 0
                                                 or run.step == cfg.steps):
                        run.checkpoint()
                    bar.update(task, completed=run.step, stats=(
                        f"reward {m.reward_mean:.3f} · acc {m.accuracy:.2f} · "
                        f"stage {m.stage} · dropped {m.groups_dropped}"))
                    if on_step is not None:
                        on_step(m)
    finally:
        await run.sync.aclose()
        if run.backend is not None:  # none on Ray: each worker closes its own
            await run.backend.aclose()


def train_rl(config: RLConfig, out_dir: str | Path, *, progress: bool = True,
             resume: bool = True, stop_after: int | None = None,
             on_step: StepHook | None = None) -> RLResult:
    """Run agentic GRPO (see the module docstring); resumes from the newest checkpoint in
    ``out_dir`` unless ``resume`` is False (then the run's old checkpoints and metrics are
    deleted). ``stop_after`` ends after that step as a kill would (no final model)."""
    started, out = time.monotonic(), Path(out_dir)
    if config.ray is not None:
        require("ray", "ray")  # a missing extra is said before any model is loaded
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        for stale in [*out.glob("checkpoint-*"), out / STEP_METRICS_FILE,
                      out / "tensorboard"]:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)
    (out / "rl_config.json").write_text(config.model_dump_json(indent=2) + "\n")
    run = _Run(config, out)
    run.accelerator = _accelerator(config)
    _model_and_optimizer(run, resume)
    run.writer = MetricsWriter(out, tensorboard=config.tensorboard, resume_step=run.step)
    try:
        asyncio.run(_loop(run, progress, stop_after, on_step))
    finally:
        run.writer.close()
    if config.checkpoint_every == 0 and run.step >= config.steps:
        run.checkpoint()
    final = None
    if run.step >= config.steps:
        final, _ = save_final(out, run.unwrapped, run.tokenizer, config.optim.lora)
    return RLResult(
        steps=run.step, policy_version=run.version, stage=run.controller.index,
        out_dir=str(out), final_dir=str(final) if final else None,
        metrics=str(run.writer.path), checkpoints=[str(p) for _, p in list_checkpoints(out)],
        resumed_from=run.resumed_from, wall_time_s=time.monotonic() - started,
        last=run.last.to_dict() if run.last else None, events=run.events)
