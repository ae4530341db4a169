"""One GRPO step of the demo's configuration, today's generator against the one it replaced.

    python benchmarks/rl_step.py                  # 4 steps per generator, the demo's settings
    python benchmarks/rl_step.py --model DIR      # e.g. runs/demo/model-tool/final
    python benchmarks/rl_step.py --quick --json   # a smoke run: nano model, 2 steps

The demo's GRPO run (``agentmath.recipes.demo.rl_config``: 8 prompts x 8 samples, 320 model
tokens, up to 6 tool calls, async rollouts on the in-process model, one CPU thread) runs
``--steps`` steps from the same start model once per generator, one after the other in this
process:

* ``gathered``: the generator before continuous batching (a batch takes what is queued when
  its first request arrives, and runs to its longest row);
* ``continuous``: continuous batching (``agentmath/backends/hf_continuous.py``): episodes
  waiting for the model share one decode batch whatever turn they are in; every turn's prompt
  prefilled whole;
* ``continuous + prefix cache`` (the default): a finished turn's KV cache is kept for the
  episode's next turn, which prefills only the tool output and the next turn's header
  (``agentmath/backends/hf_prefix.py``).

Reported per generator: mean seconds per step over the steps after the first (the first also
warms caches), its rollout and update parts, model tokens generated per step and per second
of rollout, and the speed-up of the step over the first row's. Every run samples its own
episodes (same seeds, different batch compositions), so tokens per step differ a little; the
tokens/s column is the fairer view of the generator alone.

The model: ``--model``, or the demo's tool model grown here (the demo's SFT mixture, micro,
800 steps; cached under ``--out`` by a hash of its config, about 8 minutes the first time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per run, as in the demo

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402

GENERATORS = {  # name -> GeneratorConfig overrides
    "gathered": {"continuous": False},
    "continuous": {"continuous": True, "prefix_cache_rows": 0},
    "continuous + prefix cache": {"continuous": True, "prefix_cache_rows": 64},
}


def start_model(args: argparse.Namespace) -> tuple[Path, Path]:
    """(model dir, training problems): ``--model`` with the demo's problems, or the demo's
    tool model grown and cached here."""
    from agentmath.data.synthetic import to_task_rows
    from agentmath.jsonl import write_jsonl
    from agentmath.recipes.demo import FORMAT, TOOL_SYSTEM, DemoConfig
    from agentmath.recipes.tool_model import ToolModelConfig, cached_tool_model, make_problems

    demo = DemoConfig()
    size, steps = ("nano", 30) if args.quick else (demo.model_size, demo.steps)
    cfg = ToolModelConfig(seed=0, train_problems=demo.train_problems, test_problems=50,
                          max_digits=demo.max_digits, formats=[FORMAT],
                          system_prompts={FORMAT: TOOL_SYSTEM}, model_size=size, steps=steps,
                          batch_size=demo.batch_size, learning_rate=demo.learning_rate,
                          vocab_size=demo.vocab_size, text_share=demo.text_share)
    train, _ = make_problems(cfg.seed, cfg.train_problems, cfg.test_problems, cfg.max_digits)
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "train.jsonl"
    write_jsonl(to_task_rows(train), data)
    if args.model is not None:
        return args.model, data
    root = cached_tool_model(cfg, args.out / "models",
                             stage=lambda m: print(m, file=sys.stderr, flush=True))
    return root / "final", data


def run_generator(name: str, model: Path, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``--steps`` GRPO steps with one generator; per-step timings from its metrics."""
    from agentmath.recipes.demo import DemoConfig, rl_config
    from agentmath.rl.trainer import train_rl

    demo = DemoConfig(rl_steps=args.steps, max_digits=3)
    cfg = rl_config(demo, str(model), data, masked=True)
    cfg = cfg.model_copy(update={"generator": cfg.generator.model_copy(
        update=GENERATORS[name])})
    if args.quick:
        cfg = cfg.model_copy(update={"prompts_per_step": 2, "group_size": 4})
    rows: list[Any] = []
    started = time.monotonic()
    train_rl(cfg, args.out / f"run-{name.replace(' + ', '-').replace(' ', '-')}",
             progress=False, resume=False, on_step=rows.append)
    timed = rows[1:] or rows
    # every sample generated in the step (trained, dropped or filtered): samples_per_s is
    # their count over the rollout time
    tokens = [r.model_tokens_mean * r.samples_per_s * r.rollout_s for r in timed]
    rollout = [r.rollout_s for r in timed]
    return {"generator": name, "steps": len(rows), "wall_s": time.monotonic() - started,
            "step_s": statistics.fmean(r.step_s for r in timed),
            "rollout_s": statistics.fmean(rollout),
            "train_s": statistics.fmean(r.train_s for r in timed),
            "model_tokens_per_step": statistics.fmean(tokens),
            "rollout_tokens_per_s": sum(tokens) / max(1e-9, sum(rollout)),
            "step_s_each": [round(r.step_s, 2) for r in rows]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="start model directory")
    ap.add_argument("--steps", type=int, default=4, help="GRPO steps per generator (>= 2)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-rl-step"))
    ap.add_argument("--quick", action="store_true", help="smoke run: nano model, tiny steps")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.quick:
        args.steps = 2
    model, data = start_model(args)
    results = [run_generator(name, model, data, args) for name in GENERATORS]
    base = results[0]["step_s"]
    for r in results:
        r["speedup"] = base / r["step_s"] if r["step_s"] else 0.0
    out = {"model": str(model), "load_avg": os.getloadavg()[0], "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print_table(f"GRPO step of the demo's configuration, one thread ({model})",
                ["generator", "s / step", "rollout s", "update s", "model tokens / step",
                 "rollout tokens / s", "speed-up", "each step (s)"],
                [[r["generator"], f"{r['step_s']:.2f}", f"{r['rollout_s']:.2f}",
                  f"{r['train_s']:.2f}", f"{r['model_tokens_per_step']:.0f}",
                  f"{r['rollout_tokens_per_s']:.0f}", f"{r['speedup']:.2f}x",
                  " ".join(map(str, r["step_s_each"]))] for r in results])


if __name__ == "__main__":
    main()
