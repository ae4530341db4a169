"""The demo's GRPO run as the benchmarks run it (benchmarks/mismatch.py, benchmarks/faults.py).

The start model is the demo's tool model (``DemoConfig``'s sizes and SFT mixture, grown by
``cached_tool_model`` and cached under the benchmark's ``--out``), the task the demo's training
problems, the GRPO settings the demo's own (``agentmath.recipes.demo_jobs.rl_config``, which a
benchmark then varies). A run's step log is read back (``agentmath.rl.records.read_steps``) and
its final model scored greedily on the demo's VALIDATION problems, never its test problems: the
benchmarks choose defaults from these figures. A run's result is kept as JSON under
``--out/results`` so that a rerun (or a second process sharing ``--out``) skips the runs done.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def demo_settings(quick: bool) -> Any:
    """The demo's config (``--quick``: tiny sizes for a smoke run)."""
    from agentmath.recipes.demo_config import DemoConfig

    if not quick:
        return DemoConfig()
    return DemoConfig(train_problems=40, test_problems=10, validation_problems=8, steps=30,
                      copy_steps=0, rl_steps=2, rl_prompts=2, rl_group_size=2,
                      sandbox_preload=("math",))


def start_model(demo: Any, out: Path, model: Path | None) -> tuple[Path, Path, Path]:
    """(model dir, training problems, validation problems): ``model`` or the demo's tool
    model grown and cached under ``out/models``; the problems are the demo's splits."""
    from agentmath.jsonl import write_jsonl
    from agentmath.recipes.demo_config import FORMAT, TOOL_SYSTEM
    from agentmath.recipes.demo_data import split_problems
    from agentmath.recipes.tool_model import ToolModelConfig, cached_tool_model
    from agentmath.tasks.synthetic import make_problems, to_task_rows

    train, validation, _ = split_problems(demo)
    grown, _ = make_problems(demo.seed, demo.train_problems, demo.test_problems,
                             demo.max_digits)
    if [t.problem for t in grown] != [t.problem for t in train]:
        raise RuntimeError("the tool model's training problems are not the demo's")
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(to_task_rows(train), out / "train.jsonl")
    write_jsonl(to_task_rows(validation), out / "validation.jsonl")
    if model is not None:
        return model, out / "train.jsonl", out / "validation.jsonl"
    cfg = ToolModelConfig(seed=demo.seed, train_problems=demo.train_problems,
                          test_problems=demo.test_problems, max_digits=demo.max_digits,
                          formats=[FORMAT], system_prompts={FORMAT: TOOL_SYSTEM},
                          model_size=demo.model_size, steps=demo.steps,
                          copy_steps=demo.copy_steps, batch_size=demo.batch_size,
                          learning_rate=demo.learning_rate, max_length=demo.max_length,
                          vocab_size=demo.vocab_size, text_share=demo.text_share)
    root = cached_tool_model(cfg, out / "models",
                             stage=lambda m: print(m, file=sys.stderr, flush=True))
    return root / "final", out / "train.jsonl", out / "validation.jsonl"


def validation_metrics(demo: Any, model: str | Path, validation: Path, out: Path,
                       name: str) -> Any:
    """``model``'s greedy evaluation on the validation problems (its ``RunMetrics``; the
    samples under ``out/eval/name``)."""
    from agentmath.recipes.demo_config import TOOL_SYSTEM
    from agentmath.recipes.demo_jobs import EvalJob, EvalRun, eval_job

    print(f"{name}: validation", file=sys.stderr, flush=True)
    return eval_job(EvalJob(demo, str(model), TOOL_SYSTEM, (
        EvalRun(str(validation), str(out / "eval" / name)),)))[0]


def accuracy(metrics: Any) -> float:
    """The avg@1 (greedy accuracy) of an evaluation's metrics."""
    return float(metrics.avg.value) if metrics.avg is not None else 0.0


def start_accuracy(demo: Any, model: Path, validation: Path, out: Path) -> float:
    """The start model's greedy accuracy on the validation problems (cached)."""
    cached = out / "results" / "start.json"
    if cached.exists():
        return float(json.loads(cached.read_text())["validation_accuracy"])
    value = accuracy(validation_metrics(demo, model, validation, out, "start"))
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps({"validation_accuracy": value}) + "\n")
    return value


@dataclass
class Trained:
    """One GRPO run's outcome: its step log, its final model's validation metrics (None: not
    evaluated, or the run stopped early), its directory and its wall time."""

    steps: list[Any]  # StepMetrics, in order
    validation: Any  # RunMetrics | None
    run_dir: Path
    seconds: float


def train_and_validate(cfg: Any, name: str, demo: Any, validation: Path, out: Path,
                       evaluate: bool) -> Trained:
    """GRPO with ``cfg`` into ``out/runs/name``, its step log read back, then (``evaluate``)
    its final model's greedy validation metrics; the final weights are removed afterwards
    (only what was measured on them is kept)."""
    from agentmath.rl.records import read_steps
    from agentmath.rl.trainer import train_rl

    started = time.monotonic()
    run_dir = out / "runs" / name
    print(f"{name}: GRPO", file=sys.stderr, flush=True)
    result = train_rl(cfg, run_dir, resume=False, progress=False)
    steps = read_steps(result.metrics)
    metrics = None
    if evaluate and result.final_dir:
        metrics = validation_metrics(demo, result.final_dir, validation, out, name)
    if result.final_dir:
        shutil.rmtree(run_dir / "weights", ignore_errors=True)
    return Trained(steps, metrics, run_dir, round(time.monotonic() - started, 1))


def kept(out: Path, name: str, fresh: bool) -> dict[str, Any] | None:
    """The result a run left under ``out/results`` (None: none, or ``fresh``)."""
    path = out / "results" / f"{name}.json"
    if fresh or not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def keep(out: Path, name: str, data: dict[str, Any]) -> None:
    """Keep a run's result under ``out/results`` (a rerun reads it with :func:`kept`)."""
    path = out / "results" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def one_torch_thread() -> None:
    """One torch thread per process, as the demo runs its stages (a shared 2-vCPU host)."""
    import torch

    torch.set_num_threads(1)
