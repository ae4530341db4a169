"""The demo across seeds: does GRPO make the tool model better on every one of them?

    python benchmarks/demo_seeds.py                  # seeds 0 1 2, the demo's defaults
    python benchmarks/demo_seeds.py --seeds 0 1 2 3 --json
    python benchmarks/demo_seeds.py --reuse          # seeds already run with these settings: read
    python benchmarks/demo_seeds.py --device cuda --parallel 3   # a GPU machine: seeds at once
    python benchmarks/demo_seeds.py --reuse --readme # README.md's results table, from the runs

Runs the demo recipe (``agentmath demo``: data, code injection, two SFTs, headroom, two GRPO
runs, four evaluations) once per seed, each into ``--out/seed-N``, and prints one row per seed
and model (accuracy with its 95% CI on the held-out test problems, greedy, and the sampled
accuracy at the RL temperature), the headroom measured on the validation problems before GRPO,
the stage transitions, the gain of GRPO over its start with whether the two CIs
overlap, and the spread (mean, standard deviation, min, max) of every model's accuracy and of
the gain over the seeds; when a seed's first start had no headroom and the demo grew its tool
model again (``DemoConfig.start_attempts``), which start GRPO ran from. The goal it checks:
tool + GRPO >= tool + 15 points, CIs apart, on every seed. One seed takes as long as the demo
(minutes); nothing is cached between runs.
``--parallel N`` runs N seeds at once, each as its own ``agentmath demo`` process (for a machine
with cores to spare, such as a GPU machine: the demo itself uses two).
``--readme`` rewrites the results table of README.md (between ``<!-- results:begin -->`` and
``<!-- results:end -->``): a row per seed (the headroom, each model's greedy and sampled
accuracy, the wall time) and a mean ± sd row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import print_table

GOAL_POINTS = 15.0
ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
# the README's columns: the demo's model names, as the README shows them
README_MODELS = {"tool": "tool", "tool + grpo": "tool + GRPO",
                 "tool + grpo (unmasked)": "tool + GRPO unmasked", "text-only": "text-only"}


def reused(seed: int, out: Path, device: str, bf16: bool) -> dict | None:
    """The summary of a finished run of ``seed`` with these settings in ``out/seed-N``."""
    from agentmath.recipes.demo import DemoConfig

    cfg = DemoConfig(seed=seed, device=device, bf16=bf16)
    found = saved_summary(out / f"seed-{seed}", cfg.model_dump())
    if found is not None:
        print(f"[seed {seed}] reusing the finished run in {out / f'seed-{seed}'}",
              file=sys.stderr, flush=True)
    return found


def run_seed(seed: int, out: Path, reuse: bool = False, device: str = "cpu",
             bf16: bool = False) -> dict:
    """The demo's summary for ``seed``: run into ``out/seed-N``, or with ``reuse`` read from
    there when a finished run of the same configuration is found."""
    from agentmath.recipes.demo import DemoConfig, run_demo

    found = reused(seed, out, device, bf16) if reuse else None
    if found is not None:
        return found
    cfg = DemoConfig(seed=seed, device=device, bf16=bf16)
    return run_demo(cfg, out / f"seed-{seed}", None,
                    stage=lambda msg: print(f"[seed {seed}] {msg}", file=sys.stderr,
                                            flush=True)).to_dict()


def run_seeds_at_once(seeds: list[int], out: Path, device: str, bf16: bool,
                      reuse: bool = False) -> dict:
    """Each seed as its own ``agentmath demo`` process, all started together (with ``reuse``,
    a seed with a finished run of these settings is read instead); the summaries read back
    from their folders (``DemoSummary.read``). A seed whose process failed is named with its
    exit status and log, and left out of the table."""
    from agentmath.recipes.summary import DemoSummary

    summaries, procs = {}, {}
    for seed in seeds:
        found = reused(seed, out, device, bf16) if reuse else None
        if found is not None:
            summaries[seed] = found
            continue
        folder = out / f"seed-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "agentmath.cli", "demo", "--seed", str(seed), "--out",
               str(folder), "--no-save-model", "--device", device, "--json"]
        if bf16:
            cmd.append("--bf16")
        with (folder / "demo.log").open("w") as log:  # the child keeps its own copy
            procs[seed] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), folder)
    for seed, (proc, folder) in procs.items():
        if proc.wait() != 0:
            print(f"[seed {seed}] the demo exited with status {proc.returncode}; its log: "
                  f"{folder / 'demo.log'}", file=sys.stderr)
            continue
        summaries[seed] = DemoSummary.read(folder).to_dict()
    if not summaries:
        sys.exit("no seed finished")
    return summaries


def saved_summary(folder: Path, config: dict) -> dict | None:
    """``folder``'s summary (read by ``DemoSummary.read``, its one reader) when its run had
    ``config`` (every current setting equal; a setting the saved run has and this version
    lacks is named and must not matter)."""
    from agentmath.recipes.summary import SUMMARY_FILE, DemoSummary

    if not (folder / SUMMARY_FILE).exists():
        return None
    summary = DemoSummary.read(folder)
    saved = summary.config
    differs = {k: (saved.get(k), v) for k, v in config.items() if saved.get(k) != v}
    if differs:
        print(f"{folder / SUMMARY_FILE}: not reused, settings differ (saved, now): {differs}",
              file=sys.stderr)
        return None
    extra = sorted(set(saved) - set(config))
    if extra:
        print(f"{folder / SUMMARY_FILE}: saved settings this version lacks: "
              f"{ {k: saved[k] for k in extra} }", file=sys.stderr)
    return summary.to_dict()


def gain_row(summary: dict) -> dict:
    """GRPO's gain over its start on one seed, in points, and whether the 95% CIs are apart."""
    rows = {r["model"]: r for r in summary["models"]}
    tool, grpo = rows["tool"], rows["tool + grpo"]
    return {"gain_points": 100 * (grpo["accuracy"] - tool["accuracy"]),
            "cis_apart": grpo["accuracy_ci95"][0] > tool["accuracy_ci95"][1],
            "unmasked_gain_points": 100 * (rows["tool + grpo (unmasked)"]["accuracy"]
                                           - tool["accuracy"])}


def spread(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=Path("runs/bench-demo-seeds"))
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--reuse", action="store_true",
                    help="read a seed's finished run of the same settings instead of rerunning")
    ap.add_argument("--device", default="cpu", help="the demo's --device (cpu, cuda, cuda:N)")
    ap.add_argument("--bf16", action="store_true", help="the demo's --bf16")
    ap.add_argument("--parallel", type=int, default=1,
                    help="seeds run at once, each its own process (default 1: one by one)")
    ap.add_argument("--readme", type=Path, nargs="?", const=ROOT / "README.md", default=None,
                    metavar="FILE", help=(f"rewrite the results table between {BEGIN} and "
                                          f"{END} in FILE (default: the README)"))
    args = ap.parse_args()
    if args.readme is not None:
        results_span(args.readme)  # a README without the markers: say so before any run
    if args.parallel > 1:
        summaries = {}
        for i in range(0, len(args.seeds), args.parallel):
            summaries.update(run_seeds_at_once(args.seeds[i:i + args.parallel], args.out,
                                               args.device, args.bf16, args.reuse))
    else:
        summaries = {seed: run_seed(seed, args.out, args.reuse, args.device, args.bf16)
                     for seed in args.seeds}
    result = summarize(summaries)
    if args.readme is not None:
        write_readme(args.readme, readme_table(result, args.device, args.bf16))
        print(f"{args.readme}: results table rewritten ({len(summaries)} seeds)",
              file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    render(result)


def summarize(summaries: dict[int, dict]) -> dict:
    """The benchmark's result (its ``--json``) from each seed's demo summary."""
    gains = {seed: gain_row(s) for seed, s in summaries.items()}
    names = [r["model"] for r in next(iter(summaries.values()))["models"]]
    acc = {name: [100 * _row(s, name)["accuracy"] for s in summaries.values()]
           for name in names}
    sampled = {f"{name} (sampled)": [100 * v for s in summaries.values()
                                     if (v := _row(s, name).get("sampled_accuracy")) is not None]
               for name in names}
    return {
        "seeds": {str(seed): {"models": s["models"], "sampling": s.get("sampling"),
                              "headroom": s["headroom"], "starts": s.get("starts", []),
                              "seconds": s["seconds"], **gains[seed]}
                  for seed, s in summaries.items()},
        "spread_points": {**{name: spread(v) for name, v in acc.items()},
                          **{name: spread(v) for name, v in sampled.items() if v},
                          "gain": spread([g["gain_points"] for g in gains.values()])},
        "goal": {"points": GOAL_POINTS, "met": all(
            g["gain_points"] >= GOAL_POINTS and g["cis_apart"] for g in gains.values())},
    }


def _row(summary: dict, model: str) -> dict:
    return next(r for r in summary["models"] if r["model"] == model)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _mean_sd(values: list[float]) -> str:
    """``mean ± sd`` of fractions, in percent ("-" for none)."""
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.fmean(values):.1f} ± {100 * sd:.1f}%"


def _minutes(seconds: list[float]) -> str:
    """``mean ± sd`` of wall times, in minutes."""
    sd = statistics.stdev(seconds) if len(seconds) > 1 else 0.0
    return f"{statistics.fmean(seconds) / 60:.1f} ± {sd / 60:.1f} min"


def readme_table(result: dict, device: str = "cpu", bf16: bool = False) -> str:
    """README.md's results table (markdown): a row per seed with the headroom on the
    validation problems, each model's greedy and sampled accuracy on the test problems and
    the demo's wall time, then a mean ± sd row, and the command that wrote it."""
    seeds = result["seeds"]
    first = next(iter(seeds.values()))
    k = first["headroom"]["k"]
    models = [m for m in README_MODELS if any(r["model"] == m for r in first["models"])]
    header = ["seed", f"headroom (validation): greedy / pass@{k}",
              *(f"{README_MODELS[m]}: greedy / sampled" for m in models), "wall time"]
    rows = []
    for seed, s in seeds.items():
        head = s["headroom"]
        rows.append([seed, f"{_pct(head['greedy_pass@1'])} / {_pct(head[f'pass@{k}'])}",
                     *(f"{_pct(_row(s, m)['accuracy'])} / "
                       f"{_pct(_row(s, m).get('sampled_accuracy'))}" for m in models),
                     f"{s['seconds'] / 60:.1f} min"])

    def column(pick: Any) -> list[float]:
        return [v for s in seeds.values() if (v := pick(s)) is not None]

    rows.append(["mean ± sd",
                 f"{_mean_sd(column(lambda s: s['headroom']['greedy_pass@1']))} / "
                 f"{_mean_sd(column(lambda s: s['headroom'][f'pass@{k}']))}",
                 *(f"{_mean_sd(column(lambda s, m=m: _row(s, m)['accuracy']))} / "
                   f"{_mean_sd(column(lambda s, m=m: _row(s, m).get('sampled_accuracy')))}"
                   for m in models),
                 _minutes([s["seconds"] for s in seeds.values()])])
    sampling = first.get("sampling")
    sampled = "not measured by these runs" if sampling is None else (
        f"the mean accuracy of {sampling['samples']} samples at temperature "
        f"{sampling['temperature']} on the first {sampling['problems']} of them")
    command = " ".join(["python benchmarks/demo_seeds.py --seeds", *seeds]
                       + (["--device", device] if device != "cpu" else [])
                       + (["--bf16"] if bf16 else []) + ["--readme"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
             *("| " + " | ".join(row) + " |" for row in rows), "",
             f"Greedy: 1 sample on each held-out test problem; sampled: {sampled}; the "
             f"headroom: the tool model's start on the validation problems, before GRPO. "
             f"Written by `{command}`."]
    return "\n".join(lines)


def results_span(path: Path) -> tuple[str, int, int]:
    """``path``'s text and where its results table lies (after ``BEGIN``, before ``END``);
    exits with a message naming the markers when the file lacks them."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        sys.exit(f"{path}: cannot read the README to rewrite ({exc.strerror})")
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        sys.exit(f"{path}: no results table to rewrite: the file needs a line {BEGIN} before "
                 f"it and a line {END} after it")
    return text, start + len(BEGIN), end


def write_readme(path: Path, table: str) -> None:
    """Replace what lies between the results markers of ``path`` with ``table``."""
    text, start, end = results_span(path)
    path.write_text(text[:start] + "\n" + table + "\n" + text[end:], encoding="utf-8")


def render(result: dict) -> None:
    rows = []
    for seed, s in result["seeds"].items():
        head = s["headroom"]
        k = head["k"]
        for r in s["models"]:
            lo, hi = r["accuracy_ci95"]
            stages = ", ".join(f"{e['old']}->{e['new']} @ step {e['step']}"
                               for e in r.get("stage_transitions", []))
            rows.append([seed, r["model"], f"{r['accuracy']:.1%} ({lo:.1%}-{hi:.1%})",
                         _pct(r.get("sampled_accuracy")),
                         f"{r['mean_model_tokens']:.0f}", f"{r['tool_calls_per_sample']:.2f}",
                         f"{r['failed_tool_calls_per_sample']:.3f}", stages or "-"])
        starts = s["starts"]
        used = next((a["attempt"] for a in starts if a["used"]), 1)
        grown = (f" (start {used} of {len(starts)}: first pass@{k} "
                 f"{starts[0]['headroom'][f'pass@{k}']:.0%})" if len(starts) > 1 else "")
        rows.append([seed, "GRPO gain", f"{s['gain_points']:+.1f} points "
                     f"(CIs {'apart' if s['cis_apart'] else 'OVERLAP'})", "",
                     f"headroom ({head.get('split', 'test')}): greedy "
                     f"{head['greedy_pass@1']:.1%}, pass@{k} {head[f'pass@{k}']:.1%}{grown}",
                     "", "", f"{s['seconds']:.0f} s"])
    print_table("the demo per seed (held-out test problems)",
                ["seed", "model", "greedy accuracy (95% CI)", "sampled accuracy", "tokens",
                 "tool calls", "failed calls", "stage transitions"], rows)
    print_table("spread over seeds (accuracy points)", ["model", "mean", "std", "min", "max"],
                [[name, f"{v['mean']:.1f}", f"{v['std']:.1f}", f"{v['min']:.1f}",
                  f"{v['max']:.1f}"] for name, v in result["spread_points"].items()])
    goal = result["goal"]
    print(f"goal: tool + GRPO >= tool + {goal['points']:.0f} points with CIs apart on every "
          f"seed: {'met' if goal['met'] else 'NOT met'}")


if __name__ == "__main__":
    main()
