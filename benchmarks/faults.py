"""The demo's GRPO run with a fault injector killing sandbox sessions, with and without the
exclusion of infrastructure failures (issue 45).

    python benchmarks/faults.py                      # the three rows, seeds 0,1,2
    python benchmarks/faults.py --seeds 0,1          # two seeds
    python benchmarks/faults.py --quick --json       # a smoke run: tiny sizes, 2 steps

The start model, task and GRPO settings are the demo's (benchmarks/_demo_grpo.py: its tool
model grown and cached under ``--out``, its training problems, ``demo_jobs.rl_config`` with the
in-process generator); three rows vary only the sandbox's fault injector and the exclusion:

* ``none``: no faults;
* ``excluded``: ``sandbox.fault_kill_rate = --rate`` (10%: the sandbox kills the process of
  that share of sessions on their first snippet, drawn with ``fault_seed`` = the RL seed) and
  ``filters.exclude_infra_failures = true`` (the default): the killed samples leave their
  groups, counted in the step log's ``infra_excluded``;
* ``included``: the same faults with ``filters.exclude_infra_failures = false``: the killed
  samples are scored and trained on like any other.

Each row runs once per RL seed in ``--seeds`` (data order, sampling, fault draws; the start
model is the same). Every final model is scored greedily on the demo's VALIDATION problems
(never its test problems) with the project's bootstrap CI (``agentmath.eval.metrics``); the
rollout dumps (``dump_rollouts``) say how many samples were killed, how many of them were
trained on and what reward they got. Each run's result is kept under ``--out/results``: a rerun
(or another process with the same ``--out``) skips the runs done (``--fresh`` redoes them).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
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
    start_model,
    train_and_validate,
)

#: row -> (faults injected, exclude_infra_failures)
ROWS: dict[str, tuple[bool, bool]] = {
    "none": (False, True), "excluded": (True, True), "included": (True, False)}


@dataclass
class Run:
    """One GRPO run: its row, kill rate (0 for ``none``), RL seed and steps."""

    row: str
    rate: float
    seed: int
    steps: int

    @property
    def exclude(self) -> bool:
        return ROWS[self.row][1]

    @property
    def name(self) -> str:
        faults = "nofaults" if not self.rate else f"killed{self.rate:g}"
        return f"{faults}-{self.row}-seed{self.seed}-{self.steps}steps"


@dataclass
class RunResult:
    """What a run measured: per step its reward mean and ``infra_excluded``, the groups
    dropped for infrastructure failures; from its rollout dumps the killed samples (all, the
    trained ones, those rewarded 0, their mean reward) and the others' mean reward; its final
    model's greedy validation accuracy, problem count and bootstrap 95% interval."""

    name: str
    row: str
    rate: float
    exclude: bool
    seed: int
    reward: list[float]
    infra_excluded: list[int]
    infra_groups_dropped: int
    killed: int
    killed_trained: int
    killed_zero: int
    killed_reward_mean: float | None
    others_reward_mean: float | None
    validation_accuracy: float | None
    validation_n: int
    validation_ci95: list[float]
    seconds: float


@dataclass
class Killed:
    """The killed samples of a run (``Trajectory.infra_failure`` set), from its dumps."""

    count: int = 0
    trained: int = 0
    zero: int = 0
    reward_sum: float = 0.0
    others: int = 0
    others_reward_sum: float = 0.0


def killed_samples(run_dir: Path) -> Killed:
    """Count the killed samples in every step's rollout dump of ``run_dir``."""
    from agentmath.rl.dump import DUMP_DIR, read_rollout_dump

    out = Killed()
    for path in sorted((run_dir / DUMP_DIR).glob("step-*.jsonl.gz")):
        for record in read_rollout_dump(path):
            if record.trajectory.infra_failure is None:
                out.others += 1
                out.others_reward_sum += record.reward
                continue
            out.count += 1
            out.trained += record.status == "trained"
            out.zero += record.reward == 0
            out.reward_sum += record.reward
    return out


def run_one(run: Run, demo: Any, model: Path, train: Path, validation: Path,
            out: Path) -> RunResult:
    """``run``'s GRPO (the demo's settings, ``run``'s faults, exclusion and seed), read back
    from its step log and rollout dumps, then its final model's greedy validation accuracy."""
    from agentmath.recipes.demo_jobs import rl_config

    cfg = rl_config(demo, str(model), train, masked=True)
    cfg = cfg.model_copy(update={
        "seed": run.seed, "steps": run.steps, "dump_rollouts": True,
        "sandbox": cfg.sandbox.model_copy(update={"fault_kill_rate": run.rate,
                                                  "fault_seed": run.seed}),
        "filters": cfg.filters.model_copy(update={"exclude_infra_failures": run.exclude})})
    done = train_and_validate(cfg, run.name, demo, validation, out, evaluate=True)
    killed = killed_samples(done.run_dir)
    metrics = done.validation
    score = metrics.avg if metrics is not None else None
    return RunResult(
        name=run.name, row=run.row, rate=run.rate, exclude=run.exclude, seed=run.seed,
        reward=[s.reward_mean for s in done.steps],
        infra_excluded=[s.infra_excluded for s in done.steps],
        infra_groups_dropped=sum(len(s.prompts_dropped.get("infra", []))
                                 for s in done.steps),
        killed=killed.count, killed_trained=killed.trained, killed_zero=killed.zero,
        killed_reward_mean=killed.reward_sum / killed.count if killed.count else None,
        others_reward_mean=(killed.others_reward_sum / killed.others if killed.others
                            else None),
        validation_accuracy=None if metrics is None else accuracy(metrics),
        validation_n=0 if metrics is None else int(metrics.n_problems),
        validation_ci95=[] if score is None else [float(x) for x in (score.ci95 or (
            score.value, score.value))],
        seconds=done.seconds)


def plan(args: argparse.Namespace, demo: Any) -> list[Run]:
    """The runs in order: per seed, every row (a partial result has whole seeds)."""
    steps = args.steps or demo.rl_steps
    return [Run(row, args.rate if ROWS[row][0] else 0.0, seed, steps)
            for seed in args.seeds for row in args.rows]


def main() -> None:
    from _faults_report import print_report, report

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="start model (default: grown)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-faults"))
    ap.add_argument("--rows", type=lambda s: s.split(","), default=list(ROWS),
                    help="rows to run (none, excluded, included), comma-separated")
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")],
                    default=[0, 1, 2], help="RL seeds, comma-separated")
    ap.add_argument("--rate", type=float, default=0.1,
                    help="sandbox.fault_kill_rate of the rows with faults")
    ap.add_argument("--steps", type=int, default=0, help="GRPO steps per run (0: the demo's)")
    ap.add_argument("--fresh", action="store_true", help="redo runs whose results are kept")
    ap.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, 2 steps")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown or not 0 < args.rate <= 1:
        ap.error(f"--rows: one of {', '.join(ROWS)}; --rate in (0, 1]")

    one_torch_thread()
    demo = demo_settings(args.quick)
    model, train, validation = start_model(demo, args.out, args.model)
    results: list[RunResult] = []
    for run in plan(args, demo):
        previous = kept(args.out, run.name, args.fresh)
        if previous is not None:
            results.append(RunResult(**previous))
            continue
        result = run_one(run, demo, model, train, validation, args.out)
        keep(args.out, run.name, asdict(result))
        results.append(result)
    summary = report(results, str(model), args.rate)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_report(summary, print_table)


if __name__ == "__main__":
    main()
