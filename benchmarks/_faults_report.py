"""benchmarks/faults.py's report: a row per run, a row per fault setting over seeds (accuracy
per seed, mean, spread, the pooled bootstrap 95% CI, reward, exclusions, killed samples) and
the checks and verdicts the issue asks for."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

Table = Callable[[str, Sequence[str], Sequence[Sequence[str]]], None]
LABELS = {"none": "no faults", "excluded": "killed, excluded (default)",
          "included": "killed, not excluded"}


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def pooled_ci(runs: Sequence[Any]) -> list[float]:
    """The 95% bootstrap interval of the accuracy over every (seed, problem) of ``runs``: the
    project's bootstrap (``agentmath.eval.metrics.score_summary``) over the per-problem 0/1
    scores, which a greedy accuracy and its problem count give back exactly."""
    from agentmath.eval.metrics import score_summary

    scores: list[float] = []
    for r in runs:
        right = round(r.validation_accuracy * r.validation_n)
        scores += [1.0] * right + [0.0] * (r.validation_n - right)
    return [float(x) for x in score_summary(scores, bootstrap=2000, seed=0)["ci95"]]


def _row(row: str, runs: Sequence[Any]) -> dict[str, Any]:
    accs = [r.validation_accuracy for r in runs]
    killed = sum(r.killed for r in runs)
    killed_reward = sum((r.killed_reward_mean or 0.0) * r.killed for r in runs)
    return {
        "row": row, "label": LABELS.get(row, row), "seeds": [r.seed for r in runs],
        "validation_accuracy": accs, "validation_accuracy_mean": _mean(accs),
        "validation_accuracy_spread": max(accs) - min(accs) if accs else 0.0,
        "validation_ci95_per_run": [r.validation_ci95 for r in runs],
        "validation_ci95_pooled": pooled_ci(runs) if runs else [0.0, 0.0],
        "reward_mean": _mean([_mean(r.reward) for r in runs]),
        "infra_excluded": sum(sum(r.infra_excluded) for r in runs),
        "infra_groups_dropped": sum(r.infra_groups_dropped for r in runs),
        "killed": killed, "killed_trained": sum(r.killed_trained for r in runs),
        "killed_zero": sum(r.killed_zero for r in runs),
        "killed_reward_mean": killed_reward / killed if killed else None}


def _checks(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the issue asks of the rows present: the exclusions counted where there are
    faults to exclude and nowhere else; the killed samples trained on (and their rewards)
    without the exclusion; the faulted runs' accuracy against the fault-free one's CI."""
    out: dict[str, Any] = {}
    none, excl, incl = rows.get("none"), rows.get("excluded"), rows.get("included")
    if none is not None:
        out["none_has_no_exclusions"] = none["infra_excluded"] == 0 and none["killed"] == 0
    if excl is not None:
        out["excluded_counts_exclusions"] = excl["infra_excluded"] > 0
        out["excluded_trains_no_killed_sample"] = excl["killed_trained"] == 0
    if incl is not None:
        out["included_has_no_exclusions"] = incl["infra_excluded"] == 0
        out["included_trains_killed_samples"] = incl["killed_trained"] > 0
        out["included_killed_reward_zero_share"] = (
            incl["killed_zero"] / incl["killed"] if incl["killed"] else None)
    if none is not None and excl is not None:
        a, b = none, excl
        out["excluded_within_ci_of_none"] = (
            _inside(b["validation_accuracy_mean"], a["validation_ci95_pooled"])
            and _inside(a["validation_accuracy_mean"], b["validation_ci95_pooled"]))
    if none is not None and incl is not None:
        # measurably worse: the whole pooled interval below the fault-free mean
        out["included_measurably_worse"] = (
            incl["validation_ci95_pooled"][1] < none["validation_accuracy_mean"])
    return out


def _inside(value: float, ci: Sequence[float]) -> bool:
    return ci[0] <= value <= ci[1]


def report(results: Sequence[Any], model: str, rate: float) -> dict[str, Any]:
    """One JSON-able object: ``runs`` (one per run), ``rows`` (per fault setting over seeds)
    and ``checks``."""
    runs = [{
        "run": r.name, "row": r.row, "seed": r.seed, "rate": r.rate, "exclude": r.exclude,
        "reward": r.reward, "reward_mean": _mean(r.reward),
        "infra_excluded": sum(r.infra_excluded), "infra_groups_dropped": r.infra_groups_dropped,
        "killed": r.killed, "killed_trained": r.killed_trained, "killed_zero": r.killed_zero,
        "killed_reward_mean": r.killed_reward_mean, "others_reward_mean": r.others_reward_mean,
        "validation_accuracy": r.validation_accuracy, "validation_n": r.validation_n,
        "validation_ci95": r.validation_ci95, "seconds": r.seconds} for r in results]
    evaluated = [r for r in results if r.validation_accuracy is not None]
    rows = {row: _row(row, [r for r in evaluated if r.row == row])
            for row in dict.fromkeys(r.row for r in evaluated)}
    return {"model": model, "rate": rate, "runs": runs, "rows": list(rows.values()),
            "checks": _checks(rows)}


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _ci(ci: Sequence[float]) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "-"


def print_report(summary: dict[str, Any], table: Table) -> None:
    """The tables of :func:`report` and its checks."""
    table(f"runs (fault_kill_rate {summary['rate']:g} where killed)",
          ["run", "reward per step", "reward mean", "infra_excluded", "infra groups dropped",
           "killed (trained, reward 0)", "killed reward", "others reward", "validation acc",
           "95% CI"],
          [[r["run"], " ".join(f"{x:.2f}" for x in r["reward"]), f"{r['reward_mean']:.3f}",
            str(r["infra_excluded"]), str(r["infra_groups_dropped"]),
            f"{r['killed']} ({r['killed_trained']}, {r['killed_zero']})",
            _num(r["killed_reward_mean"], ".3f"), _num(r["others_reward_mean"], ".3f"),
            _num(r["validation_accuracy"], ".3f"), _ci(r["validation_ci95"])]
           for r in summary["runs"]])
    table("per row (over seeds; CI: bootstrap over every seed's problems)",
          ["row", "seeds", "validation acc per seed", "mean", "spread", "95% CI (pooled)",
           "reward mean", "infra_excluded", "killed (trained, reward 0)"],
          [[r["label"], ",".join(map(str, r["seeds"])),
            " ".join(f"{a:.2f}" for a in r["validation_accuracy"]),
            f"{r['validation_accuracy_mean']:.3f}", f"{r['validation_accuracy_spread']:.3f}",
            _ci(r["validation_ci95_pooled"]), f"{r['reward_mean']:.3f}",
            str(r["infra_excluded"]),
            f"{r['killed']} ({r['killed_trained']}, {r['killed_zero']})"]
           for r in summary["rows"]])
    table("checks", ["check", "value"],
          [[k, str(v)] for k, v in summary["checks"].items()])
