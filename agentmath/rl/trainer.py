"""Agentic GRPO on the rollout engine: ``train_rl(config, out_dir)``.

One step, top to bottom (:meth:`agentmath.rl.run.RLRun.run_step`):

1. set the step's sampling temperature (linear schedule) and stage budgets;
2. collect ``prompts_per_step`` groups of G episodes from the rollout engine (sync lockstep or
   request-level async; partial rollout parks long episodes across steps within a staleness
   bound), score each sample with the weighted rewards, drop groups without reward variance
   and back-fill them (:mod:`agentmath.rl.rollouts`);
3. group advantages -> clipped, importance-corrected, masked policy loss -> optimizer step(s)
   (:mod:`agentmath.rl.update`);
4. push the weights to the generators and move the policy version (:mod:`agentmath.rl.sync`);
5. feed the truncation rate to the stage controller (budgets grow past the threshold);
6. log the metrics (:mod:`agentmath.tracking`: JSONL, TensorBoard, W&B) and, when due, an
   atomic checkpoint holding the model, optimizer, LR schedule, stage, data cursor and policy
   version (:class:`~agentmath.rl.records.CheckpointState`), from which a run
   killed with -9 resumes exactly (in sync mode bit-for-bit; with partial rollout, the groups
   drawn and not yet trained on come back first: finished samples kept, parked episodes
   continued from their saved progress; the rule is in docs/rl.md).

Every live object of a run is built in one place, :func:`agentmath.rl.compose.open_run`, as
one typed :class:`~agentmath.rl.run.RLRun`; this module drives it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from agentmath import _loop as event_loop
from agentmath._lazy import require
from agentmath.models.prompts import TrainedPrompts
from agentmath.rl.compose import open_run
from agentmath.rl.config import RLConfig
from agentmath.rl.records import RLResult, StepMetrics
from agentmath.rl.run import RLRun, stage_budgets, stages_of
from agentmath.rl.sharded import Order, tell
from agentmath.runs.files import STEP_METRICS_FILE
from agentmath.train.plumbing import list_checkpoints, progress_bar, save_final

__all__ = ["RLResult", "StepHook", "stage_budgets", "stages_of", "train_rl"]

StepHook = Callable[[StepMetrics], None]


async def _loop(run: RLRun, progress: bool, stop_after: int | None,
                on_step: StepHook | None) -> None:
    cfg = run.config
    bar, task = progress_bar("rl", progress, cfg.steps, run.step)
    # the servers may hold other weights (an earlier run's, or a version the killed run
    # pushed after its last checkpoint): start them on this run's
    await run.push_weights()
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


async def _train(config: RLConfig, out: Path, resume: bool, progress: bool,
                 stop_after: int | None, on_step: StepHook | None) -> RLRun:
    async with open_run(config, out, resume=resume) as run:
        await _loop(run, progress, stop_after, on_step)
    return run


def _final_prompts(config: RLConfig) -> TrainedPrompts:
    """The system prompts the final model is stored with (:mod:`agentmath.models.prompts`):
    its start model's, and this run's prompt for its format when the run names one."""
    stored = TrainedPrompts.read(config.model) or TrainedPrompts()
    if config.loop.system_prompt is not None:
        stored = stored.with_prompt(config.format, config.loop.system_prompt)
    return stored


def train_rl(config: RLConfig, out_dir: str | Path, *, progress: bool = True,
             resume: bool = True, stop_after: int | None = None,
             on_step: StepHook | None = None) -> RLResult:
    """Run agentic GRPO (see the module docstring); resumes from the newest checkpoint in
    ``out_dir`` unless ``resume`` is False (then the run's old checkpoints and metrics are
    deleted). ``stop_after`` ends after that step as a kill would (no final model)."""
    started, out = time.monotonic(), Path(out_dir)
    if config.ray is not None:
        require("ray", "ray")  # a missing extra is said before any model is loaded
    if config.optim.sharding == "fsdp" and int(os.environ.get("RANK", "0")) > 0:
        return _follow(config, out, resume)
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        for stale in [*out.glob("checkpoint-*"), out / STEP_METRICS_FILE,
                      out / "tensorboard"]:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)
    (out / "rl_config.json").write_text(config.model_dump_json(indent=2) + "\n")
    prompts = _final_prompts(config)  # read before training: a bad file fails the run early
    # an error on rank 0 ends its process, and the launcher then ends the other ranks
    run = event_loop.run(_train(config, out, resume, progress, stop_after, on_step))
    result = _finish(config, out, run, prompts, started)
    if config.optim.sharding == "fsdp":
        tell(Order("stop", result=result))
    return result


def _finish(config: RLConfig, out: Path, run: RLRun, prompts: TrainedPrompts,
            started: float) -> RLResult:
    """The last checkpoint and the final model of a run that ended, and its result."""
    if config.checkpoint_every == 0 and run.step >= config.steps:
        run.checkpoint()
    final = None
    if run.step >= config.steps:
        final, _ = save_final(out, run.learner.saved()[0], run.learner.tokenizer,
                              config.optim.lora)
        if prompts.prompts:
            prompts.write(final)
    return RLResult(
        steps=run.step, policy_version=run.version, stage=run.controller.index,
        out_dir=str(out), final_dir=str(final) if final else None,
        metrics=str(out / STEP_METRICS_FILE),
        checkpoints=[str(p) for _, p in list_checkpoints(out)],
        resumed_from=run.resumed_from, wall_time_s=time.monotonic() - started,
        last=run.last, events=run.events)


def _follow(config: RLConfig, out: Path, resume: bool) -> RLResult:
    """A rank other than 0 of a sharded run: its shards of the learner, carrying out rank 0's
    orders (:mod:`agentmath.rl.sharded`) until the run ends; rank 0's result."""
    from agentmath.rl.compose import build_learner, learner_accelerator

    learner, _, _ = build_learner(config, learner_accelerator(config), out, resume)
    if learner.sharded is None:  # build_learner shards whenever optim.sharding is 'fsdp'
        raise RuntimeError("a sharded run's learner was built unsharded")
    result = learner.sharded.follow()
    if result is None:
        raise RuntimeError("rank 0 of the sharded run stopped without a result")
    return result
