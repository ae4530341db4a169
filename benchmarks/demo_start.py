"""The demo's start for other SFT settings: how far past the copy edge does it sit?

    python benchmarks/demo_start.py                                  # the demo's defaults, seed 0
    python benchmarks/demo_start.py --seeds 0 1 2 --steps 1200 1400 --lr 4e-3
    python benchmarks/demo_start.py --size micro --steps 800 --lr 3e-3 --json
    python benchmarks/demo_start.py --quick                          # a smoke run: toy sizes

GRPO in the demo only has to teach the mixed tool model to choose code, which works when
sampling already sometimes copies the problem's numbers into the code right. A tiny model learns
that copy skill abruptly (its SFT loss drops from ~0.85 to ~0.3 within ~100 steps, somewhere
between 450 and 750 steps for the nano model at lr 3e-3-4e-3 on most seeds, later or never
on some, without copy warm-up), and the start's pass@k keeps rising for several hundred
steps after. This benchmark
grows the demo's first start of the tool model (its data, tokenizer and SFT:
``agentmath.recipes.demo.prepare_data`` and ``sft_job``) for every combination of ``--size``,
``--lr``, ``--steps``, ``--train-problems``, ``--copy-steps`` and ``--seeds``, and measures
the start's headroom as the demo does (pass@8 at temperature 1.0 on its 100 validation
problems).
Per row: SFT seconds, the final SFT loss, the step at which the loss (mean of 50 steps) first
fell below 0.5 (the copy edge), and the headroom. ``--parallel`` runs that many rows at once,
one core each (default 2: the demo's own arrangement of two SFTs side by side).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402

EDGE_LOSS, EDGE_WINDOW = 0.5, 50
QUICK = {"steps": 3, "copy_steps": 2, "train_problems": 20, "test_problems": 5, "vocab_size": 400,
         "batch_size": 4, "eval_max_tokens": 48, "validation_problems": 5, "headroom_k": 2}


def copy_edge(losses: list[float]) -> int | None:
    """The first step at which the mean loss of the last ``EDGE_WINDOW`` steps is below
    ``EDGE_LOSS`` (None when it never is)."""
    for end in range(EDGE_WINDOW, len(losses) + 1):
        if sum(losses[end - EDGE_WINDOW:end]) / EDGE_WINDOW < EDGE_LOSS:
            return end
    return None


def grow_and_measure(settings: dict[str, Any], out: str, attempt: int = 1) -> dict[str, Any]:
    """One row (a process of its own): the demo's data for the seed, SFT of the tool model
    with ``settings`` (from the SFT seed of the demo's ``attempt``-th start), then its
    headroom."""
    from agentmath.jsonl import read_jsonl
    from agentmath.recipes.demo import (
        TOOL_SYSTEM,
        DemoConfig,
        EvalJob,
        SFTJob,
        eval_job,
        headroom_runs,
        prepare_data,
        sft_job,
        start_seed,
    )

    cfg = DemoConfig(**settings)
    root = Path(out)
    data = prepare_data(cfg, root, stage=lambda _: None)
    started = time.monotonic()
    model_dir = sft_job(SFTJob(cfg, data.mixed, str(data.tokenizer_dir),
                               str(root / "model-tool"), TOOL_SYSTEM,
                               seed=start_seed(cfg.seed, attempt)))
    sft_s = time.monotonic() - started
    losses = [row["loss"] for row in read_jsonl(root / "model-tool" / "loss.jsonl",
                                                 require=["loss"])]
    _, sampled = headroom_runs(cfg, data, root / "validation")  # the demo's pass@k run
    (metrics,) = eval_job(EvalJob(cfg, model_dir, TOOL_SYSTEM, (sampled,)))
    return {**settings, "attempt": attempt, "sft_s": round(sft_s, 1),
            "final_loss": round(losses[-1], 4),
            "copy_edge_step": copy_edge(losses), f"pass@{cfg.headroom_k}":
            metrics.pass_at[str(cfg.headroom_k)],
            "sampled_pass@1": metrics.avg.value if metrics.avg else None,
            "tool_calls_per_sample": metrics.tools.calls_per_sample}


def main() -> None:
    from agentmath.recipes._parallel import run_parallel
    from agentmath.recipes.demo import DemoConfig

    default = DemoConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--size", nargs="+", default=[default.model_size])
    p.add_argument("--lr", type=float, nargs="+", default=[default.learning_rate])
    p.add_argument("--steps", type=int, nargs="+", default=[default.steps])
    p.add_argument("--train-problems", type=int, nargs="+", default=[default.train_problems])
    p.add_argument("--copy-steps", type=int, nargs="+", default=[default.copy_steps], help=(
        "copy warm-up steps before SFT (0: none, the demo before 2026-11-28)"))
    p.add_argument("--attempts", type=int, nargs="+", default=[1], help=(
        "which of the demo's starts to grow: 1 the first (the run's seed), 2.. the starts "
        "the demo grows again from derived seeds when the first has no headroom"))
    p.add_argument("--parallel", type=int, default=2, help="rows at once (one core each)")
    p.add_argument("--out", type=Path, default=Path("runs/bench-demo-start"))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="a smoke run at toy sizes")
    args = p.parse_args()
    if args.quick:
        args.steps, args.train_problems = [QUICK["steps"]], [QUICK["train_problems"]]
        args.copy_steps = [QUICK["copy_steps"]]
        extra = {k: v for k, v in QUICK.items()
                 if k not in ("steps", "train_problems", "copy_steps")}
        default = DemoConfig(**QUICK)
    else:
        extra = {}
    combos = list(itertools.product(args.size, args.lr, args.steps, args.train_problems,
                                    args.copy_steps, args.seeds, args.attempts))
    jobs = [({"model_size": size, "learning_rate": lr, "steps": steps,
              "train_problems": train, "copy_steps": copy, "seed": seed, **extra},
             str(args.out / (f"{size}-lr{lr:g}-{steps}-train{train}-copy{copy}-seed{seed}"
                             + (f"-start{attempt}" if attempt > 1 else ""))), attempt)
            for size, lr, steps, train, copy, seed, attempt in combos]
    try:  # every combination checked before any row starts
        for settings, _, attempt in jobs:
            if attempt < 1:
                raise ValueError(f"--attempts are 1 or more, got {attempt}")
            DemoConfig(**settings)
    except ValueError as exc:  # a DemoConfig setting out of bounds
        raise SystemExit(f"bad setting: {exc}") from None
    rows = run_parallel(grow_and_measure, jobs, workers=args.parallel)
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))
        return
    k = f"pass@{default.headroom_k}"
    print_table(f"the demo's start ({k} at temperature {default.rl_temperature} on "
                f"{default.validation_problems} validation problems)",
                ["size", "lr", "SFT steps", "train problems", "copy steps", "seed", "start",
                 "SFT s", "final loss", "copy edge (step)", k, "sampled pass@1"],
                [[r["model_size"], f"{r['learning_rate']:g}", str(r["steps"]),
                  str(r["train_problems"]), str(r["copy_steps"]), str(r["seed"]),
                  str(r["attempt"]),
                  f"{r['sft_s']:.0f}", f"{r['final_loss']:.3f}", str(r["copy_edge_step"] or "-"),
                  f"{r[k]:.0%}", f"{r['sampled_pass@1']:.1%}"] for r in rows])


if __name__ == "__main__":
    main()
