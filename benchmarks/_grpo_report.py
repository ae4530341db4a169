"""What ``benchmarks/grpo.py`` reports: the prompts and samples each run consumed, the goal
verdict on the headline rows, the tables, the notes and the plot.

The rows. Each learning rate has three runs, of two kinds:

* the **headline**: ``agentmath`` with dynamic sampling off and ``trl``, the same objective
  and the same number of generated samples a step (prompts x G); the goal's verdict is
  computed on these rows only;
* the **extra** row, ``agentmath+ds``: agentmath with its dynamic sampling (DAPO: a group
  whose rewards are all equal carries no gradient and is replaced by a fresh draw, up to
  ``max_sampling_rounds`` rounds a step), which takes in more prompts and samples a step; it
  is reported beside the verdict, never in it.

Prompts and samples consumed are read from each trainer's own records, not from the
settings: agentmath's step metrics (:func:`agentmath_consumed`), TRL's generations as its
reward function received them (``_grpo_trl.GenerationTally``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import print_table


@dataclass(frozen=True, slots=True)
class Arm:
    """One kind of run: its trainer, whether agentmath's dynamic sampling is on, whether it
    is a headline row (the goal's verdict) or an extra one, and the label the table prints."""

    trainer: str
    dynamic_sampling: bool
    headline: bool
    label: str


ARMS = {
    "agentmath": Arm("agentmath", False, True, "agentmath"),
    "trl": Arm("trl", False, True, "TRL"),
    "agentmath+ds": Arm("agentmath", True, False, "agentmath + dynamic sampling "
                                                  "(extra: more prompts and samples per step)"),
}


@dataclass(frozen=True, slots=True)
class Consumed:
    """What one training step took in: prompts (groups) and generated samples."""

    step: int
    prompts: int
    samples: int


def agentmath_consumed(rows: list[Any]) -> list[Consumed]:
    """Per step, from agentmath's step metrics (``read_steps``): the prompts are the groups
    the step scored (trained, dropped for want of reward variance, surplus beyond the need;
    the benchmark uses no filters), the samples every sample the step generated and scored
    (``samples_per_s`` is their number over the rollout time ``rollout_s``; ``samples``
    counts only the trained ones)."""
    return [Consumed(r.step, r.groups_trained + r.groups_dropped + r.groups_surplus,
                     round(r.samples_per_s * r.rollout_s)) for r in rows]


def consumption(per_step: list[Consumed]) -> dict[str, Any]:
    """Totals over the run and the per-step figures (mean, min, max, each step)."""
    prompts = [c.prompts for c in per_step]
    samples = [c.samples for c in per_step]

    def spread(values: list[int]) -> dict[str, float]:
        return {"mean": statistics.fmean(values) if values else 0.0,
                "min": min(values, default=0), "max": max(values, default=0)}

    return {"prompts": sum(prompts), "samples": sum(samples),
            "prompts_per_step": spread(prompts), "samples_per_step": spread(samples),
            "per_step": [{"step": c.step, "prompts": c.prompts, "samples": c.samples}
                         for c in per_step]}


# ----------------------------------------------------------------------------- the goal
def reaching(runs: list[dict[str, Any]], target: float, trl_s: float,
             acc: Any) -> list[dict[str, Any]]:
    """For each run: its final accuracy and when it first reaches ``target`` (at a saved
    step), with the ratio to TRL's time ``trl_s``."""
    out = []
    for run in runs:
        hit = next((p for p in run["points"] if acc(run, p) >= target), None)
        out.append({"lr": run["lr"], "final_accuracy": acc(run, run["points"][-1]),
                    "final_wall_s": run["points"][-1]["wall_s"],
                    "reaches_at_step": hit["step"] if hit else None,
                    "reaches_at_s": hit["wall_s"] if hit else None,
                    "ratio": hit["wall_s"] / trl_s if hit and trl_s > 0 else None})
    return out


def goal_summary(runs: list[dict[str, Any]], protocol: dict[str, str]) -> dict[str, Any] | None:
    """TRL's best final accuracy; when each headline agentmath run first reaches it; the goal
    (met on the headline rows only). The extra rows' figures against the same target are
    under ``extra``. ``protocol``: the protocol each trainer's accuracy is read in."""
    trl = [r for r in runs if r["arm"] == "trl"]
    ours = [r for r in runs if r["arm"] == "agentmath"]
    if not trl or not ours:
        return None

    def acc(run: dict[str, Any], point: dict[str, Any]) -> float:
        return point["eval"][protocol[run["trainer"]]]["accuracy"]

    best = max(trl, key=lambda r: (acc(r, r["points"][-1]), -r["points"][-1]["wall_s"]))
    target, trl_s = acc(best, best["points"][-1]), best["points"][-1]["wall_s"]
    per_run = reaching(ours, target, trl_s, acc)
    ratios = [r["ratio"] for r in per_run if r["ratio"] is not None]
    best_ours = max(r["final_accuracy"] for r in per_run)
    fastest = min(ratios) if ratios else None
    extra = reaching([r for r in runs if r["arm"] == "agentmath+ds"], target, trl_s, acc)
    return {"protocol": protocol, "headline": ["agentmath", "trl"],
            "trl_best": {"lr": best["lr"], "final_accuracy": target, "wall_s": trl_s,
                         "final_accuracy_by_lr": {f"{r['lr']:g}": acc(r, r["points"][-1])
                                                  for r in trl}},
            "agentmath": per_run, "agentmath_best_final": best_ours,
            "fastest_ratio": fastest,
            "met": fastest is not None and fastest <= 0.5 and best_ours >= target,
            "met_by_one_run": any(r["ratio"] is not None and r["ratio"] <= 0.5
                                  and r["final_accuracy"] >= target for r in per_run),
            "extra": {"arm": "agentmath+ds", "label": ARMS["agentmath+ds"].label,
                      "runs": extra, "best_final": max((r["final_accuracy"] for r in extra),
                                                       default=None)} if extra else None}


# ----------------------------------------------------------------------------- report
def _acc(ev: dict[str, Any] | None) -> str:
    if not ev:
        return "-"
    lo, hi = ev["ci95"]
    return f"{ev['accuracy']:.1%} [{lo:.0%}, {hi:.0%}]"


def _num(x: Any, fmt: str) -> str:
    return "-" if x is None or x != x else format(x, fmt)


def _per_step(spread: dict[str, float]) -> str:
    low, high = spread["min"], spread["max"]
    return f"{spread['mean']:.1f}" + ("" if low == high else f" ({low}-{high})")


def print_report(result: dict[str, Any]) -> None:
    """The accuracy table (headline rows, then the extra ones), the runs table (with the
    prompts and samples each consumed) and the notes."""
    c = result["config"]
    start = result["start"]["greedy"]
    rows = [["start (SFT model)", "-", "-", "0", "0.0", _acc(start.get("text")),
             _acc(start.get("native"))]]
    for headline in (True, False):
        for run in (r for r in result["runs"] if r["headline"] is headline):
            for p in run["points"]:
                rows.append([f"{run['label']} ({run['mode']})",
                             "headline" if headline else "extra", f"{run['lr']:g}",
                             str(p["step"]), f"{p['wall_s']:.1f}", _acc(p["eval"].get("text")),
                             _acc(p["eval"].get("native"))])
    n = c["eval_problems"]
    print_table(f"agentic GRPO on the demo's task ({result['model']['size']} tool model, "
                f"text share {c['text_share']}, CPU): held-out accuracy against training wall time",
                ["run", "row", "lr", "step", "training wall s",
                 f"acc, chatml_tools loop (n={n}, 95% CI)",
                 f"acc, native chat (n={n}, 95% CI)"], rows)
    print_table("runs: what each consumed (from its own records) and how long it took",
                ["run", "prompts", "prompts/step", "samples", "samples/step", "s/step (mean)",
                 "samples/s", "set-up s", "CPU s", "load before / after",
                 "reward (first -> last step)"],
                [[r["name"], str(r["consumed"]["prompts"]),
                  _per_step(r["consumed"]["prompts_per_step"]), str(r["consumed"]["samples"]),
                  _per_step(r["consumed"]["samples_per_step"]),
                  _num(r["wall_s_per_step"], ".2f"), _num(r["samples_per_s"], ".2f"),
                  _num(r["setup_s"], ".1f"), _num(r["cpu_s"], ".0f"),
                  f"{r['load_before']} / {r['load_after']}", _reward_trend(r)]
                 for r in result["runs"]])
    for note in result["notes"]:
        print(f"* {note}")


def _reward_trend(run: dict[str, Any]) -> str:
    rewards = [x for x in run.get("reward_mean") or [] if x is not None]
    return f"{rewards[0]:.2f} -> {rewards[-1]:.2f}" if rewards else "-"


def notes(result: dict[str, Any]) -> list[str]:
    """The settings and the goal, in sentences."""
    c = result["config"]
    k = c["headroom_k"]
    out = []
    for protocol, h in result["headroom"].items():
        out.append(f"start headroom ({protocol}): greedy pass@1 {h['greedy_pass@1']:.1%}, "
                   f"pass@{k} {h[f'pass@{k}']:.1%} and sampled pass@1 "
                   f"{h['sampled_pass@1']:.1%} at temperature {c['temperature']} "
                   f"({h['problems']} problems; {h['sampled_tool_calls_per_sample']:.2f} tool "
                   "calls a sample).")
    out += [
        f"headline (agentmath, TRL): {c['steps']} steps x {c['prompts']} prompts x "
        f"G={c['group_size']}, lrs {', '.join(f'{lr:g}' for lr in c['lrs'])} (constant), "
        f"temperature {c['temperature']}, completion budget {c['max_completion']} tokens, "
        f"{c['max_tool_calls']} tool calls, accuracy reward, token-level loss, clip 0.2/0.28, "
        "no KL, no filters, no dynamic sampling; the same training prompts in the same order; "
        f"models saved every {c['eval_every']} steps and at the last.",
        f"agentmath: `train_rl`, format chatml_tools (the native protocol, token-exact), hf "
        f"backend in process, rollout mode {c['agentmath_mode']}.",
        (f"extra row ({ARMS['agentmath+ds'].label}): the same, with dynamic sampling on (up to "
         f"{c['max_sampling_rounds']} rounds a step; its extra draws take the next prompts "
         "of the same stream); not in the goal's verdict." if c["dynamic_sampling_row"] else
         "extra row (agentmath + dynamic sampling): not run."),
        (f"TRL {result['versions'].get('trl', '?')}: GRPOTrainer(use_vllm=False) on CPU, its "
         f"multi-turn tool loop via {result['trl_tool_mode']}, native chat protocol; tool calls "
         "run in agentmath's sandbox." if result.get("trl_tool_mode") else "TRL: not run."),
        "prompts and samples consumed: agentmath's from its step metrics (groups scored; "
        "samples generated, trained or not), TRL's from the completions its reward function "
        "received.",
        "training wall s: from the first step's start to the end of that step (set-up and "
        "evaluation not in it; TRL's saves taken out, agentmath's checkpoints left in); "
        "accuracy greedy, one sample per problem, bootstrap 95% CI.",
        f"load average (1 min) before / after each run in the runs table; torch threads "
        f"{result['torch_threads']}; the machine is shared, so timings are noisy.",
    ]
    out += goal_notes(result)
    if result.get("plot"):
        out.append(f"plot: {result['plot']}")
    return out


def goal_notes(result: dict[str, Any]) -> list[str]:
    """TRL's target, each agentmath run against it, the verdict (headline rows) and the
    extra rows beside it."""
    g = result.get("goal")
    if not g:
        return []
    tb, proto = g["trl_best"], g["protocol"]
    out = [f"TRL's best final accuracy ({proto['trl']} protocol): {tb['final_accuracy']:.1%} "
           f"at lr {tb['lr']:g}, {tb['wall_s']:.1f} s of training (by lr: "
           + ", ".join(f"{lr} {a:.1%}" for lr, a in tb["final_accuracy_by_lr"].items()) + ")."]
    start_acc = result["start"]["greedy"].get(proto["trl"], {}).get("accuracy")
    if start_acc is not None and tb["final_accuracy"] <= start_acc:
        out.append("TRL did not improve on the start in that protocol: the time comparison "
                   "says little.")

    def line(who: str, r: dict[str, Any]) -> str:
        reach = (f"reaches it at step {r['reaches_at_step']}, {r['reaches_at_s']:.1f} s "
                 f"({r['ratio']:.2f}x TRL's time)" if r["reaches_at_s"] is not None
                 else "never reaches it")
        return (f"{who} lr {r['lr']:g} ({proto['agentmath']} protocol): {reach}; final "
                f"{r['final_accuracy']:.1%} at {r['final_wall_s']:.1f} s.")

    out += [line("agentmath", r) for r in g["agentmath"]]
    ratio = "-" if g["fastest_ratio"] is None else f"{g['fastest_ratio']:.2f}x"
    out.append(f"goal, on the headline rows (reach TRL's best final accuracy in <= 0.5x its "
               f"wall time, and end at least as accurate): fastest {ratio}, agentmath's best "
               f"final {g['agentmath_best_final']:.1%} vs TRL's {tb['final_accuracy']:.1%} -> "
               f"{'met' if g['met'] else 'not met'}"
               f" (by a single run: {'yes' if g['met_by_one_run'] else 'no'}).")
    if g.get("extra"):
        out += [line("beside it, not in the verdict: agentmath + dynamic sampling", r)
                for r in g["extra"]["runs"]]
    return out


def write_plot(result: dict[str, Any], path: Path) -> Path:
    """Accuracy against training wall time, one panel per protocol, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    protocols = list(result["start"]["greedy"])
    fig, axes = plt.subplots(1, len(protocols), figsize=(6.5 * len(protocols), 4.8),
                             squeeze=False)
    lrs = sorted({r["lr"] for r in result["runs"]})
    colors = {lr: plt.get_cmap("viridis")(i / max(1, len(lrs) - 1) * 0.85)
              for i, lr in enumerate(lrs)}
    styles = {"agentmath": "-o", "trl": "--s", "agentmath+ds": ":^"}
    for ax, protocol in zip(axes[0], protocols, strict=True):
        start = result["start"]["greedy"][protocol]["accuracy"]
        for run in result["runs"]:
            xs = [0.0] + [p["wall_s"] for p in run["points"]]
            ys = [start] + [p["eval"][protocol]["accuracy"] for p in run["points"]]
            ax.plot(xs, ys, styles[run["arm"]], color=colors[run["lr"]],
                    label=f"{run['arm']} lr {run['lr']:g}"
                    + ("" if run["headline"] else " (extra)"), markersize=4)
        g = result.get("goal")
        if g and protocol in g["protocol"].values():  # the target, where it is compared
            ax.axhline(g["trl_best"]["final_accuracy"], color="grey", linestyle=":",
                       label=f"TRL's best final ({g['protocol']['trl']} protocol)")
        ax.set(title=f"held-out accuracy, {protocol} protocol", xlabel="training wall s",
               ylabel="accuracy (greedy)", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
