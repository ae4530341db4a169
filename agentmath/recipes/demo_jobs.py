"""The demo's jobs: each a process of its own in the demo's worker pool (SFT of one model, a
start grown again, one GRPO run, one model's evaluations), each taking one frozen record that
pickles (:class:`SFTJob`, :class:`StartJob`, :class:`GRPOJob`, :class:`EvalJob`); and the
GRPO run's config (:func:`rl_config`)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath import _loop as event_loop
from agentmath.config import LoopConfig, RolloutConfig, SandboxConfig
from agentmath.eval.config import EvalConfig
from agentmath.recipes.demo_config import FORMAT, TOOL_SYSTEM, DemoConfig
from agentmath.rl.records import StageMove

if TYPE_CHECKING:
    from agentmath.eval.results import RunMetrics
    from agentmath.rl.config import RLConfig


MAX_TOOL_CALLS = 6  # per episode, in evaluation and in GRPO's last stage
# episodes in flight per evaluation run: the model's batches fill up (a tiny model's decode
# step costs about the same for 64 rows as for 128, so wider batches need less CPU per sample)
EVAL_CONCURRENCY = 128


@dataclass(frozen=True, slots=True)
class EvalRun:
    """One evaluation of a model: the problem file ``data`` (its first ``limit`` problems;
    None: all), into the run dir ``out``, ``samples`` per problem at ``temperature`` (the
    default: greedy, one sample)."""

    data: str
    out: str
    samples: int = 1
    temperature: float = 0.0
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class EvalJob:
    """The evaluations of one model (``model_dir``, trained under the system prompt
    ``system``), run at once on one copy of the model and one sandbox."""

    cfg: DemoConfig
    model_dir: str
    system: str
    runs: tuple[EvalRun, ...]


@dataclass(frozen=True, slots=True)
class SFTJob:
    """SFT of a fresh tiny model on ``examples`` (written under the system prompt ``system``,
    stored with the model) into ``out``; ``seed``: the SFT's seed (None: the run's)."""

    cfg: DemoConfig
    examples: list[dict[str, Any]]
    tokenizer_dir: str
    out: str
    system: str
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class StartJob:
    """Another start of the tool model: its SFT, then the evaluations of its headroom."""

    sft: SFTJob
    headroom: tuple[EvalRun, ...]


@dataclass(frozen=True, slots=True)
class StartResult:
    """A start grown by :func:`start_job`: its model dir and its headroom runs' metrics."""

    model_dir: str
    headroom: tuple[RunMetrics, ...]


@dataclass(frozen=True, slots=True)
class GRPOJob:
    """One GRPO run from the tool model ``start`` on ``train_file`` into ``out`` (tool output
    masked from the loss or not); ``evaluate``: evaluations of its final model right after
    training (under the tool system prompt)."""

    cfg: DemoConfig
    start: str
    train_file: str
    masked: bool
    out: str
    evaluate: tuple[EvalRun, ...] = ()


@dataclass(frozen=True, slots=True)
class GRPOResult:
    """A GRPO run's final model dir, its budget-stage transitions (the ``stage`` events of
    the run) and the metrics of its ``evaluate`` runs."""

    model_dir: str
    transitions: list[StageMove]
    evaluated: tuple[RunMetrics, ...]


def rl_config(cfg: DemoConfig, model_dir: str, train_file: Path, *, masked: bool) -> RLConfig:
    """The demo's GRPO run: accuracy reward, void-turn filtering, async rollouts on the
    in-process model, two budget stages (tool calls ``rl_first_tool_calls`` -> 6) moved on by
    the truncation rate of one step's samples."""
    from agentmath.rl.config import (
        FilterConfig,
        GeneratorConfig,
        LossConfig,
        OptimConfig,
        RLConfig,
        RLDataConfig,
        StageConfig,
        StagesConfig,
        TemperatureSchedule,
    )
    from agentmath.rl.rewards import RewardSpec

    stages = [StageConfig(max_total_tokens=4096, max_model_tokens=cfg.eval_max_tokens,
                          max_tool_calls=calls)
              for calls in (min(cfg.rl_first_tool_calls, MAX_TOOL_CALLS), MAX_TOOL_CALLS)]
    return RLConfig(
        model=model_dir, format=FORMAT, data=RLDataConfig(dataset=str(train_file)),
        steps=cfg.rl_steps, group_size=cfg.rl_group_size, prompts_per_step=cfg.rl_prompts,
        seed=cfg.seed, rewards=[RewardSpec(name="accuracy", weight=1.0)],
        optim=OptimConfig(learning_rate=cfg.rl_learning_rate, bf16=cfg.bf16),
        temperature=TemperatureSchedule(start=cfg.rl_temperature),
        loss=LossConfig(mask_tool_tokens=masked, micro_batch_size=32),
        filters=FilterConfig(drop_void_turns=True),
        stages=StagesConfig(stages=stages, truncation_threshold=cfg.rl_stage_threshold,
                            window=cfg.rl_prompts * cfg.rl_group_size),
        loop=LoopConfig(system_prompt=TOOL_SYSTEM, max_model_tokens=cfg.eval_max_tokens,
                        max_tool_calls=MAX_TOOL_CALLS),
        rollout=RolloutConfig(mode="async", max_in_flight=128), device=cfg.device,
        generator=GeneratorConfig(max_batch=64), checkpoint_every=0, tensorboard=False,
        sandbox=_sandbox(cfg))


def _sandbox(cfg: DemoConfig) -> SandboxConfig:
    """The sandbox of the demo's evaluations and GRPO runs."""
    if cfg.sandbox_preload is None:
        return SandboxConfig()
    return SandboxConfig(preload=cfg.sandbox_preload)


def start_seed(seed: int, attempt: int) -> int:
    """The SFT seed (initialisation and data order) of the tool model's ``attempt``-th start
    (1-based): the run's seed for the first, seeds derived from it for the others."""
    if attempt == 1:
        return seed
    from agentmath.seeding import derive_seed

    return derive_seed(seed, "demo-start", attempt)


def sft_job(job: SFTJob) -> str:
    """One SFT run of a fresh tiny model (a process of its own): its final model dir."""
    import transformers

    from agentmath.train.grow import train_model

    _quiet()
    cfg = job.cfg
    tokenizer = transformers.AutoTokenizer.from_pretrained(job.tokenizer_dir)
    result = train_model(job.examples, tokenizer, Path(job.out), size=cfg.model_size,
                         steps=cfg.steps, batch_size=cfg.batch_size,
                         learning_rate=cfg.learning_rate, max_length=cfg.max_length,
                         seed=cfg.seed if job.seed is None else job.seed, progress=False,
                         device=cfg.device, bf16=cfg.bf16, system_prompts={FORMAT: job.system},
                         copy_steps=cfg.copy_steps)
    return str(result.final_dir)


def start_job(job: StartJob) -> StartResult:
    """Another start of the tool model (a process of its own): SFT from the attempt's seed,
    then its headroom runs."""
    model_dir = sft_job(job.sft)
    return StartResult(model_dir, eval_job(EvalJob(job.sft.cfg, model_dir, job.sft.system,
                                                   job.headroom)))


def grpo_job(job: GRPOJob) -> GRPOResult:
    """One GRPO run from the tool SFT model (a process of its own), then its ``evaluate``
    runs right away (so the run that ends first does not wait for the other)."""
    from agentmath.rl.trainer import train_rl

    _quiet()
    result = train_rl(rl_config(job.cfg, job.start, Path(job.train_file), masked=job.masked),
                      job.out, resume=False, progress=False)
    moves = [e for e in result.events if isinstance(e, StageMove)]
    final = str(result.final_dir)
    evaluated = eval_job(EvalJob(job.cfg, final, TOOL_SYSTEM, job.evaluate)) \
        if job.evaluate else ()
    return GRPOResult(final, moves, evaluated)


def _quiet() -> None:
    """No transformers progress bars (loading and saving a tiny model's weights) on the
    demo's screen: its stage messages say what runs."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def eval_job(job: EvalJob) -> tuple[RunMetrics, ...]:
    """The evaluations of one model (a process of its own), one metrics per run, in order.
    An earlier demo's samples in a run dir are cleared first: they belong to other models (an
    evaluation would resume from them)."""
    for run in job.runs:
        if Path(run.out).exists():
            shutil.rmtree(run.out)
    return event_loop.run(_evaluate(job))


async def _evaluate(job: EvalJob) -> tuple[RunMetrics, ...]:
    """Every run of ``job`` at once, on one model backend (its continuous batching fills its
    batches from all of them) and one sandbox."""
    import asyncio

    from agentmath.backends.hf import HFBackend
    from agentmath.eval.runner import run_eval
    from agentmath.sandbox.factory import open_sandbox

    cfg = job.cfg
    _quiet()
    backend = HFBackend(job.model_dir, max_batch=EVAL_CONCURRENCY * len(job.runs),
                        device=None if cfg.device == "auto" else cfg.device)
    try:
        # 64 sandbox sessions per run (an episode holds one from its first tool call; more
        # wait their turn), half its episodes in flight, as in the demo's GRPO runs
        sandbox_cfg = _sandbox(cfg).model_copy(update={"max_sessions": 64 * len(job.runs)})
        async with open_sandbox(sandbox_cfg) as sandbox:
            done = await asyncio.gather(*(
                run_eval(_eval_config(cfg, job, run), run.out, backend, sandbox=sandbox)
                for run in job.runs))
    finally:
        await backend.aclose()
    return tuple(result.metrics for result in done)


def _eval_config(cfg: DemoConfig, job: EvalJob, run: EvalRun) -> EvalConfig:
    return EvalConfig(dataset=run.data, model=job.model_dir, backend="hf", samples=run.samples,
                      temperature=run.temperature, seed=cfg.seed, concurrency=EVAL_CONCURRENCY,
                      limit=run.limit, sandbox=_sandbox(cfg),
                      loop=LoopConfig(system_prompt=job.system,
                                      max_model_tokens=cfg.eval_max_tokens,
                                      max_tool_calls=MAX_TOOL_CALLS))
