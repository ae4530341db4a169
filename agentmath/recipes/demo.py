"""The demo recipe: grow tiny models on the CPU; show that tool use beats text alone, that agentic
GRPO measurably improves the tool model, and test DeepMath's choice of training on tool output.

Read top to bottom; each stage is a call into the library:

1. generate seeded multi-step word problems with big numbers, split train / test;
2. code injection: turn each training chain-of-thought into a tool trajectory, executing every
   snippet in the sandbox and keeping only verified ones;
3. build a tokenizer on the training text and two identical tiny Qwen3 models;
4. SFT one on the text chain-of-thought; SFT the other on a **mixture**: ``text_share`` of its
   trajectories do the arithmetic in text, the rest run it as code (tool output masked from the
   loss). The mixed model chooses between text and code with real probability at every step of
   a solution, and only the code path gets 3-4 digit products right: a decision under
   uncertainty that the accuracy reward resolves (RL teaches *when* to use the tool). The
   models are ``nano`` (0.14 M parameters), trained 1,400 steps: 740-860 steps past the point
   at which the tool model learns to copy numbers into code (seeds 0-2), where its pass@k has
   stopped rising (seed 3 never learns it, and the demo then shows nothing); the ``micro``
   design before it sat 75-150 steps past a sharper edge, and another machine's float kernels
   moved it (docs/demo.md);
5. measure the start's headroom: greedy pass@1, and pass@k at the RL temperature, on held-out
   problems (RL sharpens what sampling can already sometimes do);
6. agentic GRPO from the mixed model on the training problems (accuracy reward, void-turn
   filtering, two budget stages: a tight tool-call budget first, grown automatically when the
   truncation rate passes the threshold), twice: tool output masked from the loss, and NOT
   masked (the ablation);
7. evaluate all four on the held-out problems through the real agent loop, sandbox and
   evaluation harness (with 95% CIs); write the report (comparison, plots, training curves
   with the stage transitions, HTML viewer) and save the best tool model for ``solve``.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from agentmath import _loop as event_loop
from agentmath.config import EvalConfig, LoopConfig, StrictModel
from agentmath.recipes._parallel import run_parallel, worker_pool
from agentmath.recipes.summary import Conversion, DemoSummary, Headroom, ModelRow, ReportFiles
from agentmath.rl.records import StageMove

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from agentmath.eval.results import RunMetrics

TOOL_SYSTEM = "Solve the problem. Run Python in <code> blocks; results come back in <interpreter>."
TEXT_SYSTEM = "Solve the problem step by step."
FORMAT = "code_interpreter"


class DemoConfig(StrictModel):
    """Sizes and budgets of the demo (defaults finish in minutes on 2 CPU cores)."""

    seed: int = Field(0, ge=0, description="Seeds data, models, training and sampling.")
    train_problems: int = Field(1500, ge=10, le=1_000_000, description="Training problems.")
    test_problems: int = Field(300, ge=5, le=100_000, description=(
        "Held-out problems (300: a 10-point difference is well outside the noise)."))
    model_size: str = Field("nano", description=(
        "A size from agentmath.models.tiny.SIZES (nano: 0.14 M parameters, about a quarter "
        "of micro's SFT step; docs/demo.md)."))
    max_digits: int = Field(3, ge=3, le=6, description=(
        "Largest operand size in digits (3-digit numbers and up defeat mental arithmetic)."))
    steps: int = Field(1400, ge=1, le=10**7, description=(
        "SFT steps for each model (same); the default sits 700-860 steps past the point at "
        "which the nano model learns to copy numbers on seeds 0-2 and 4 (seed 3 never "
        "learns it: docs/demo.md)."))
    text_share: float = Field(0.7, ge=0, le=1, description=(
        "Share of the tool model's SFT trajectories that do the arithmetic in text instead of "
        "code (seeded per problem): the decision GRPO learns to make."))
    batch_size: int = Field(16, ge=1, le=4096, description="SFT batch size.")
    learning_rate: float = Field(4e-3, gt=0, le=1, description="SFT peak learning rate.")
    max_length: int = Field(512, ge=64, le=8192, description="Tokens per training example.")
    eval_max_tokens: int = Field(320, ge=16, le=8192, description="Model tokens per episode.")
    vocab_size: int = Field(1024, ge=300, le=65536, description="Tokenizer vocabulary size.")
    rl_steps: int = Field(16, ge=0, le=10**6, description="GRPO steps (0: no RL stage).")
    rl_group_size: int = Field(8, ge=2, le=256, description="GRPO samples per prompt.")
    rl_prompts: int = Field(8, ge=1, le=4096, description="GRPO prompts per step.")
    rl_learning_rate: float = Field(1e-4, gt=0, le=1, description="GRPO learning rate.")
    rl_temperature: float = Field(1.0, gt=0, le=5, description="GRPO sampling temperature.")
    rl_first_tool_calls: int = Field(2, ge=1, le=1000, description=(
        "Tool-call budget of GRPO's first stage (the second has 6): a 3-step solution in code "
        "is truncated there, so the truncation rate passes the threshold and the budget grows."))
    rl_stage_threshold: float = Field(0.05, gt=0, le=1, description=(
        "Truncation rate (over one step's samples) that moves GRPO to its next stage."))
    headroom_problems: int = Field(100, ge=1, le=100_000, description=(
        "Held-out problems on which the start's pass@k at the RL temperature is measured."))
    headroom_k: int = Field(8, ge=1, le=256, description="k of that pass@k (samples each).")
    device: str = Field("cpu", pattern=r"^(cpu|auto|cuda(:[0-9]+)?)$", description=(
        "Where SFT, GRPO and evaluation run: 'cpu' (the README's figures were measured "
        "there, one core per stage), 'cuda', 'cuda:N', or 'auto' (cuda when there is one)."))
    bf16: bool = Field(False, description=(
        "bfloat16 autocast in SFT and GRPO updates (weights and optimizer stay fp32; decoding "
        "stays fp32); for a GPU, or a CPU with bf16 instructions (AVX512-BF16, AMX). It weakens "
        "the demo's start: on an H200 in bf16 seed 0 never learned to copy numbers into code "
        "(0% after GRPO; fp32 94.3%; docs/gpu.md)."))

    @field_validator("model_size")
    @classmethod
    def _known_size(cls, size: str) -> str:
        from agentmath.models.tiny import known_size

        return known_size(size)


Stage = Callable[[str], None]


MAX_TOOL_CALLS = 6  # per episode, in evaluation and in GRPO's last stage


async def _evaluate(cfg: DemoConfig, model_dir: str, system: str, data: Path, out: Path, *,
                    samples: int = 1, temperature: float = 0.0,
                    limit: int | None = None) -> RunMetrics:
    from agentmath.backends.hf import HFBackend
    from agentmath.eval.runner import run_eval

    ecfg = EvalConfig(dataset=str(data), model=model_dir, backend="hf", samples=samples,
                      temperature=temperature, seed=cfg.seed, concurrency=64, limit=limit,
                      loop=LoopConfig(system_prompt=system, max_model_tokens=cfg.eval_max_tokens,
                                      max_tool_calls=MAX_TOOL_CALLS))
    backend = HFBackend(model_dir, max_batch=64,
                        device=None if cfg.device == "auto" else cfg.device)
    try:
        return (await run_eval(ecfg, out, backend)).metrics
    finally:
        await backend.aclose()


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
        "generator": {"max_batch": 64}, "checkpoint_every": 0, "tensorboard": False})


def sft_job(cfg_data: dict[str, Any], examples: list[dict], tokenizer_dir: str, out: str,
            evaluate: tuple[str, str, str] | None = None) -> tuple[str, RunMetrics | None]:
    """One SFT run of a fresh tiny model (a process of its own): its final model dir, and,
    with ``evaluate`` = (system prompt, data, run dir), its greedy evaluation right after
    training (the text-only model's: it trains faster than the tool model, so its evaluation
    uses the core that would otherwise wait)."""
    import transformers

    from agentmath.recipes.tool_model import train_model

    cfg = DemoConfig.model_validate(cfg_data)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    result = train_model(examples, tokenizer, Path(out), size=cfg.model_size, steps=cfg.steps,
                         batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
                         max_length=cfg.max_length, seed=cfg.seed, progress=False,
                         device=cfg.device, bf16=cfg.bf16)
    metrics = None
    if evaluate is not None:
        system, data, run_dir = evaluate
        metrics = eval_job(cfg_data, str(result.final_dir), system, data, run_dir)
    return str(result.final_dir), metrics


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


def check_device(cfg: DemoConfig) -> None:
    """Fail before any work when ``cfg.device`` names a CUDA device this machine lacks."""
    if not cfg.device.startswith("cuda"):
        return
    from agentmath._lazy import require
    from agentmath.errors import ConfigError

    torch = require("torch", "train")
    index = int(cfg.device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ConfigError(f"demo device {cfg.device!r}: this machine has "
                          f"{torch.cuda.device_count()} CUDA device(s)")


# imported by the demo's two workers while it prepares its data
WORKER_PRELOAD = ("transformers", "agentmath.train.sft", "agentmath.rl.trainer",
                  "agentmath.eval.runner", "agentmath.backends.hf")


def run_demo(cfg: DemoConfig, out: Path, save_model_to: Path | None,
             stage: Stage = print) -> DemoSummary:
    """Run every stage; returns the summary (also written to ``out/summary.json``). Each
    stage's two jobs run side by side in one pool of two workers kept for the whole demo."""
    check_device(cfg)
    with worker_pool(2, preload=WORKER_PRELOAD) as pool:
        return _run_stages(cfg, out, save_model_to, stage, pool)


@dataclass(frozen=True)
class DemoData:
    """What the demo trains and evaluates on (written under its ``out`` folder)."""

    mixed: list[dict]  # the tool model's SFT records: verified tool trajectories and text
    text_examples: list[dict]  # the text-only model's: every problem as text chain-of-thought
    conversion: Conversion  # the code injection's funnel (kept, dropped, text)
    test_file: Path
    train_file: Path
    tokenizer_dir: Path
    n_test: int


def prepare_data(cfg: DemoConfig, out: Path, stage: Stage = print) -> DemoData:
    """The demo's problems (train/test JSONL), both SFT mixtures and the tokenizer."""
    from agentmath.data.synthetic import to_task_rows
    from agentmath.jsonl import write_jsonl
    from agentmath.models.tiny import build_tokenizer
    from agentmath.recipes.tool_model import (
        corpus_texts,
        make_problems,
        text_problem_ids,
        tool_records,
    )
    from agentmath.synth.inject import text_only_example

    out.mkdir(parents=True, exist_ok=True)
    stage("generating problems")
    train, test = make_problems(cfg.seed, cfg.train_problems, cfg.test_problems, cfg.max_digits)
    write_jsonl(to_task_rows(test), out / "test.jsonl")
    write_jsonl(to_task_rows(train), out / "train.jsonl")
    # the tool model's data: a seeded text_share of the problems as text chain-of-thought
    # (under the tool system prompt), the rest as verified tool trajectories
    text_ids = text_problem_ids(train, cfg.text_share, cfg.seed)
    stage(f"code injection: executing {len(train) - len(text_ids)} trajectories in the "
          f"sandbox ({len(text_ids)} more problems stay text chain-of-thought)")
    mixed, by_format = event_loop.run(tool_records(
        train, [FORMAT], system_prompts={FORMAT: TOOL_SYSTEM}, text_ids=text_ids))
    text_examples = [text_only_example(p, TEXT_SYSTEM) for p in train]
    stage("building the tokenizer and two identical tiny models")
    tokenizer = build_tokenizer(corpus_texts(mixed + text_examples),
                                vocab_size=cfg.vocab_size)
    tokenizer.save_pretrained(str(out / "tokenizer"))
    return DemoData(mixed=mixed, text_examples=text_examples,
                    conversion=Conversion.from_dict(by_format[FORMAT]),
                    test_file=out / "test.jsonl", train_file=out / "train.jsonl",
                    tokenizer_dir=out / "tokenizer", n_test=len(test))


def _run_stages(cfg: DemoConfig, out: Path, save_model_to: Path | None, stage: Stage,
                pool: ProcessPoolExecutor | None) -> DemoSummary:
    started = time.monotonic()
    prepared = prepare_data(cfg, out, stage)
    mixed, text_examples, n_test = prepared.mixed, prepared.text_examples, prepared.n_test
    data = cfg.model_dump()
    stage(f"SFT of the text-only and the tool model side by side ({cfg.steps} steps each; the "
          f"tool model's data: {1 - cfg.text_share:.0%} code, {cfg.text_share:.0%} text)")
    test_file, tokenizer_dir = str(prepared.test_file), str(prepared.tokenizer_dir)
    (text_dir, text_metrics), (tool_dir, _) = run_parallel(sft_job, pool=pool, jobs=[
        (data, text_examples, tokenizer_dir, str(out / "model-text-only"),
         (TEXT_SYSTEM, test_file, str(out / "run-text-only"))),
        (data, mixed, tokenizer_dir, str(out / "model-tool"))])
    models = {"text-only": text_dir, "tool": tool_dir}
    stage(f"the tool model's headroom: greedy on {n_test} held-out problems, pass@"
          f"{cfg.headroom_k} at temperature {cfg.rl_temperature} on "
          f"{min(cfg.headroom_problems, n_test)}")
    greedy, sampled = run_parallel(eval_job, pool=pool, jobs=[
        (data, tool_dir, TOOL_SYSTEM, test_file, str(out / "run-tool")),
        (data, tool_dir, TOOL_SYSTEM, test_file, str(out / "headroom"), cfg.headroom_k,
         cfg.rl_temperature, cfg.headroom_problems)])
    headroom = Headroom.measure(cfg.headroom_k, cfg.rl_temperature, greedy, sampled)
    stage(f"headroom: greedy pass@1 {headroom.greedy_pass_at_1:.1%}, pass@{cfg.headroom_k} "
          f"{headroom.pass_at_k:.1%} at temperature {cfg.rl_temperature}")
    transitions: dict[str, list[StageMove]] = {}
    results = {"text-only": text_metrics, "tool": greedy}
    if cfg.rl_steps:
        stage(f"GRPO from the tool model, tool output masked and NOT masked, side by side "
              f"({cfg.rl_steps} steps of {cfg.rl_prompts} x {cfg.rl_group_size} episodes), "
              f"each then evaluated on {n_test} held-out problems")
        train_file, names = str(prepared.train_file), ("tool + grpo", "tool + grpo (unmasked)")
        done = run_parallel(grpo_job, pool=pool, jobs=[
            (data, tool_dir, train_file, masked, str(out / f"rl-grpo{suffix}"),
             (TOOL_SYSTEM, test_file, str(out / f"run-{_slug(name)}")))
            for name, masked, suffix in zip(names, (True, False), ("", "-unmasked"),
                                            strict=True)])
        for name, (model_dir, moves, metrics) in zip(names, done, strict=True):
            models[name], transitions[name], results[name] = model_dir, moves, metrics
    runs = {name: {"metrics": results[name], "model_dir": models[name],
                   "run_dir": out / f"run-{_slug(name)}"} for name in models}
    return _finish(cfg, out, save_model_to, stage, runs, transitions, headroom,
                   prepared.conversion, started)


def _finish(cfg: DemoConfig, out: Path, save_model_to: Path | None, stage: Stage,
            runs: dict[str, dict[str, Any]], transitions: dict[str, list[StageMove]],
            headroom: Headroom, conversion: Conversion, started: float) -> DemoSummary:
    """Write the report, save the better tool model for ``solve``, write the summary."""
    stage("writing the report")
    from agentmath.report import write_report  # noqa: PLC0415 - heavy (matplotlib)

    rl_dirs = [p for p in (out / "rl-grpo", out / "rl-grpo-unmasked") if p.exists()]
    report_paths = write_report([r["run_dir"] for r in runs.values()] + rl_dirs,
                                out / "report")
    rows = [ModelRow.of(name, r["metrics"], transitions.get(name)) for name, r in runs.items()]
    accuracy = {row.model: row.accuracy for row in rows}
    best = "tool + grpo" if "tool + grpo" in runs and (
        accuracy["tool + grpo"] >= accuracy["tool"]) else "tool"
    if save_model_to is not None:
        if save_model_to.exists():
            shutil.rmtree(save_model_to)
        shutil.copytree(runs[best]["model_dir"], save_model_to)
    summary = DemoSummary(
        models=rows, headroom=headroom, conversion=conversion, config=cfg.model_dump(),
        report=ReportFiles(rows=report_paths.rows, **report_paths.files()),
        tool_model=str(save_model_to) if save_model_to else runs[best]["model_dir"],
        tool_model_is=best, seconds=round(time.monotonic() - started, 1))
    summary.write(out)
    return summary


def _slug(name: str) -> str:
    """A directory name for a model name: "tool + grpo (unmasked)" -> "tool-grpo-unmasked"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
