"""SFT and GRPO steps of the demo's configuration on the CPU and on a CUDA GPU (fp32, bf16).

    python benchmarks/device_steps.py --model runs/demo/model-tool/final
    python benchmarks/device_steps.py --quick          # nano model, a few steps
    python benchmarks/device_steps.py --json-out FILE  # the results as JSON too

Rows, each on a device this machine has: ``cuda bf16``, ``cuda fp32``, ``cpu fp32`` (one
thread, as each of the demo's stages runs; the "vs cpu" columns divide by it) and ``cpu bf16``
(CPU autocast). bf16 is
autocast; weights and optimizer stay fp32 (``SFTConfig.bf16`` / ``OptimConfig.bf16``). Every
row runs, one after the other in this
process:

* **SFT**: a fresh micro model on the demo's SFT mixture (``text_share`` text, the rest verified
  tool trajectories from the sandbox), batch 16, the demo's learning rate. Two runs, of
  ``--sft-steps`` / 4 and ``--sft-steps`` steps, from the same seed: seconds per step is the
  difference of their wall times over the difference of their steps, so the setup (tokenising,
  moving the model, CUDA's first kernels) cancels. The longer run's final loss says whether the
  precision changed what SFT learns.
* **GRPO**: ``--rl-steps`` steps of the demo's GRPO run (``agentmath.recipes.demo.rl_config``:
  8 prompts x 8 samples, 320 model tokens, async rollouts on the in-process model, the local
  sandbox) from ``--model``; the first step is left out of the means (it warms caches).

The start model: ``--model`` (e.g. the demo's ``runs/demo/model-tool/final``), or, without it,
the SFT row's own model after ``--sft-steps`` (a weak start: only the timing is meaningful).
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

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per stage, as in the demo

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402

# (device, bf16); the GPU rows first: on a lent machine with little time, they matter most.
# cpu bf16: CPU autocast, fast where the CPU has bf16 instructions (AVX512-BF16, AMX)
ROWS = [("cuda", True), ("cuda", False), ("cpu", False), ("cpu", True)]


def demo_data(args: argparse.Namespace) -> tuple[list[dict], Any, Path]:
    """(the SFT mixture's records, a tokenizer grown on them, the GRPO problems file)."""
    import asyncio

    from agentmath.jsonl import write_jsonl
    from agentmath.models.tiny import build_tokenizer
    from agentmath.recipes.demo import FORMAT, TOOL_SYSTEM, DemoConfig
    from agentmath.synth.tool_records import tool_records
    from agentmath.tasks.synthetic import make_problems, text_problem_ids, to_task_rows
    from agentmath.train.grow import corpus_texts

    demo = DemoConfig()
    train, _ = make_problems(0, args.problems, 10, demo.max_digits)
    text_ids = text_problem_ids(train, demo.text_share, 0)
    records, _ = asyncio.run(tool_records(train, [FORMAT], system_prompts={FORMAT: TOOL_SYSTEM},
                                          text_ids=text_ids))
    args.out.mkdir(parents=True, exist_ok=True)
    problems = args.out / "train.jsonl"
    write_jsonl(to_task_rows(train), problems)
    if args.model is not None:
        import transformers

        return records, transformers.AutoTokenizer.from_pretrained(str(args.model)), problems
    return records, build_tokenizer(corpus_texts(records), vocab_size=demo.vocab_size), problems


def sft_row(records: list[dict], tokenizer: Any, device: str, bf16: bool,
            args: argparse.Namespace) -> dict[str, Any]:
    """Seconds per SFT step from two runs of different lengths; the longer run's model."""
    from agentmath.recipes.demo import DemoConfig
    from agentmath.train.grow import train_model

    demo, runs = DemoConfig(), []
    # a 2-step run first, discarded: CUDA's context and first kernels are set up once per
    # process, and would otherwise fall on the short run alone
    for steps in (2, max(3, args.sft_steps // 4), args.sft_steps):
        runs.append(train_model(
            records, tokenizer, args.out / f"sft-{device}-{'bf16' if bf16 else 'fp32'}-{steps}",
            size=args.size, steps=steps, batch_size=demo.batch_size,
            learning_rate=demo.learning_rate, max_length=demo.max_length, seed=0,
            progress=False, device=device, bf16=bf16))
    _, short, long = runs
    per_step = (long.wall_time_s - short.wall_time_s) / max(1, long.steps - short.steps)
    return {"sft_step_s": per_step, "sft_wall_s": long.wall_time_s,
            "sft_final_loss": long.final_loss, "sft_model": long.final_dir}


def rl_row(model: str, problems: Path, device: str, bf16: bool,
           args: argparse.Namespace) -> dict[str, Any]:
    """``--rl-steps`` GRPO steps of the demo's run; means over the steps after the first."""
    from agentmath.recipes.demo import DemoConfig, rl_config
    from agentmath.rl.trainer import train_rl

    demo = DemoConfig(rl_steps=args.rl_steps, device=device, bf16=bf16)
    cfg = rl_config(demo, model, problems, masked=True)
    if args.quick:
        cfg = cfg.model_copy(update={"prompts_per_step": 2, "group_size": 4})
    rows: list[Any] = []
    started = time.monotonic()
    train_rl(cfg, args.out / f"rl-{device}-{'bf16' if bf16 else 'fp32'}", progress=False,
             resume=False, on_step=rows.append)
    timed = rows[1:] or rows
    tokens = [r.model_tokens_mean * r.samples_per_s * r.rollout_s for r in timed]
    return {"rl_wall_s": time.monotonic() - started,
            "rl_step_s": statistics.fmean(r.step_s for r in timed),
            "rl_rollout_s": statistics.fmean(r.rollout_s for r in timed),
            "rl_update_s": statistics.fmean(r.train_s for r in timed),
            "rl_rollout_tokens_per_s": sum(tokens) / max(1e-9, sum(r.rollout_s for r in timed)),
            "rl_reward_mean": statistics.fmean(r.reward_mean for r in rows),
            "rl_step_s_each": [round(r.step_s, 2) for r in rows]}


def available(device: str) -> bool:
    import torch  # noqa: PLC0415 - the parent process imports torch only here

    return device == "cpu" or torch.cuda.is_available()


def environment() -> dict[str, Any]:
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "cpu_threads": torch.get_num_threads(), "load_avg": os.getloadavg()[0]}


ROW_MARK = "ROW "


def run_rows(args: argparse.Namespace, env: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row on a device this machine has, each in a process of its own (accelerate's
    state, the precision included, is fixed once per process; and one row's caches must not
    speed up the next). The rows so far are written to ``--json-out`` after each."""
    import subprocess

    results = []
    for device, bf16 in ROWS:
        if not available(device):
            continue
        name = f"{device} {'bf16' if bf16 else 'fp32'}"
        cmd = [sys.executable, __file__, "--only", name, *sys.argv[1:]]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
        found = [line[len(ROW_MARK):] for line in done.stdout.splitlines()
                 if line.startswith(ROW_MARK)]
        if done.returncode != 0 or not found:
            print(f"row {name!r} failed (exit {done.returncode})", file=sys.stderr, flush=True)
            continue
        results.append(json.loads(found[-1]))
        print(found[-1], file=sys.stderr, flush=True)
        if args.json_out is not None:  # after every row: a later failure loses nothing
            args.json_out.write_text(json.dumps({"environment": env, "rows": results},
                                                indent=2) + "\n")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GRPO start model directory")
    ap.add_argument("--sft-steps", type=int, default=100, help="SFT steps of the longer run")
    ap.add_argument("--rl-steps", type=int, default=4, help="GRPO steps per row (>= 2)")
    ap.add_argument("--problems", type=int, default=600, help="training problems")
    ap.add_argument("--size", default="micro", help="model size of the SFT rows")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-device-steps"))
    ap.add_argument("--quick", action="store_true", help="nano model, tiny steps")
    ap.add_argument("--json-out", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)  # one row (internal)
    args = ap.parse_args()
    if args.quick:
        args.sft_steps, args.rl_steps, args.problems, args.size = 8, 2, 40, "nano"
    if args.only is not None:  # one row, in a process of its own (see run_rows)
        device, _, precision = args.only.partition(" ")
        import torch

        torch.set_num_threads(1)
        records, tokenizer, problems = demo_data(args)
        row = {"row": args.only, **sft_row(records, tokenizer, device, precision == "bf16",
                                           args)}
        start = str(args.model) if args.model is not None else row["sft_model"]
        row.update(rl_row(start, problems, device, precision == "bf16", args))
        if device == "cuda":
            row["cuda_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        print(ROW_MARK + json.dumps(row), flush=True)
        return
    env = environment()
    print(json.dumps(env), file=sys.stderr, flush=True)
    results = run_rows(args, env)
    if not results:
        raise SystemExit("no row finished (see the errors above)")
    base = next((r for r in results if r["row"] == "cpu fp32"), results[0])
    print_table(f"The demo's SFT and GRPO steps by device ({env['gpu'] or 'no GPU'}; "
                f"torch {env['torch']})",
                ["row", "SFT s/step", "vs cpu", "SFT loss", "GRPO s/step", "vs cpu",
                 "rollout s", "update s", "rollout tok/s", "reward", "each GRPO step (s)"],
                [[r["row"], f"{r['sft_step_s']:.3f}",
                  f"{base['sft_step_s'] / max(1e-9, r['sft_step_s']):.1f}x",
                  f"{r['sft_final_loss']:.3f}", f"{r['rl_step_s']:.2f}",
                  f"{base['rl_step_s'] / max(1e-9, r['rl_step_s']):.1f}x",
                  f"{r['rl_rollout_s']:.2f}", f"{r['rl_update_s']:.2f}",
                  f"{r['rl_rollout_tokens_per_s']:.0f}", f"{r['rl_reward_mean']:.2f}",
                  " ".join(map(str, r["rl_step_s_each"]))] for r in results])


if __name__ == "__main__":
    main()
