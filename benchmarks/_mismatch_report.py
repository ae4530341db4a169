"""benchmarks/mismatch.py's report: the mismatch per sampler (per step and the mean), the
ablation per run, and per correction over seeds (mean and spread)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

Table = Callable[[str, Sequence[str], Sequence[Sequence[str]]], None]


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def report(results: Sequence[Any], start_accuracy: float | None, model: str) -> dict[str, Any]:
    """One JSON-able object: ``mismatch`` (a row per run), ``ablation`` (a row per run that
    was evaluated) and ``by_correction`` (mean and spread over seeds)."""
    mismatch = [{
        "run": r.name, "sampler": r.sampler, "correction": r.correction, "seed": r.seed,
        "steps": len(r.mismatch_kl), "mismatch_kl": r.mismatch_kl,
        "mismatch_kl_mean": _mean(r.mismatch_kl), "mismatch_max": r.mismatch_max,
        "mismatch_max_max": max(r.mismatch_max, default=0.0),
        "mismatch_masked": r.mismatch_masked, "mismatch_masked_mean": _mean(r.mismatch_masked),
        "vllm_dtype": r.extra.get("vllm_dtype")} for r in results]
    ablation = [{
        "run": r.name, "correction": r.correction, "seed": r.seed, "reward": r.reward,
        "reward_mean": _mean(r.reward), "reward_last_half": _mean(r.reward[len(r.reward) // 2:]),
        "groups_trained": sum(r.groups_trained), "validation_accuracy": r.validation_accuracy,
        "seconds": r.seconds} for r in results if r.validation_accuracy is not None]
    by_correction = []
    for correction in dict.fromkeys(a["correction"] for a in ablation):
        rows = [a for a in ablation if a["correction"] == correction]
        accs = [a["validation_accuracy"] for a in rows]
        by_correction.append({
            "correction": correction, "seeds": [a["seed"] for a in rows],
            "validation_accuracy_mean": _mean(accs),
            "validation_accuracy_spread": max(accs) - min(accs),
            "reward_mean": _mean([a["reward_mean"] for a in rows])})
    return {"model": model, "start_validation_accuracy": start_accuracy, "mismatch": mismatch,
            "ablation": ablation, "by_correction": by_correction}


def _steps(values: Sequence[float], fmt: str) -> str:
    return " ".join(format(v, fmt) for v in values)


def print_report(summary: dict[str, Any], table: Table) -> None:
    """The three tables of :func:`report`."""
    table("sampler-trainer mismatch per step (trainer: HF, fp32)",
          ["run", "sampler dtype", "mismatch_kl per step", "mean kl", "max |dlogp|",
           "masked (mean)"],
          [[m["run"], m["vllm_dtype"] or "float32 (in process)",
            _steps(m["mismatch_kl"], ".2e"), f"{m['mismatch_kl_mean']:.2e}",
            f"{m['mismatch_max_max']:.3f}", f"{m['mismatch_masked_mean']:.4f}"]
           for m in summary["mismatch"]])
    if summary["ablation"]:
        table(f"ablation (vLLM sampler); start model's validation accuracy "
              f"{summary['start_validation_accuracy']:.3f}",
              ["run", "reward per step", "reward mean", "last half", "groups trained",
               "validation acc"],
              [[a["run"], _steps(a["reward"], ".2f"), f"{a['reward_mean']:.3f}",
                f"{a['reward_last_half']:.3f}", str(a["groups_trained"]),
                f"{a['validation_accuracy']:.3f}"] for a in summary["ablation"]])
        table("per correction (over seeds)",
              ["correction", "seeds", "validation acc mean", "spread", "reward mean"],
              [[c["correction"], ",".join(map(str, c["seeds"])),
                f"{c['validation_accuracy_mean']:.3f}",
                f"{c['validation_accuracy_spread']:.3f}", f"{c['reward_mean']:.3f}"]
               for c in summary["by_correction"]])
