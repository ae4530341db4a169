"""The demo's jobs: each a process of its own in the demo's worker pool (SFT of one model, a
start grown again, one GRPO run, one evaluation), taking the demo's settings as plain data so
that they pickle; and the GRPO run's config (:func:`rl_config`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath import _loop as event_loop
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.eval.config import EvalConfig
from agentmath.recipes.demo_config import FORMAT, TOOL_SYSTEM, DemoConfig
from agentmath.rl.records import StageMove

if TYPE_CHECKING:
    from agentmath.eval.results import RunMetrics


MAX_TOOL_CALLS = 6  # per episode, in evaluation and in GRPO's last stage


async def _evaluate(cfg: DemoConfig, model_dir: str, system: str, data: Path, out: Path, *,
                    samples: int = 1, temperature: float = 0.0,
                    limit: int | None = None) -> RunMetrics:
    from agentmath.backends.hf import HFBackend
    from agentmath.eval.runner import run_eval

    ecfg = EvalConfig(dataset=str(data), model=model_dir, backend="hf", samples=samples,
                      temperature=temperature, seed=cfg.seed, concurrency=64, limit=limit,
                      loop=LoopConfig(system_prompt=system, max_model_tokens=cfg.eval_max_tokens,
                                      max_tool_calls=MAX_TOOL_CALLS),
                      **_sandbox(cfg))
    backend = HFBackend(model_dir, max_batch=64,
                        device=None if cfg.device == "auto" else cfg.device)
    try:
        return (await run_eval(ecfg, out, backend)).metrics
    finally:
        await backend.aclose()


def _sandbox(cfg: DemoConfig) -> dict[str, Any]:
    """The ``sandbox`` setting of the demo's evaluations and GRPO runs (none: the default)."""
    return {} if cfg.sandbox_preload is None else {
        "sandbox": SandboxConfig(preload=cfg.sandbox_preload)}


def rl_config(cfg: DemoConfig, model_dir: str, train_file: Path, *, masked: bool) -> Any:
    """The demo's GRPO run: accuracy reward, void-turn filtering, async rollouts on the
    in-process model, two budget stages (tool calls ``rl_first_tool_calls`` -> 6) moved on by
    the truncation rate of one step's samples."""
    from agentmath.rl.config import RLConfig

    samples = cfg.rl_prompts * cfg.rl_group_size
    stages = [{"max_total_tokens": 4096, "max_model_tokens": cfg.eval_max_tokens,
               "max_tool_calls": calls}
              for calls in (min(cfg.rl_first_tool_calls, MAX_TOOL_CALLS), MAX_TOOL_CALLS)]
    return RLConfig.model_validate({
        "model": model_dir, "format": FORMAT, "data": {"dataset": str(train_file)},
        "steps": cfg.rl_steps, "group_size": cfg.rl_group_size,
        "prompts_per_step": cfg.rl_prompts, "seed": cfg.seed,
        "rewards": [{"name": "accuracy", "weight": 1.0}],
        "optim": {"learning_rate": cfg.rl_learning_rate, "bf16": cfg.bf16},
        "temperature": {"start": cfg.rl_temperature},
        "loss": {"mask_tool_tokens": masked, "micro_batch_size": 32},
        "filters": {"drop_void_turns": True},
        "stages": {"stages": stages, "truncation_threshold": cfg.rl_stage_threshold,
                   "window": samples},
        "loop": {"system_prompt": TOOL_SYSTEM, "max_model_tokens": cfg.eval_max_tokens,
                 "max_tool_calls": MAX_TOOL_CALLS},
        "rollout": {"mode": "async", "max_in_flight": 128}, "device": cfg.device,
        "generator": {"max_batch": 64}, "checkpoint_every": 0, "tensorboard": False,
        **_sandbox(cfg)})


def start_seed(seed: int, attempt: int) -> int:
    """The SFT seed (initialisation and data order) of the tool model's ``attempt``-th start
    (1-based): the run's seed for the first, seeds derived from it for the others."""
    if attempt == 1:
        return seed
    from agentmath.seeding import derive_seed

    return derive_seed(seed, "demo-start", attempt)


def sft_job(cfg_data: dict[str, Any], examples: list[dict], tokenizer_dir: str, out: str,
            system: str, evaluate: tuple[str, str] | None = None,
            seed: int | None = None) -> tuple[str, RunMetrics | None]:
    """One SFT run of a fresh tiny model (a process of its own) on ``examples``, written under
    the system prompt ``system`` (stored with the model): its final model dir, and, with
    ``evaluate`` = (data, run dir), its greedy evaluation right after training (the text-only
    model's: it trains faster than the tool model, so its evaluation uses the core that would
    otherwise wait). ``seed``: the SFT's seed (default: the run's)."""
    import transformers

    from agentmath.train.grow import train_model

    cfg = DemoConfig.model_validate(cfg_data)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    result = train_model(examples, tokenizer, Path(out), size=cfg.model_size, steps=cfg.steps,
                         batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
                         max_length=cfg.max_length,
                         seed=cfg.seed if seed is None else seed, progress=False,
                         device=cfg.device, bf16=cfg.bf16, system_prompts={FORMAT: system},
                         copy_steps=cfg.copy_steps)
    metrics = None
    if evaluate is not None:
        data, run_dir = evaluate
        metrics = eval_job(cfg_data, str(result.final_dir), system, data, run_dir)
    return str(result.final_dir), metrics


def start_job(cfg_data: dict[str, Any], examples: list[dict], tokenizer_dir: str, out: str,
              test_file: str, attempt: int) -> tuple[str, str, RunMetrics, RunMetrics]:
    """Another start of the tool model (a process of its own), in ``out``: SFT from the
    attempt's seed, then its greedy evaluation and its headroom run, one after the other;
    returns its model dir, its greedy run's dir and the two evaluations."""
    cfg = DemoConfig.model_validate(cfg_data)
    model_dir, _ = sft_job(cfg_data, examples, tokenizer_dir, f"{out}/model-tool", TOOL_SYSTEM,
                           seed=start_seed(cfg.seed, attempt))
    run_dir = f"{out}/run-tool"
    greedy = eval_job(cfg_data, model_dir, TOOL_SYSTEM, test_file, run_dir)
    sampled = eval_job(cfg_data, model_dir, TOOL_SYSTEM, test_file, f"{out}/headroom",
                       cfg.headroom_k, cfg.rl_temperature, cfg.headroom_problems)
    return model_dir, run_dir, greedy, sampled


def grpo_job(cfg_data: dict[str, Any], start: str, train_file: str, masked: bool,
             out: str, evaluate: tuple[str, str, str] | None = None
             ) -> tuple[str, list[StageMove], RunMetrics | None]:
    """One GRPO run from the tool SFT model (a process of its own): its final model dir, its
    stage transitions (the ``stage`` events of the run) and, with ``evaluate`` = (system
    prompt, data, run dir), its greedy evaluation right after training (so the run that ends
    first does not wait for the other one to start its evaluation)."""
    from agentmath.rl.trainer import train_rl

    cfg = DemoConfig.model_validate(cfg_data)
    result = train_rl(rl_config(cfg, start, Path(train_file), masked=masked), out,
                      resume=False, progress=False)
    moves = [e for e in result.events if isinstance(e, StageMove)]
    metrics = None
    if evaluate is not None:
        system, data, run_dir = evaluate
        metrics = eval_job(cfg_data, str(result.final_dir), system, data, run_dir)
    return str(result.final_dir), moves, metrics


def eval_job(cfg_data: dict[str, Any], model_dir: str, system: str, data: str,
             out: str, samples: int = 1, temperature: float = 0.0,
             limit: int | None = None) -> RunMetrics:
    """Evaluation of one model on the held-out problems (a process of its own); greedy with
    one sample each unless told otherwise. An earlier demo's samples in ``out`` are cleared
    first: they belong to other models (an evaluation would resume from them)."""
    cfg = DemoConfig.model_validate(cfg_data)
    if Path(out).exists():
        shutil.rmtree(out)
    return event_loop.run(_evaluate(cfg, model_dir, system, Path(data), Path(out),
                                 samples=samples, temperature=temperature, limit=limit))
