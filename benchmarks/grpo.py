"""Agentic GRPO: ``agentmath rl`` beside TRL's ``GRPOTrainer`` with its own tool loop, in one run.

    python benchmarks/grpo.py                     # defaults: a few minutes on 2 CPU cores
    python benchmarks/grpo.py --steps 20 --json   # one JSON object
    python benchmarks/grpo.py --skip-trl          # agentmath only

The first run grows and caches the model (600 SFT steps: about 10 minutes on two idle cores,
much longer on a loaded machine); after that a default run takes a few minutes.

Both trainers start from ONE tiny model and get the same task, training prompts (in the same
order), group size G, prompts per step, step budget, learning rate (constant), sampling
temperature, completion budget, tool-call budget, objective (token-level DAPO aggregation,
group-normalised advantages, clip 0.2/0.28, no KL) and accuracy reward (agentmath's grader).
Reported: wall seconds per step and samples/s (prompts x G / step time) from each trainer's
own per-step timing, and held-out accuracy of each final model, measured the same way for both.
agentmath runs twice by default, with rollout mode ``async`` (the issue's configuration, on
which the goal is judged) and ``sync`` (lockstep turns, like TRL's loop).

The model. ``build_tool_model`` grows a ``micro`` Qwen3 on synthetic word problems with two
formats (``native`` tool-calling chat records and ``openai_tools``, the same ``<tool_call>``
JSON protocol as text), cached under ``--out`` by a hash of its config (a rerun skips it). It
must serve both sides because the two loops speak the protocol differently:

* TRL's ``tools=`` loop is native tool calling: a ``<tool_call>`` ends the assistant turn, the
  result comes back as a ``tool`` turn rendered by the chat template. It needs the tool schema it
  renders from a Python function to be the one the model was trained with, a prefix-preserving
  template, and a response template to parse calls; ``_grpo_trl.py`` checks all three before it
  trains (the prompt TRL renders is compared character for character with the training one).
* agentmath's GRPO drives ``openai_tools`` token-exactly through its own loop with the ``hf``
  backend (the model's sampled ids are the ids trained on; no re-tokenization).

Deviations from the issue's sketch, forced by the facts:

* TRL runs with ``environment_factory`` (one sandbox session per rollout, its ``python`` method
  the tool) rather than a bare ``tools=[python]``: the model's code reuses variables from its
  earlier calls, and a bare tool function has no per-rollout state in TRL's loop (a fresh
  session per call makes every second call fail with NameError; one shared session lets
  rollouts overwrite each other's variables). It is the same ``_tool_call_loop``, schema
  rendering and parsing as ``tools=``. ``--trl-tools plain`` runs the bare function anyway.
* Held-out accuracy is measured in both protocols for every model (``_grpo_eval.py``): the
  ``openai_tools`` text protocol through ``run_eval`` (agentmath trains in it) and the native
  chat protocol through agentmath's chat loop (TRL trains in it), both greedy, both graded by
  the same grader on the same problems, so neither side is scored only in the other's protocol.
* Dynamic sampling is off for agentmath (TRL has none), so both train on exactly
  prompts x G samples a step; ``--dynamic-sampling`` turns it on.
* Budgets cannot be made identical: TRL's ``max_completion_length`` counts model AND tool tokens
  after the prompt; agentmath counts model tokens (``max_model_tokens`` = the same number) and a
  context budget (``max_total_tokens`` = the longest training prompt + the same number).

Timing is per step as each trainer reports it (agentmath's metrics.jsonl ``step_s``: rollout,
update and weight sync; TRL: ``on_step_begin`` -> ``on_step_end`` of a callback, which spans its
generation, tool loop, reward and update); set-up and model saving are not in it. The machine is
shared: the load average before each half is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402

from agentmath.recipes.tool_model import NATIVE, ToolModelConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def model_config(ns: argparse.Namespace) -> ToolModelConfig:
    return ToolModelConfig(seed=ns.seed, train_problems=ns.sft_problems, test_problems=100,
                           max_digits=3, formats=["openai_tools", NATIVE],
                           model_size=ns.model_size, steps=ns.sft_steps)


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def build_model(cfg: ToolModelConfig, out: Path, log: Any) -> Path:
    """The cached model directory (``final/``, ``test.jsonl``, ``tool_model.json``)."""
    from agentmath.recipes.tool_model import cached_tool_model

    return cached_tool_model(cfg, out, stage=log)


def training_rows(cfg: ToolModelConfig, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` fresh problems from the same generator (none seen in SFT or held out)."""
    from agentmath.data.synthetic import generate_problems, to_task_rows
    from agentmath.recipes.tool_model import make_problems

    train, test = make_problems(cfg.seed, cfg.train_problems, cfg.test_problems, cfg.max_digits)
    seen = {p.problem for p in train} | {p.problem for p in test}
    fresh = [p for p in generate_problems(n * 2 + 20, seed=10_000 + seed,
                                          digits=(3, cfg.max_digits)) if p.problem not in seen]
    return to_task_rows(fresh[:n])


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


# ----------------------------------------------------------------------------- the two trainers
def run_agentmath(ns: argparse.Namespace, model_dir: str, data: Path, out: Path,
                  max_prompt_tokens: int, mode: str = "async") -> dict[str, Any]:
    from agentmath.config import LoopConfig, RolloutConfig
    from agentmath.rl.config import (
        GeneratorConfig,
        LossConfig,
        OptimConfig,
        RLConfig,
        RLDataConfig,
        TemperatureSchedule,
    )
    from agentmath.rl.metrics import read_metrics
    from agentmath.rl.trainer import train_rl

    cfg = RLConfig(
        model=model_dir, format="openai_tools",
        data=RLDataConfig(dataset=str(data), shuffle=False), steps=ns.steps,
        group_size=ns.group_size, prompts_per_step=ns.prompts,
        dynamic_sampling=ns.dynamic_sampling, seed=ns.seed, device="cpu",
        loss=LossConfig(clip_low=0.2, clip_high=0.28, aggregation="token", kl_coef=0.0,
                        micro_batch_size=max(16, ns.group_size * ns.prompts)),
        optim=OptimConfig(learning_rate=ns.lr, decay="constant", max_grad_norm=1.0),
        temperature=TemperatureSchedule(start=ns.temperature),
        loop=LoopConfig(max_model_tokens=ns.max_completion, max_tool_calls=ns.max_tool_calls,
                        max_total_tokens=max_prompt_tokens + ns.max_completion),
        rollout=RolloutConfig(mode=mode),
        generator=GeneratorConfig(backend="hf", max_batch=64),
        checkpoint_every=0, tensorboard=False)
    result = train_rl(cfg, out, progress=False, resume=False)
    rows = read_metrics(result.metrics)
    return {"final_dir": result.final_dir, "step_s": [r["step_s"] for r in rows],
            "rollout_s": [r["rollout_s"] for r in rows],
            "reward_mean": [r["reward_mean"] for r in rows],
            "tool_calls_mean": [r["tool_calls_mean"] for r in rows],
            "truncation_rate": [r["truncation_rate"] for r in rows],
            "wall_s": result.wall_time_s}


def run_trl_side(ns: argparse.Namespace, model_dir: str, rows: list[dict[str, Any]],
                 out: Path) -> dict[str, Any]:
    from _grpo_trl import run_trl

    res = run_trl(model_dir, rows, out, steps=ns.steps, group_size=ns.group_size,
                  prompts_per_step=ns.prompts, learning_rate=ns.lr,
                  temperature=ns.temperature, max_completion_length=ns.max_completion,
                  max_tool_calls=ns.max_tool_calls, seed=ns.seed,
                  stateful=ns.trl_tools == "env")
    logs = res["logs"]
    res["reward_mean"] = [log.get("reward") for log in logs]
    res["tool_calls_mean"] = [log.get("tools/call_frequency") for log in logs]
    res["truncation_rate"] = [log.get("completions/clipped_ratio") for log in logs]
    return res


# ----------------------------------------------------------------------------- evaluation
def evaluate(ns: argparse.Namespace, model_dir: str, test: Path, out: Path) -> dict[str, Any]:
    from _grpo_eval import eval_native, eval_text

    rows = [json.loads(line) for line in test.read_text().splitlines() if line.strip()]
    kw = {"limit": ns.eval_problems, "max_tokens": ns.max_completion,
          "max_tool_calls": ns.max_tool_calls, "seed": ns.seed}
    result = {"text": asyncio.run(eval_text(model_dir, test, out / "eval-text", **kw))}
    if not ns.no_native_eval:
        result["native"] = asyncio.run(eval_native(model_dir, rows, **kw))
    return result


def cached_eval(ns: argparse.Namespace, model_dir: Path, test: Path) -> dict[str, Any]:
    """Evaluation of the starting model, cached next to it."""
    key = _key({"n": ns.eval_problems, "t": ns.max_completion, "c": ns.max_tool_calls,
                "s": ns.seed, "native": not ns.no_native_eval})
    path = model_dir.parent / f"eval-{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    with tempfile.TemporaryDirectory(dir=model_dir.parent) as d:
        result = evaluate(ns, str(model_dir), test, Path(d))
    path.write_text(json.dumps(result, indent=2) + "\n")
    return result


# ----------------------------------------------------------------------------- report
def summarise(name: str, ns: argparse.Namespace, run: dict[str, Any]) -> dict[str, Any]:
    steps = run["step_s"]
    per_step = statistics.fmean(steps) if steps else float("nan")
    return {"system": name, "steps": len(steps), "group_size": ns.group_size,
            "prompts_per_step": ns.prompts, "wall_s_per_step": per_step,
            "wall_s_per_step_median": statistics.median(steps) if steps else float("nan"),
            "samples_per_s": ns.prompts * ns.group_size / per_step if steps else float("nan"),
            "step_s": steps, "train_wall_s": run["wall_s"],
            "reward_mean": run.get("reward_mean"), "tool_calls_mean": run.get("tool_calls_mean"),
            "truncation_rate": run.get("truncation_rate"), "final_dir": run["final_dir"]}


def _acc(ev: dict[str, Any] | None) -> str:
    if not ev:
        return "-"
    lo, hi = ev["ci95"]
    return f"{ev['accuracy']:.1%} [{lo:.0%}, {hi:.0%}]"


def _num(x: Any, fmt: str) -> str:
    return "-" if x is None or x != x else format(x, fmt)


def print_report(result: dict[str, Any]) -> None:
    rows = []
    base = result["start"]
    rows.append(["start (SFT model, no RL)", "0", "-", "-", "-", "-",
                 _acc(base.get("text")), _acc(base.get("native")), "-"])
    for r in result["rows"]:
        ev = r.get("eval", {})
        rows.append([r["system"], str(r["steps"]), str(r["group_size"]),
                     str(r["prompts_per_step"]),
                     f"{_num(r['wall_s_per_step'], '.2f')} / "
                     f"{_num(r['wall_s_per_step_median'], '.2f')}",
                     _num(r["samples_per_s"], ".2f"), _acc(ev.get("text")),
                     _acc(ev.get("native")), _num(r.get("speedup"), ".2f") + "x"
                     if r.get("speedup") is not None else "-"])
    n = result["config"]["eval_problems"]
    print_table(f"agentic GRPO on {result['model']['size']} tool model, CPU "
                f"({result['config']['steps']} steps)",
                ["system", "steps", "G", "prompts/step", "wall s/step (mean / median)",
                 "samples/s",
                 f"held-out acc, openai_tools text (n={n}, 95% CI)",
                 f"held-out acc, native chat (n={n}, 95% CI)", "speedup vs TRL"], rows)
    for note in result["notes"]:
        print(f"* {note}")


def notes(result: dict[str, Any]) -> list[str]:
    c = result["config"]
    out = [
        f"same for both: {c['steps']} steps x {c['prompts']} prompts x G={c['group_size']}, "
        f"lr {c['lr']:g} constant, temperature {c['temperature']}, completion budget "
        f"{c['max_completion']} tokens, {c['max_tool_calls']} tool calls, accuracy reward, "
        "token-level loss, clip 0.2/0.28, no KL; the same training prompts in the same order.",
        "agentmath: `train_rl`, format openai_tools (token-exact text protocol), hf backend in "
        f"process, rollout mode(s) {', '.join(c['agentmath_modes'])}, dynamic sampling "
        f"{'on' if c['dynamic_sampling'] else 'off'}.",
        f"TRL {result['versions'].get('trl', '?')}: GRPOTrainer(use_vllm=False) on CPU, its "
        f"multi-turn tool loop via {result.get('trl_tool_mode', '-')}, native chat protocol; "
        "tool calls run in agentmath's sandbox.",
        "samples/s = prompts x G / mean wall s per step (all steps, the first one's warm-up "
        "included); held-out accuracy is greedy, one "
        "sample per problem, bootstrap 95% CI.",
        f"load average (1 min) before each half: {result['load']}; torch threads "
        f"{result['torch_threads']}; the machine is shared, so timings are noisy.",
    ]
    if result.get("goal") is not None:
        g = result["goal"]
        out.append(f"goal (>= TRL accuracy at >= 1.5x throughput), {g['system']}: throughput "
                   f"{g['speedup']:.2f}x, accuracy {g['agentmath_accuracy']:.1%} vs "
                   f"{g['trl_accuracy']:.1%} (openai_tools text) -> "
                   f"{'met' if g['met'] else 'not met'}.")
    return out


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def versions() -> dict[str, str]:
    out = {}
    for mod in ("torch", "transformers", "trl"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return out


# ----------------------------------------------------------------------------- main
def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=16, help="GRPO steps for each trainer")
    p.add_argument("--group-size", type=int, default=4, help="G: samples per prompt")
    p.add_argument("--prompts", type=int, default=2, help="prompts per step")
    p.add_argument("--lr", type=float, default=2e-5, help="learning rate (constant)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--max-completion", type=int, default=320,
                   help="completion budget in tokens (TRL max_completion_length)")
    p.add_argument("--max-tool-calls", type=int, default=6, help="tool calls per episode")
    p.add_argument("--eval-problems", type=int, default=50, help="held-out problems")
    p.add_argument("--model-size", default="micro", help="tiny model size")
    p.add_argument("--sft-steps", type=int, default=600, help="SFT steps of the model")
    p.add_argument("--sft-problems", type=int, default=1500, help="SFT training problems")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-grpo",
                   help="where the cached model and the runs go")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--skip-trl", action="store_true", help="agentmath only")
    p.add_argument("--trl-tools", choices=["env", "plain"], default="env",
                   help="TRL tool wiring: env = environment_factory (a session per rollout), "
                        "plain = tools=[python] (a fresh session per call)")
    p.add_argument("--agentmath-modes", type=lambda v: [m for m in v.split(",") if m],
                   default=["async", "sync"],
                   help="agentmath rollout modes to run, comma-separated (the first is the one "
                        "the goal is judged on)")
    p.add_argument("--dynamic-sampling", action="store_true",
                   help="agentmath's dynamic sampling on (TRL has none)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP_NUM_THREADS for the whole run (default: torch's own choice)")
    p.add_argument("--no-native-eval", action="store_true",
                   help="skip the native-protocol evaluation")
    ns = p.parse_args(argv)
    if not ns.agentmath_modes or set(ns.agentmath_modes) - {"async", "sync"}:
        p.error(f"--agentmath-modes: async and/or sync, not {ns.agentmath_modes}")
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = parse(argv)
    if ns.threads:  # before torch is imported (nothing above imports it)
        os.environ["OMP_NUM_THREADS"] = str(ns.threads)
    # The trainers print their logs (TRL's PrinterCallback) to stdout: keep it for the result.
    with contextlib.redirect_stdout(sys.stderr):
        result = run(ns)
    if ns.json:
        print(json.dumps(result))
    else:
        print_report(result)
    return 0


def run(ns: argparse.Namespace) -> dict[str, Any]:
    """Everything: the model, both trainers, the evaluations; the result object."""
    started = time.monotonic()
    cfg = model_config(ns)
    mdir = build_model(cfg, ns.out, log)
    model_dir, test = mdir / "final", mdir / "test.jsonl"
    run_dir = ns.out / f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    rows = training_rows(cfg, ns.steps * ns.prompts, ns.seed)
    data = write_jsonl(rows, run_dir / "train.jsonl")

    from transformers import AutoTokenizer

    from agentmath.formats import get_format

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    instr = get_format("openai_tools").instructions()
    max_prompt = max(len(tok.apply_chat_template(
        [{"role": "system", "content": instr}, {"role": "user", "content": r["problem"]}],
        tokenize=True, add_generation_prompt=True, return_dict=False)) for r in rows)

    log("evaluating the starting model")
    start = cached_eval(ns, model_dir, test)
    load: dict[str, float] = {}
    results: list[dict[str, Any]] = []
    for mode in ns.agentmath_modes:
        log(f"agentmath rl ({mode}): {ns.steps} steps")
        load[f"agentmath-{mode}"] = load_avg()
        am = run_agentmath(ns, str(model_dir), data, run_dir / f"agentmath-{mode}", max_prompt,
                           mode)
        results.append(summarise(f"agentmath rl ({mode}, openai_tools)", ns, am))
    trl_mode = None
    if not ns.skip_trl:
        log(f"TRL GRPOTrainer: {ns.steps} steps")
        load["trl"] = load_avg()
        tr = run_trl_side(ns, str(model_dir), rows, run_dir / "trl")
        trl_mode = tr["tool_mode"]
        row = summarise(f"TRL GRPOTrainer ({trl_mode}, native)", ns, tr)
        row["trl_checks"] = tr["checks"]
        results.append(row)
    for r in results:
        log(f"evaluating {r['system']}")
        r["eval"] = evaluate(ns, r["final_dir"], test, Path(r["final_dir"]).parent)
    goal = None
    if not ns.skip_trl:
        trl_row = results[-1]
        for row in results:
            row["speedup"] = row["samples_per_s"] / trl_row["samples_per_s"]
        am_row = results[0]  # the first mode given (default async: the configuration)
        a, t = am_row["eval"]["text"]["accuracy"], trl_row["eval"]["text"]["accuracy"]
        goal = {"system": am_row["system"], "speedup": am_row["speedup"],
                "agentmath_accuracy": a, "trl_accuracy": t,
                "met": am_row["speedup"] >= 1.5 and a >= t}
    summary = json.loads((mdir / "tool_model.json").read_text())
    result: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(ns).items()},
        "model": {"dir": str(model_dir), "size": ns.model_size, "sft_steps": ns.sft_steps,
                  "formats": cfg.formats, "sft_final_loss": summary.get("final_loss")},
        "start": start, "rows": results, "goal": goal, "load": load,
        "versions": versions(), "torch_threads": _torch_threads(), "trl_tool_mode": trl_mode,
        "run_dir": str(run_dir),
        "wall_s": time.monotonic() - started}
    result["notes"] = notes(result)
    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
