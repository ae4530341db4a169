"""Near-duplicate removal benchmark: ``agentmath dedup``'s detectors on 100,000 problems with
planted near-duplicates, beside a plain exact-13-gram baseline.

Run: ``nice -n 5 .venv/bin/python benchmarks/dedup.py`` (``--quick`` for 1,000 problems,
``--json`` for one JSON object, ``--n`` for another size).

The corpus (``benchmarks/_dedup_data.py``): the real benchmark problems found locally (math500,
aime24/25, hmmt25, gsm8k, amc23), generated word problems up to ``n``, and 5% planted copies
(verbatim, LaTeX reformatted, numbers changed, reworded; a quarter each), each after its source.
Every configuration runs ``agentmath.synth.decontam.deduplicate`` (keep the first of each
cluster) in its own subprocess, so its time and peak memory (``ru_maxrss``: torch included) are
its own (and its CPU time, all threads: the part that other work on a shared machine does
not inflate). A removal is correct when the removed row and the row it matched come from the same
source; precision = correct / removed, recall = correct / planted (per kind too). The two
baselines are what a plain script without normalisation does: the 13-word shingles of the kept
texts (split on whitespace) in a dict, a text removed when any of its 13-grams was seen before
(GPT-3's rule), or when half of them were (the ``ngram`` detector's rule).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

CONFIGS = {"exact 13-gram, any shared": "baseline", "exact 13-gram, >= 50% shared":
           "baseline-overlap", "ngram": "ngram", "minhash": "minhash", "semantic": "semantic",
           "all three": "ngram,minhash,semantic"}
GOAL_SECONDS, GOAL_MIB = 300.0, 2048.0


def _baseline(texts: list[str], overlap: bool) -> list[tuple[int, int, str, float]]:
    """Exact 13-grams of whitespace-split text, no normalisation. A text is removed when any
    of its 13-grams belongs to an earlier kept text (GPT-3's rule), or with ``overlap`` when
    at least half of the 13-grams of the shorter of the two texts are shared (the rule of
    the ``ngram`` detector, without its normalisation)."""
    first: dict[int, int] = {}
    sizes: list[int] = []
    removed = []
    for i, text in enumerate(texts):
        words = text.split()
        grams = {hash(tuple(words[j:j + 13])) for j in range(max(1, len(words) - 12))}
        sizes.append(len(grams))
        hits = Counter(first[g] for g in grams if g in first)
        if overlap:
            hits = Counter({d: c for d, c in hits.items()
                            if c >= 0.5 * min(len(grams), sizes[d])})
        if hits:
            removed.append((i, hits.most_common(1)[0][0], "baseline", 1.0))
            continue
        for g in grams:
            first.setdefault(g, i)
    return removed


def worker(config: str, data: Path, result: Path, backend: str = "auto") -> None:
    """Run one configuration on the corpus in ``data`` (the embedding model on ``backend``);
    write its removals and costs."""
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    texts = [r["problem"] for r in rows]
    start = time.perf_counter()
    if config.startswith("baseline"):
        removed = _baseline(texts, overlap=config == "baseline-overlap")
    else:
        from agentmath.synth.decontam import DetectorSettings, deduplicate, make_detectors
        from agentmath.synth.rows import Item

        items = [Item(r["id"], r["problem"]) for r in rows]
        position = {r["id"]: i for i, r in enumerate(rows)}
        settings = DetectorSettings(semantic_backend=backend)
        report = deduplicate(items, make_detectors(config, settings))
        removed = [(r.index, position[r.matched], r.detector, r.score) for r in report.removed]
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # CPU seconds of all its threads, loading included: what the machine's other work
    # cannot inflate (wall time on a shared 2-core VM can)
    cpu = usage.ru_utime + usage.ru_stime
    result.write_text(json.dumps({"seconds": seconds, "peak_mib": usage.ru_maxrss / 1024,
                                  "cpu_seconds": cpu, "removed": removed}), encoding="utf-8")


def _real_problems() -> list[tuple[str, str]]:
    """Every built-in benchmark problem found locally, as (dataset/id, text)."""
    from agentmath.tasks import BUILTIN, find_builtin, load_tasks

    out = []
    for name in BUILTIN:
        if find_builtin(name) is not None:
            out += [(f"{name}/{t.id}", t.problem) for t in load_tasks(name, allow_hub=False)]
    return out


def score(corpus: Any, removed: list[list[Any]]) -> dict[str, Any]:
    """Precision and recall against the planted ground truth, overall and per kind."""
    from _dedup_data import KINDS

    planted = {k: sum(1 for kind in corpus.kind if kind == k) for k in KINDS}
    correct = {k: 0 for k in KINDS}
    wrong = real_pairs = 0
    by_detector: Counter[str] = Counter()
    examples = []
    for index, matched, detector, value in removed:
        kind = corpus.kind[index]
        if kind and corpus.cluster[index] == corpus.cluster[matched]:
            correct[kind] += 1
            continue
        wrong += 1
        by_detector[detector] += 1
        real_pairs += not corpus.ids[index].startswith(("gen-", "planted-")) and not \
            corpus.ids[matched].startswith(("gen-", "planted-"))
        if len(examples) < 3:
            examples.append({"detector": detector, "score": value,
                             "removed": f"{corpus.ids[index]}: {corpus.texts[index][:160]}",
                             "matched": f"{corpus.ids[matched]}: {corpus.texts[matched][:160]}"})
    hits = sum(correct.values())
    return {"removed": len(removed), "correct": hits, "false_positives": wrong,
            "false_positives_by_detector": dict(by_detector),
            "false_positives_between_builtin_problems": real_pairs,
            "precision": hits / len(removed) if removed else 1.0,
            "recall": hits / max(1, sum(planted.values())),
            "recall_by_kind": {k: correct[k] / max(1, planted[k]) for k in KINDS},
            "false_positive_examples": examples}


def run(ns: argparse.Namespace) -> dict[str, Any]:
    from _dedup_data import build_corpus

    corpus = build_corpus(ns.n, _real_problems(), seed=ns.seed)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dedup-bench-") as tmp:
        data = Path(tmp, "corpus.jsonl")
        data.write_text("".join(json.dumps({"id": i, "problem": t}) + "\n"
                                for i, t in zip(corpus.ids, corpus.texts, strict=True)),
                        encoding="utf-8")
        for label, config in CONFIGS.items():
            if ns.only and config not in ns.only.split(";"):
                continue
            result = Path(tmp, f"{config}.json")
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", config,
                   "--data", str(data), "--result", str(result), "--backend", ns.backend]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"{label} failed:\n{proc.stderr[-3000:]}")
            out = json.loads(result.read_text(encoding="utf-8"))
            rows.append({"config": label, "detectors": config,
                         "seconds": round(out["seconds"], 2),
                         "cpu_seconds": round(out["cpu_seconds"], 1),
                         "peak_mib": round(out["peak_mib"], 1),
                         **score(corpus, out["removed"])})
    kinds = {k: corpus.kind.count(k) for k in ("verbatim", "latex", "numbers", "reworded")}
    hand = [] if ns.no_hand else _hand(ns)
    goal = _goal(rows, hand)
    return {"n": len(corpus.texts), "real": sum(1 for i in corpus.ids
                                                  if not i.startswith(("gen-", "planted-"))),
            "planted": kinds, "cpus": os.cpu_count(), "backend": ns.backend, "rows": rows,
            "hand": hand, "goal": goal,
            "date": time.strftime("%Y-%m-%d")}


def _hand(ns: argparse.Namespace) -> list[dict[str, Any]]:
    """The hand-written rewordings' table (benchmarks/_dedup_hand.py), for the detector
    configurations run on the corpus (not the baselines), the rows with their answers; and
    all three detectors once more on the texts alone."""
    from _dedup_hand import hand_scores

    chosen = {label: config for label, config in CONFIGS.items()
              if not config.startswith("baseline")
              and (not ns.only or config in ns.only.split(";"))}
    rows = hand_scores(chosen, ns.backend)
    if "ngram,minhash,semantic" in chosen.values():  # the same rows without their answers
        texts_only = hand_scores({"all three, texts only (--ignore-answers)":
                                  "ngram,minhash,semantic"}, ns.backend, answers=False)
        rows += texts_only
    return rows


def _goal(rows: list[dict[str, Any]], hand: list[dict[str, Any]]) -> dict[str, Any]:
    """The goal: all three detectors in <= 5 min and <= 2 GiB; >= 95% recall on the planted
    rewordings at >= 99% precision; >= 95% of the hand paraphrases removed (when they ran)."""
    row = next((r for r in rows if r["detectors"] == CONFIGS["all three"]), None)
    if row is None:
        return {"met": None}
    checks = {"seconds": row["seconds"] <= GOAL_SECONDS, "memory": row["peak_mib"] <= GOAL_MIB,
              "recall_reworded": row["recall_by_kind"]["reworded"] >= 0.95,
              "precision": row["precision"] >= 0.99}
    mine = next((h for h in hand if h["config"] == "all three"), None)
    if mine is not None:
        checks["recall_hand_paraphrases"] = mine["paraphrase_recall"] >= 0.95
    return {"met": all(checks.values()), **checks}


def _print(result: dict[str, Any]) -> None:
    from _common import print_table

    table = []
    for r in result["rows"]:
        by_kind = r["recall_by_kind"]
        table.append((r["config"], f"{r['seconds']:.1f} s", f"{r['cpu_seconds']:.0f} s",
                      f"{r['peak_mib']:.0f} MiB",
                      f"{r['precision']:.2%}", f"{r['recall']:.2%}",
                      *(f"{by_kind[k]:.1%}" for k in ("verbatim", "latex", "numbers",
                                                       "reworded")),
                      str(r["false_positives"])))
    print_table(f"dedup of {result['n']:,} problems ({result['real']:,} real; planted: "
                + ", ".join(f"{v} {k}" for k, v in result["planted"].items())
                + f"; {result['cpus']} CPUs)",
                ("configuration", "time", "CPU time", "peak RSS", "precision", "recall",
                 "verbatim", "latex", "numbers", "reworded", "false pos."), table)
    for r in result["rows"]:
        for ex in r["false_positive_examples"][:2]:
            print(f"false positive ({r['config']}, {ex['detector']} {ex['score']:.3f}):\n"
                  f"  removed {ex['removed']!r}\n  matched {ex['matched']!r}")
    from _dedup_hand import print_hand

    print_hand(result["hand"])
    goal = result["goal"]
    if goal.get("met") is not None:
        print("goal (all three: <= 5 min, <= 2 GiB, reworded recall >= 95%, precision >= 99%, "
              "hand paraphrases removed >= 95%): "
              + ("met" if goal["met"] else "NOT met: " + ", ".join(
                  k for k, v in goal.items() if k != "met" and not v)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000, help="problems in the corpus")
    p.add_argument("--quick", action="store_true", help="1,000 problems")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="", help="';'-separated detector strings to run")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-hand", action="store_true",
                   help="skip the hand-written rewordings (benchmarks/_dedup_hand.py)")
    p.add_argument("--backend", default="auto", choices=("auto", "onnx", "torch"),
                   help="the embedding model's runtime (auto: int8 ONNX Runtime on a CPU)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    if ns.worker:
        worker(ns.worker, ns.data, ns.result, ns.backend)
        return 0
    if ns.quick:
        ns.n = 1_000
    result = run(ns)
    if ns.json:
        print(json.dumps(result))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
