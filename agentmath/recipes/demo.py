"""The demo recipe: grow two tiny models on the CPU and show that tool use beats text alone.

Read top to bottom; each stage is a call into the library:

1. generate seeded multi-step word problems with big numbers, split train / test;
2. code injection: turn each training chain-of-thought into a tool trajectory, executing every
   snippet in the sandbox and keeping only verified ones;
3. build a tokenizer on the training text and two identical tiny Qwen3 models;
4. SFT one on the text chain-of-thought, the other on the tool trajectories (tool output
   masked from the loss), with the same budget;
5. evaluate both on the held-out problems through the real agent loop, sandbox and evaluation
   harness; write the report (plots + HTML viewer) and save the tool model for ``solve``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from agentmath.config import EvalConfig, LoopConfig, StrictModel

TOOL_SYSTEM = "Solve the problem. Run Python in <code> blocks; results come back in <interpreter>."
TEXT_SYSTEM = "Solve the problem step by step."
FORMAT = "code_interpreter"


class DemoConfig(StrictModel):
    """Sizes and budgets of the demo (defaults finish in minutes on 2 CPU cores)."""

    seed: int = Field(0, ge=0, description="Seeds data, models, training and sampling.")
    train_problems: int = Field(1500, ge=10, le=1_000_000, description="Training problems.")
    test_problems: int = Field(100, ge=5, le=100_000, description="Held-out problems.")
    model_size: str = Field("micro", description="A size from agentmath.models.tiny.SIZES.")
    max_digits: int = Field(4, ge=3, le=6, description=(
        "Largest operand size in digits (3-digit numbers and up defeat mental arithmetic)."))
    steps: int = Field(500, ge=1, le=10**7, description="SFT steps for each model (same).")
    batch_size: int = Field(16, ge=1, le=4096, description="SFT batch size.")
    learning_rate: float = Field(3e-3, gt=0, le=1, description="SFT peak learning rate.")
    max_length: int = Field(512, ge=64, le=8192, description="Tokens per training example.")
    eval_max_tokens: int = Field(320, ge=16, le=8192, description="Model tokens per episode.")
    vocab_size: int = Field(1024, ge=300, le=65536, description="Tokenizer vocabulary size.")


Stage = Callable[[str], None]


async def _evaluate(cfg: DemoConfig, model_dir: str, system: str, data: Path,
                    out: Path) -> dict[str, Any]:
    from agentmath.backends.hf import HFBackend
    from agentmath.eval.runner import run_eval

    ecfg = EvalConfig(dataset=str(data), model=model_dir, backend="hf", samples=1,
                      temperature=0.0, seed=cfg.seed, concurrency=64,
                      loop=LoopConfig(system_prompt=system, max_model_tokens=cfg.eval_max_tokens,
                                      max_tool_calls=6))
    backend = HFBackend(model_dir, max_batch=64)
    try:
        return await run_eval(ecfg, out, backend)
    finally:
        await backend.aclose()


def summary_row(name: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """The numbers the demo compares: accuracy, mean model tokens, tool calls per sample."""
    return {"model": name, "accuracy": metrics["avg"]["value"],
            "mean_model_tokens": metrics["tokens"]["model_mean"],
            "tool_calls_per_sample": metrics["tools"]["calls_per_sample"],
            "n": metrics["n_samples"]}


def run_demo(cfg: DemoConfig, out: Path, save_model_to: Path | None,
             stage: Stage = print) -> dict[str, Any]:
    """Run every stage; returns the machine-readable summary (also written to out)."""
    from agentmath.data.convert import text_only_example, write_jsonl
    from agentmath.data.synthetic import to_task_rows
    from agentmath.models.tiny import build_tokenizer
    from agentmath.recipes.tool_model import (
        corpus_texts,
        make_problems,
        tool_records,
        train_model,
    )

    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    stage("generating problems")
    train, test = make_problems(cfg.seed, cfg.train_problems, cfg.test_problems, cfg.max_digits)
    write_jsonl(to_task_rows(test), out / "test.jsonl")
    stage(f"code injection: executing {len(train)} trajectories in the sandbox")
    tool_examples, by_format = asyncio.run(tool_records(
        train, [FORMAT], system_prompts={FORMAT: TOOL_SYSTEM}))
    conversion = by_format[FORMAT]
    text_examples = [text_only_example(p, TEXT_SYSTEM) for p in train]
    stage("building the tokenizer and two identical tiny models")
    tokenizer = build_tokenizer(corpus_texts(tool_examples + text_examples),
                                vocab_size=cfg.vocab_size)
    runs = {}
    for name, examples, system in (("text-only", text_examples, TEXT_SYSTEM),
                                   ("tool", tool_examples, TOOL_SYSTEM)):
        stage(f"SFT of the {name} model ({cfg.steps} steps)")
        result = train_model(examples, tokenizer, out / f"model-{name}", size=cfg.model_size,
                             steps=cfg.steps, batch_size=cfg.batch_size,
                             learning_rate=cfg.learning_rate, max_length=cfg.max_length,
                             seed=cfg.seed)
        stage(f"evaluating the {name} model on {len(test)} held-out problems")
        metrics = asyncio.run(_evaluate(cfg, result.final_dir, system, out / "test.jsonl",
                                        out / f"run-{name}"))
        runs[name] = {"metrics": metrics, "model_dir": result.final_dir,
                      "final_loss": result.final_loss}
    stage("writing the report")
    from agentmath.report import write_report  # noqa: PLC0415 - heavy (matplotlib)
    from agentmath.report.bundle import report_files  # noqa: PLC0415

    report_paths = write_report([out / "run-text-only", out / "run-tool"], out / "report")
    if save_model_to is not None:
        if save_model_to.exists():
            shutil.rmtree(save_model_to)
        shutil.copytree(runs["tool"]["model_dir"], save_model_to)
    summary = {"models": [summary_row(n, r["metrics"]) for n, r in runs.items()],
               "conversion": conversion, "config": cfg.model_dump(),
               "report": {"rows": report_paths["rows"], **report_files(report_paths)},
               "tool_model": str(save_model_to) if save_model_to else runs["tool"]["model_dir"],
               "seconds": round(time.monotonic() - started, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
