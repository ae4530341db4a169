"""Agentic GRPO: ``agentmath rl`` beside TRL's ``GRPOTrainer`` (its own tool loop) on the demo's
task, where GRPO learns: held-out accuracy against training wall time, over a learning-rate sweep.

    python benchmarks/grpo.py                       # defaults (see "Cost" below)
    python benchmarks/grpo.py --lrs 1e-4,3e-4 --json
    python benchmarks/grpo.py --quick               # a smoke run: tiny sizes, 2 lrs, 2 steps

The task (the project demo's, ``agentmath/recipes/demo.py``). The start model is SFT'd on a
**mixture**: a ``text_share`` (0.7) of its training problems do the arithmetic in text (the
problem's chain-of-thought ending in ``\\boxed{answer}``), the rest in code (verified tool
trajectories), with 3-digit operands. It then answers in text most of the time (greedy accuracy
near 0: a tiny model cannot multiply 3-digit numbers in its head) and samples the tool about a
third of the time at temperature 1 (high pass@8): GRPO with an accuracy reward can lift greedy
accuracy a long way by teaching it to choose the tool. Before training, the start's headroom is
measured and printed: greedy pass@1, and pass@k (k = 8) at the RL temperature, on the held-out
problems, in both protocols.

What is compared: the headline. For each trainer, a learning-rate sweep (``--lrs``, the same
list for both, constant schedule) from the same start model, on the same training prompts in
the same order, group size G = 8, 8 prompts a step, the same step budget (16), temperature
1.0, completion and tool-call budgets, objective (token-level DAPO aggregation,
group-normalised advantages, clip 0.2/0.28, no KL, no dynamic sampling) and accuracy reward
(agentmath's grader): the same number of generated samples a step on both sides.
agentmath runs with async rollouts (``--agentmath-mode``).

The extra row. agentmath's dynamic sampling (``RLConfig.dynamic_sampling``, DAPO: a group
whose rewards are all equal carries no gradient, so the step draws fresh groups from the same
prompt stream, up to ``--max-sampling-rounds`` rounds, until 8 with signal are found; the
extra generation is in its wall time) is run too, at every lr, as a second, labelled row,
"agentmath + dynamic sampling (extra: more prompts and samples per step)": a different
objective that consumes more prompts and samples than TRL a step, so it is reported beside
the goal's verdict, never in it. ``--no-dynamic-sampling-row`` leaves it out. Its extra draws
take the next prompts of the same stream, so it runs ahead of the headline's order and past its
last prompt into fresh problems (the data holds ``--max-sampling-rounds`` times the headline's
prompts, never a second epoch; the headline runs read only the first ones).

The runs alternate (agentmath, TRL, agentmath + dynamic sampling at lr 1, then at lr 2, ...)
so that a change in the machine's load hits every arm. Each run saves its model every
``--eval-every`` steps (4) and at its last; after all the training, every saved model is
evaluated on the held-out problems (greedy, both protocols): accuracy against the cumulative
training wall time at which it was saved. Evaluation is not in the training time.

Reported: a table (run, headline or extra row, lr, step, training wall seconds, held-out
accuracy with its 95% CI in each protocol); a table of the runs with the prompts and samples
each consumed, in total and per step (mean, min-max), read from each trainer's own records:
agentmath's step metrics (``read_steps``: the groups each step scored, trained or dropped, and
every sample it generated) and TRL's generations as its reward function received them (every
completion of a step and the distinct prompts among them), not from the settings; then the
summary: TRL's best final accuracy over its lrs (and that run's wall time), for each agentmath
run the wall time at which it first reaches that accuracy (at a saved step; or never) and its
ratio to TRL's time; the goal is met when some headline agentmath run reaches it in at most
half of TRL's time AND the headline agentmath's best final accuracy is at least TRL's best
final. The extra rows' figures against the same target are printed beside the verdict (and
under ``goal.extra`` in ``--json``). Accuracy is judged in each trainer's own protocol by
default (``--goal-protocol``: agentmath's text protocol, TRL's native chat protocol); both are
always reported. A PNG plot of accuracy against wall time for every run goes to the run
directory under ``--out``, with ``result.json`` (the ``--json`` object) and ``runs.jsonl``
(each training run's record as soon as it ends, before any evaluation: what a stopped run
keeps). The tables, the goal and the plot are written by ``_grpo_report.py``.

The model. ``build_tool_model`` grows a ``micro`` Qwen3 (``--sft-steps`` of batch
``--sft-batch``, 16) on synthetic word problems in ONE protocol, native tool calling (chat
records: the assistant's ``<tool_call>`` ends its turn, the result is a ``tool`` turn),
``text_share`` of its problems as text records under the same system prompt and tools schema;
cached under ``--out`` by a hash of its config (a rerun skips it). Both trainers sample that
very protocol, token for token:

* TRL's ``tools=`` loop is native tool calling. It needs the tool schema it renders from a
  Python function to be the one the model was trained with, a prefix-preserving template, and a
  response template to parse calls; ``_grpo_trl.py`` checks all of them before it trains (the
  prompt TRL renders is compared character for character with the training one, and a text
  answer, as the native text records train it, must parse as a turn without a tool call, which
  ends TRL's episode).
* agentmath's GRPO drives the ``chatml_tools`` format token-exactly through its own loop with
  the ``hf`` backend: each result rendered as the chat template renders a ``tool`` turn and the
  next assistant header (a unit test checks the two renderings byte for byte), under the system
  message that the template writes for the records' system prompt and tools
  (:func:`chatml_system_prompt`, checked when the benchmark starts).

Timing. The cumulative training wall time at step k runs from the start of the first step to
the end of step k, as each trainer's hooks see it (agentmath: ``train_rl``'s ``on_step`` and
the first step's ``step_s``; TRL: a callback's ``on_step_begin`` of step 1 -> ``on_step_end`` of
step k); model loading and set-up are not in it (recorded apart, ``setup_s``). TRL's saves for
the curve are timed and taken out; agentmath's checkpoints are written inside ``train_rl``
between steps and stay in (they are small, and with async rollouts generation may go on while
one is written, so taking them out could flatter agentmath). The sums of per-step times
(``step_s_sum``) are recorded too. The machine is shared: the 1-minute load average before and
after each run and the process CPU seconds of each run are recorded; compare times only within
one run of this script.

Deviations from the issue's sketch, forced by the facts:

* TRL runs with ``environment_factory`` (one sandbox session per rollout, its ``python`` method
  the tool) rather than a bare ``tools=[python]``: the model's code reuses variables from its
  earlier calls, and a bare tool function has no per-rollout state in TRL's loop (a fresh
  session per call makes every second call fail with NameError; one shared session lets
  rollouts overwrite each other's variables). It is the same ``_tool_call_loop``, schema
  rendering and parsing as ``tools=``. ``--trl-tools plain`` runs the bare function anyway.
* Held-out accuracy is measured two ways for every model (``_grpo_eval.py``): ``text``, the
  ``chatml_tools`` loop through ``run_eval`` (agentmath's protocol), and ``native``, the chat
  loop with TRL's own response parser (TRL's); the same prompts and renderings, both greedy,
  graded by the same grader on the same problems, so the two should agree up to the parsers'
  edge cases (a malformed call).
* The demo's GRPO uses void-turn filtering and a tool-call budget that grows in stages; here
  neither (TRL has no equivalent): one budget (6 tool calls) and no filters for both. TRL has
  no dynamic sampling: agentmath's runs only in the extra row (above).
* Budgets cannot be made identical: TRL's ``max_completion_length`` counts model AND tool tokens
  after the prompt; agentmath counts model tokens (``max_model_tokens`` = the same number) and a
  context budget (``max_total_tokens`` = the longest training prompt + the same number).
* "First reaches" is read at the saved steps only (every ``--eval-every`` steps), so it is an
  upper bound on the true time; the start (step 0) does not count as reaching.

Cost (defaults): growing the model once (cached under ``--out``); the start's greedy accuracy
and pass@8 (1,600 episodes a protocol; cached); 3 lrs x 3 runs x 16 steps of 64 episodes or
more (the extra row's steps generate up to ``--max-sampling-rounds`` times as many); then 36
saved models x 2 protocols x 100 held-out problems. ``--lrs``, ``--eval-every``,
``--eval-problems`` and ``--no-dynamic-sampling-row`` trade coverage for time; measured runs
and their times are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
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

from _grpo_eval import evaluate_all  # noqa: E402
from _grpo_report import (  # noqa: E402
    ARMS,
    agentmath_consumed,
    consumption,
    goal_summary,
    notes,
    print_report,
    write_plot,
)

from agentmath.recipes.tool_model import GrownModel, ToolModelConfig  # noqa: E402
from agentmath.synth.config import NATIVE  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HELD_OUT = 200  # held-out problems of the model (--eval-problems reads the first ones)
PROTOCOLS = ("text", "native")
OWN_PROTOCOL = {"agentmath": "text", "trl": "native"}

# --quick: every size tiny (the smoke test); an option given explicitly still wins. Its
# evaluations also share one sandbox pool (_grpo_eval.evaluate_all)
QUICK = {"steps": 2, "group_size": 2, "prompts": 1, "lrs": [1e-4, 3e-4], "eval_every": 1,
         "max_completion": 48, "max_tool_calls": 1, "eval_problems": 2, "headroom_k": 2,
         "headroom_problems": 2, "model_size": "nano", "sft_steps": 4, "sft_problems": 16,
         "sft_batch": 4}


def model_config(ns: argparse.Namespace) -> ToolModelConfig:
    return ToolModelConfig(seed=ns.seed, train_problems=ns.sft_problems, test_problems=HELD_OUT,
                           max_digits=3, formats=[NATIVE],
                           model_size=ns.model_size, steps=ns.sft_steps,
                           batch_size=ns.sft_batch,
                           text_share=ns.text_share)


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def build_model(cfg: ToolModelConfig, out: Path, log: Any) -> Path:
    """The cached model directory (``final/``, ``test.jsonl``, ``tool_model.json``)."""
    from agentmath.recipes.tool_model import cached_tool_model

    return cached_tool_model(cfg, out, stage=log)


def training_rows(cfg: ToolModelConfig, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` fresh problems from the same generator (none seen in SFT or held out)."""
    from agentmath.tasks.synthetic import generate_problems, make_problems, to_task_rows

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


def save_steps(ns: argparse.Namespace) -> list[int]:
    """The steps whose models are evaluated: every ``eval_every`` steps, and the last."""
    return sorted({*range(ns.eval_every, ns.steps + 1, ns.eval_every), ns.steps})


# ----------------------------------------------------------------------------- the two trainers
def chatml_system_prompt(tokenizer: Any) -> str:
    """The system message under which the ``chatml_tools`` loop renders, token for token, the
    prompt of the native tool-calling records (and of TRL): the records' system prompt with
    the tools block the chat template writes when given ``tools``. Checked here by rendering
    both ways; a template that puts tools elsewhere raises."""
    from agentmath.agent.prompts import CHAT_SYSTEM_PROMPT
    from agentmath.formats.openai_tools import tool_spec

    user = {"role": "user", "content": "What is 1 + 1?"}
    native = tokenizer.apply_chat_template([{"role": "system", "content": CHAT_SYSTEM_PROMPT},
                                            user], tools=[tool_spec()], tokenize=False,
                                           add_generation_prompt=True)
    head, end = "<|im_start|>system\n", native.find("<|im_end|>\n")
    system = native[len(head):end]
    plain = tokenizer.apply_chat_template([{"role": "system", "content": system}, user],
                                          tokenize=False, add_generation_prompt=True)
    if not native.startswith(head) or plain != native:
        raise RuntimeError("the chat template's native prompt is not a system message plus "
                           "the turns: chatml_tools cannot render it")
    return system


def run_agentmath(ns: argparse.Namespace, lr: float, model_dir: str, data: Path, out: Path,
                  max_prompt_tokens: int, system: str, dynamic_sampling: bool) -> dict[str, Any]:
    """One ``train_rl`` run: its step times, saved models and what it consumed (its step
    metrics)."""
    from agentmath.config import LoopConfig, RolloutConfig
    from agentmath.rl.config import (
        GeneratorConfig,
        LossConfig,
        OptimConfig,
        RLConfig,
        RLDataConfig,
        TemperatureSchedule,
    )
    from agentmath.rl.records import read_steps
    from agentmath.rl.trainer import train_rl

    cfg = RLConfig(
        model=model_dir, format="chatml_tools",
        data=RLDataConfig(dataset=str(data), shuffle=False), steps=ns.steps,
        group_size=ns.group_size, prompts_per_step=ns.prompts,
        dynamic_sampling=dynamic_sampling, max_sampling_rounds=ns.max_sampling_rounds,
        seed=ns.seed, device="cpu",
        loss=LossConfig(clip_low=0.2, clip_high=0.28, aggregation="token", kl_coef=0.0,
                        micro_batch_size=max(16, ns.group_size * ns.prompts)),
        optim=OptimConfig(learning_rate=lr, decay="constant", max_grad_norm=1.0),
        temperature=TemperatureSchedule(start=ns.temperature),
        loop=LoopConfig(max_model_tokens=ns.max_completion, max_tool_calls=ns.max_tool_calls,
                        max_total_tokens=max_prompt_tokens + ns.max_completion,
                        system_prompt=system),
        rollout=RolloutConfig(mode=ns.agentmath_mode),
        generator=GeneratorConfig(backend="hf", max_batch=64),
        # a checkpoint (model + tokenizer, loadable for evaluation) every eval_every steps and
        # at the last; all kept
        checkpoint_every=ns.eval_every, keep_checkpoints=0, tensorboard=False)
    seen: list[tuple[int, float, float]] = []  # (step, monotonic time at on_step, step_s)
    started = time.monotonic()
    result = train_rl(cfg, out, progress=False, resume=False,
                      on_step=lambda m: seen.append((m.step, time.monotonic(), m.step_s)))
    rows = read_steps(result.metrics)
    t0 = seen[0][1] - seen[0][2]  # the first step's start
    step_s = [r.step_s for r in rows]
    checkpoints = []
    for step in save_steps(ns):
        at = next(t for s, t, _ in seen if s == step)
        path = out / f"checkpoint-{step}"
        if not (path / "config.json").exists():
            raise RuntimeError(f"agentmath wrote no checkpoint at step {step}: {path}")
        checkpoints.append({"step": step, "dir": str(path), "wall_s": at - t0,
                            "step_s_sum": sum(step_s[:step])})
    return {"final_dir": result.final_dir, "checkpoints": checkpoints, "step_s": step_s,
            "setup_s": t0 - started,
            "reward_mean": [r.reward_mean for r in rows],
            "tool_calls_mean": [r.tool_calls_mean for r in rows],
            "truncation_rate": [r.truncation_rate for r in rows],
            "consumed": agentmath_consumed(rows),
            "stale_groups_dropped": sum(r.stale_dropped for r in rows)}


def run_trl_side(ns: argparse.Namespace, lr: float, model_dir: str, rows: list[dict[str, Any]],
                 out: Path) -> dict[str, Any]:
    from _grpo_trl import run_trl

    res = run_trl(model_dir, rows, out, steps=ns.steps, group_size=ns.group_size,
                  prompts_per_step=ns.prompts, learning_rate=lr,
                  temperature=ns.temperature, max_completion_length=ns.max_completion,
                  max_tool_calls=ns.max_tool_calls, seed=ns.seed,
                  stateful=ns.trl_tools == "env", save_steps=save_steps(ns))
    logs = res["logs"]
    res["reward_mean"] = [log.get("reward") for log in logs]
    res["tool_calls_mean"] = [log.get("tools/call_frequency") for log in logs]
    res["truncation_rate"] = [log.get("completions/clipped_ratio") for log in logs]
    return res


def train_run(ns: argparse.Namespace, arm: str, lr: float, model_dir: Path, data: Path,
              rows: list[dict[str, Any]], run_dir: Path, max_prompt: int,
              system: str) -> dict[str, Any]:
    """One training run of ``arm`` (``ARMS``) and what was measured around it (load, CPU
    seconds, the prompts and samples it consumed)."""
    trainer, dynamic_sampling = ARMS[arm].trainer, ARMS[arm].dynamic_sampling
    name = f"{arm}-lr{lr:g}"
    log(f"{name}: {ns.steps} steps of {ns.prompts} x {ns.group_size}"
        + (" (dynamic sampling)" if dynamic_sampling else ""))
    load_before, cpu0 = load_avg(), time.process_time()
    if trainer == "agentmath":
        res = run_agentmath(ns, lr, str(model_dir), data, run_dir / name, max_prompt, system,
                            dynamic_sampling)
    else:
        res = run_trl_side(ns, lr, str(model_dir), rows[:ns.steps * ns.prompts],
                           run_dir / name)
    steps = res["step_s"]
    consumed = consumption(res["consumed"])
    run = {"arm": arm, "trainer": trainer, "label": ARMS[arm].label,
           "headline": ARMS[arm].headline,
           "dynamic_sampling": dynamic_sampling, "lr": lr, "name": name,
           "mode": ns.agentmath_mode if trainer == "agentmath" else res["tool_mode"],
           "steps": len(steps), "step_s": steps, "consumed": consumed,
           "wall_s_per_step": statistics.fmean(steps) if steps else float("nan"),
           "samples_per_s": (consumed["samples"] / sum(steps) if steps else float("nan")),
           "setup_s": res["setup_s"], "cpu_s": time.process_time() - cpu0,
           "load_before": load_before, "load_after": load_avg(),
           "reward_mean": res.get("reward_mean"), "tool_calls_mean": res.get("tool_calls_mean"),
           "truncation_rate": res.get("truncation_rate"), "final_dir": res["final_dir"],
           "points": res["checkpoints"]}
    if trainer == "trl":
        run["trl_checks"] = res["checks"]
        run["saving_s"] = res["saving_s"]
    else:
        run["stale_groups_dropped"] = res["stale_groups_dropped"]
    return run


# ----------------------------------------------------------------------------- evaluation
def cached_start(ns: argparse.Namespace, model_dir: Path, test: Path) -> dict[str, Any]:
    """The start model's greedy accuracy and headroom (pass@k at the RL temperature), cached
    next to it."""
    key = _key({"n": ns.eval_problems, "t": ns.max_completion, "c": ns.max_tool_calls,
                "s": ns.seed, "native": not ns.no_native_eval, "k": ns.headroom_k,
                "temp": ns.temperature, "hp": ns.headroom_problems})
    path = model_dir.parent / f"start-{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    with tempfile.TemporaryDirectory(dir=model_dir.parent) as d:
        greedy, sampled = evaluate_all(ns, [
            (f"the start's greedy accuracy on {ns.eval_problems} held-out problems",
             (str(model_dir), test, Path(d) / "greedy"), {}),
            (f"the start's headroom: {ns.headroom_k} samples at temperature {ns.temperature} "
             f"on {ns.headroom_problems} held-out problems",
             (str(model_dir), test, Path(d) / "sampled"),
             {"samples": ns.headroom_k, "temperature": ns.temperature,
              "limit": ns.headroom_problems})])
    result = {"greedy": greedy, "sampled": sampled}
    path.write_text(json.dumps(result, indent=2) + "\n")
    return result


def headroom(start: dict[str, Any], k: int) -> dict[str, Any]:
    """Per protocol: greedy pass@1, pass@k and sampled pass@1 at the RL temperature."""
    return {p: {"greedy_pass@1": start["greedy"][p]["accuracy"],
                f"pass@{k}": start["sampled"][p][f"pass@{k}"] if k > 1
                else start["sampled"][p]["accuracy"],
                "sampled_pass@1": start["sampled"][p]["accuracy"],
                "sampled_tool_calls_per_sample": start["sampled"][p]["tool_calls_per_sample"],
                "problems": start["sampled"][p].get("problems", start["sampled"][p]["n"])}
            for p in start["greedy"]}


# ----------------------------------------------------------------------------- the goal
def goal_protocol(ns: argparse.Namespace, trainer: str) -> str:
    """The protocol ``trainer``'s accuracy is judged in for the goal."""
    protocol = OWN_PROTOCOL[trainer] if ns.goal_protocol == "own" else ns.goal_protocol
    return "text" if ns.no_native_eval else protocol


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
def _lrs(value: str) -> list[float]:
    lrs = [float(v) for v in value.split(",") if v.strip()]
    if not lrs or any(lr <= 0 for lr in lrs) or len(set(lrs)) != len(lrs):
        raise argparse.ArgumentTypeError(f"distinct positive learning rates, not {value!r}")
    return lrs


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: every size tiny, 2 lrs, 2 steps (explicit options win)")
    p.add_argument("--steps", type=int, default=16, help="GRPO steps of every run")
    p.add_argument("--group-size", type=int, default=8, help="G: samples per prompt")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--lrs", type=_lrs, default=[3e-5, 1e-4, 3e-4],
                   help="learning rates (constant), comma-separated: each trainer runs each")
    p.add_argument("--eval-every", type=int, default=4,
                   help="save and evaluate the model every N steps (and at the last)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--max-completion", type=int, default=320,
                   help="completion budget in tokens (TRL max_completion_length)")
    p.add_argument("--max-tool-calls", type=int, default=6, help="tool calls per episode")
    p.add_argument("--eval-problems", type=int, default=100,
                   help=f"held-out problems for accuracy (at most {HELD_OUT})")
    p.add_argument("--headroom-k", type=int, default=8,
                   help="the start's pass@k: k samples per problem at the RL temperature")
    p.add_argument("--headroom-problems", type=int, default=100,
                   help="held-out problems for the start's pass@k")
    p.add_argument("--model-size", default="micro", help="tiny model size")
    p.add_argument("--sft-steps", type=int, default=1200,
                   help="SFT steps of the model")
    p.add_argument("--sft-problems", type=int, default=1500, help="SFT training problems")
    p.add_argument("--sft-batch", type=int, default=16, help="SFT batch size")
    p.add_argument("--text-share", type=float, default=0.7,
                   help="share of the SFT problems trained as text records (the demo's mixture)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-grpo",
                   help="where the cached model, the runs and the plot go")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--skip-trl", action="store_true", help="agentmath only")
    p.add_argument("--trl-tools", choices=["env", "plain"], default="env",
                   help="TRL tool wiring: env = environment_factory (a session per rollout), "
                        "plain = tools=[python] (a fresh session per call)")
    p.add_argument("--agentmath-mode", choices=["async", "sync"], default="async",
                   help="agentmath's rollout mode")
    p.add_argument("--goal-protocol", choices=["own", "text", "native"], default="own",
                   help="protocol the goal's accuracies are read in (own: each trainer's)")
    p.add_argument("--dynamic-sampling-row", action=argparse.BooleanOptionalAction,
                   default=True,
                   help="also run agentmath with dynamic sampling, a labelled extra row that "
                        "consumes more prompts and samples per step (never in the goal)")
    p.add_argument("--max-sampling-rounds", type=int, default=3,
                   help="dynamic sampling's rollout rounds per step at most (the extra row)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP_NUM_THREADS for the whole run (default: torch's own choice)")
    p.add_argument("--no-native-eval", action="store_true",
                   help="skip the native-protocol evaluation")
    ns = p.parse_args(argv)
    if ns.quick:
        p.set_defaults(**QUICK)
        ns = p.parse_args(argv)
    if not 1 <= ns.eval_problems <= HELD_OUT or not 1 <= ns.headroom_problems <= HELD_OUT:
        p.error(f"--eval-problems and --headroom-problems: 1..{HELD_OUT}")
    if min(ns.steps, ns.eval_every, ns.headroom_k, ns.max_sampling_rounds) < 1:
        p.error("--steps, --eval-every, --headroom-k and --max-sampling-rounds must be at "
                "least 1")
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
    """Everything: the model, its headroom, the sweeps, the evaluations; the result object."""
    started = time.monotonic()
    cfg = model_config(ns)
    mdir = build_model(cfg, ns.out, log)
    model_dir, test = mdir / "final", mdir / "test.jsonl"
    run_dir = ns.out / f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    # the headline runs read the first steps x prompts rows; dynamic sampling's extra draws
    # continue the same stream into the rest (fresh problems, not a second epoch)
    extra = ns.max_sampling_rounds if ns.dynamic_sampling_row else 1
    rows = training_rows(cfg, ns.steps * ns.prompts * extra, ns.seed)
    data = write_jsonl(rows, run_dir / "train.jsonl")

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ns.system_prompt = system = chatml_system_prompt(tok)
    max_prompt = max(len(tok.apply_chat_template(
        [{"role": "system", "content": system}, {"role": "user", "content": r["problem"]}],
        tokenize=True, add_generation_prompt=True, return_dict=False)) for r in rows)

    start = cached_start(ns, model_dir, test)
    room = headroom(start, ns.headroom_k)
    for protocol, h in room.items():
        log(f"start ({protocol}): greedy pass@1 {h['greedy_pass@1']:.1%}, pass@{ns.headroom_k} "
            f"{h[f'pass@{ns.headroom_k}']:.1%} at temperature {ns.temperature}")

    arms = (["agentmath"] + ([] if ns.skip_trl else ["trl"])
            + (["agentmath+ds"] if ns.dynamic_sampling_row else []))
    runs = []
    for lr in ns.lrs:  # alternating: load changes hit every arm
        for arm in arms:
            runs.append(train_run(ns, arm, lr, model_dir, data, rows, run_dir, max_prompt,
                                  system))
            # each run's record as soon as it ends: a benchmark stopped before its
            # evaluations keeps what its training measured
            with (run_dir / "runs.jsonl").open("a") as f:
                f.write(json.dumps(runs[-1]) + "\n")
    eval_started = time.monotonic()
    points = [(r, p) for r in runs for p in r["points"]]
    found = evaluate_all(ns, [(f"evaluating {r['name']} at step {p['step']}",
                               (p["dir"], test, run_dir / "eval" / f"{r['name']}-{p['step']}"),
                               {}) for r, p in points])
    for (_, p), ev in zip(points, found, strict=True):
        p["eval"] = ev
    for r in runs:
        r["final"] = r["points"][-1]["eval"]
    summary = GrownModel.read(mdir)
    trl_runs = [r for r in runs if r["trainer"] == "trl"]
    result: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(ns).items()},
        "model": {"dir": str(model_dir), "size": ns.model_size, "sft_steps": ns.sft_steps,
                  "formats": cfg.formats, "text_share": cfg.text_share,
                  "sft_final_loss": summary.final_loss,
                  "conversion": {k: v.to_dict() for k, v in summary.conversion.items()}},
        "start": start, "headroom": room, "runs": runs,
        "goal": goal_summary(runs, {t: goal_protocol(ns, t) for t in OWN_PROTOCOL}),
        "versions": versions(), "torch_threads": _torch_threads(),
        "trl_tool_mode": trl_runs[0]["mode"] if trl_runs else None,
        "trl_checks": trl_runs[0]["trl_checks"] if trl_runs else None,
        "run_dir": str(run_dir), "eval_s": time.monotonic() - eval_started}
    result["plot"] = str(write_plot(result, run_dir / "accuracy_vs_wall.png"))
    result["wall_s"] = time.monotonic() - started
    result["notes"] = notes(result)
    (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
