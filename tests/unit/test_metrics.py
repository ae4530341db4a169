"""Tests of agentmath.eval.metrics against hand-computed values (arithmetic in the comments).

Answer equivalence is a stub (exact fractions via :class:`fractions.Fraction`, else string
equality) so the tests are fast and deterministic; one test uses the real math-verify check.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest

from agentmath.errors import DataError
from agentmath.eval.metrics import (
    compute_metrics,
    default_equivalent,
    majority_answer,
    metrics_table_rows,
    pass_at_k,
    score_summary,
)


def stub_equivalent(a: str, b: str) -> bool:
    """"1/2" == "0.5" == "0.50"; anything that is not a number compares as a string."""
    try:
        return Fraction(a) == Fraction(b)
    except ValueError:
        return a == b


class CountingEquivalent:
    """A stub equivalence that records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, a: str, b: str) -> bool:
        self.calls.append((a, b))
        return stub_equivalent(a, b)


def rec(pid: str, index: int, extracted: str | None, correct: bool | None, **extra: Any) -> dict:
    """A sample record with neutral defaults for every field the metrics read."""
    record: dict[str, Any] = {
        "problem_id": pid, "sample_index": index, "gold": "0", "extracted": extracted,
        "correct": correct, "model_tokens": 0, "tool_tokens": 0, "prompt_tokens": 0,
        "total_tokens": 0, "tool_calls": 0, "tool_errors": 0, "tool_timeouts": 0,
        "output_truncations": 0, "finish_reason": "answered", "duration_ms": 0.0,
        "problem_meta": {}, "trajectory": {},
    }
    record.update(extra)
    return record


# ---------------------------------------------------------------------------------------------
# pass@k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 0, 1, 0.0),  # no correct sample: never passes
        (5, 0, 5, 0.0),
        (5, 5, 1, 1.0),  # all correct: always passes
        (5, 5, 3, 1.0),
        (5, 1, 5, 1.0),  # k = n and c > 0: the only 5-subset holds the correct one
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 1, 3, 0.75),  # 1 - C(3,3)/C(4,3) = 1 - 1/4
        (10, 3, 5, 11 / 12),  # 1 - C(7,5)/C(10,5) = 1 - 21/252 = 1 - 1/12
        (4, 2, 3, 1.0),  # n - c = 2 < k = 3: every 3-subset holds a correct one
    ],
)
def test_pass_at_k_known_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "c"), [(1, 0), (1, 1), (7, 3), (16, 5), (64, 1), (1000, 1)])
def test_pass_at_1_is_fraction_correct(n: int, c: int) -> None:
    # pass@1 = 1 - (n-c)/n = c/n
    assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-12)


def test_pass_at_k_matches_binomial_form_everywhere() -> None:
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_is_stable_for_large_n() -> None:
    # C(1024, 512) overflows a float; the product form does not. 1 - C(1023,1)/C(1024,1)
    assert pass_at_k(1024, 1, 1) == pytest.approx(1 / 1024)
    assert 0.0 < pass_at_k(1024, 1, 512) == pytest.approx(0.5)  # 1 - 512/1024


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_bad_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# ---------------------------------------------------------------------------------------------
# majority vote


def test_equivalent_answers_vote_together_and_beat_a_string_plurality() -> None:
    # "3" is the most common single string (2), but "1/2" = "0.5" = "0.50" is one answer (3).
    answers = ["3", "1/2", "3", "0.5", "0.50"]
    assert majority_answer(answers, stub_equivalent) == "1/2"  # the cluster's first answer


def test_majority_ties_go_to_the_earliest_sample() -> None:
    assert majority_answer(["2", "5", "5", "2"], stub_equivalent) == "2"  # 2 vs 2: "2" first
    assert majority_answer(["5", "2", "2", "5"], stub_equivalent) == "5"
    assert majority_answer(["0.5", "7", "1/2", "7"], stub_equivalent) == "0.5"  # clusters tie


def test_none_answers_never_win() -> None:
    assert majority_answer([None, None, None, "4"], stub_equivalent) == "4"
    assert majority_answer([None, None], stub_equivalent) is None
    assert majority_answer([], stub_equivalent) is None


def test_majority_does_not_recheck_repeated_strings() -> None:
    eq = CountingEquivalent()
    # "a" founds a cluster (no call), "b" vs rep "a" (1 call), then repeats hit the cache.
    assert majority_answer(["a", "b", "a", "b", "a", "b", "b"], eq) == "b"  # b: 4, a: 3
    assert eq.calls == [("a", "b")]


def test_majority_uses_the_representative_as_gold() -> None:
    eq = CountingEquivalent()
    majority_answer(["1/2", "0.5", "9"], eq)
    # "0.5" vs rep "1/2" (joins), "9" vs rep "1/2" (new cluster): the rep is always first.
    assert eq.calls == [("1/2", "0.5"), ("1/2", "9")]


# ---------------------------------------------------------------------------------------------
# compute_metrics on a hand-built run: 3 problems x 4 samples


def hand_run() -> list[dict]:
    """P1 (level 1, Algebra), P2 (level 1, Geometry), P3 (level 2, Algebra, gold unparsable)."""
    p1 = {"gold": "1/2", "problem_meta": {"level": 1, "subject": "Algebra"}}
    p2 = {"gold": "7", "problem_meta": {"level": 1, "subject": "Geometry"}}
    p3 = {"gold": "x", "problem_meta": {"level": 2, "subject": "Algebra"}}
    t1 = {"model_tokens": 100, "total_tokens": 150, "tool_tokens": 10, "duration_ms": 1000.0}
    t2 = {"model_tokens": 200, "total_tokens": 250, "duration_ms": 2000.0}
    t3 = {"model_tokens": 300, "total_tokens": 350, "duration_ms": 3000.0}
    return [
        rec("P1", 0, "0.5", True, **p1, **t1, tool_calls=2, tool_errors=1),
        rec("P1", 1, "1/2", True, **p1, **t1, tool_calls=2, output_truncations=1),
        rec("P1", 2, "3", False, **p1, **t1, tool_calls=2, output_truncations=1),
        rec("P1", 3, None, False, **p1, **t1, tool_calls=2, finish_reason="token_budget"),
        rec("P2", 0, "7", True, **p2, **t2, tool_calls=1, tool_timeouts=1),
        rec("P2", 1, "8", False, **p2, **t2, tool_calls=1, tool_errors=2),
        rec("P2", 2, "8", False, **p2, **t2, tool_calls=1),
        rec("P2", 3, "9", False, **p2, **t2, tool_calls=1),
        rec("P3", 0, "x", None, **p3, **t3),
        rec("P3", 1, "x", None, **p3, **t3),
        rec("P3", 2, "y", None, **p3, **t3, finish_reason="eos"),
        rec("P3", 3, None, None, **p3, **{**t3, "model_tokens": 1500, "total_tokens": 1550},
            finish_reason="error"),
    ]


@pytest.fixture(scope="module")
def hand_metrics() -> dict:
    return compute_metrics(hand_run(), equivalent=stub_equivalent, bootstrap=500, seed=0)


def test_counts_and_k(hand_metrics: dict) -> None:
    assert (hand_metrics["n_problems"], hand_metrics["n_samples"], hand_metrics["k"]) == (3, 12, 4)


def test_avg_counts_null_correct_as_wrong(hand_metrics: dict) -> None:
    # per problem: P1 2/4 = 0.5, P2 1/4 = 0.25, P3 0/4 (all null) = 0 -> mean 0.75/3 = 0.25
    avg = hand_metrics["avg"]
    assert avg["value"] == pytest.approx(0.25)
    # deviations 0.25, 0, -0.25; var (ddof=1) = 0.125/2 = 0.0625; sd 0.25; / sqrt(3)
    assert avg["stderr"] == pytest.approx(0.25 / math.sqrt(3))


def test_maj_by_equivalence(hand_metrics: dict) -> None:
    # P1: {"0.5","1/2"} 2 votes beat "3" -> "0.5", graded True on sample 0 -> 1
    # P2: "8" (2 votes) -> graded False -> 0
    # P3: "x" (2 votes); every grade is null, so equivalent("x", "x") decides -> 1
    maj = hand_metrics["maj"]
    assert maj["value"] == pytest.approx(2 / 3)
    # scores 1, 0, 1: deviations 1/3, -2/3, 1/3; var = (6/9)/2 = 1/3; sd/sqrt(3) = 1/3
    assert maj["stderr"] == pytest.approx(1 / 3)


def test_pass_at_every_j(hand_metrics: dict) -> None:
    # P1 (n=4, c=2): 1/2, 1 - C(2,2)/C(4,2) = 5/6, 1, 1
    # P2 (n=4, c=1): 1/4, 1 - C(3,2)/C(4,2) = 1/2, 1 - C(3,3)/C(4,3) = 3/4, 1
    # P3 (c=0): 0, 0, 0, 0
    expected = {"1": 0.75 / 3, "2": (5 / 6 + 1 / 2) / 3, "3": 1.75 / 3, "4": 2 / 3}
    assert hand_metrics["pass"].keys() == expected.keys()
    for j, value in expected.items():
        assert hand_metrics["pass"][j] == pytest.approx(value), j


def test_tokens_mean_and_median(hand_metrics: dict) -> None:
    # model: 4x100, 4x200, 3x300, 1500 -> sum 3600 / 12 = 300; sorted 6th/7th = 200, 200
    # total: model + 50 each -> mean 350, median 250; tool: 4x10 / 12
    assert hand_metrics["tokens"] == pytest.approx(
        {"model_mean": 300.0, "model_median": 200.0, "total_mean": 350.0,
         "total_median": 250.0, "tool_mean": 40 / 12}
    )


def test_tool_rates_per_call(hand_metrics: dict) -> None:
    # calls 4x2 + 4x1 + 0 = 12 over 12 samples; errors 1+2 = 3; timeouts 1; truncations 2
    assert hand_metrics["tools"] == pytest.approx(
        {"calls_per_sample": 1.0, "error_rate": 3 / 12, "timeout_rate": 1 / 12,
         "truncation_rate": 2 / 12}
    )


def test_finish_reasons_and_duration(hand_metrics: dict) -> None:
    # answered: P1 3 + P2 4 + P3 2 = 9; token_budget, eos, error: 1 each
    assert hand_metrics["finish_reasons"] == {"answered": 9, "eos": 1, "error": 1,
                                              "token_budget": 1}
    assert list(hand_metrics["finish_reasons"])[0] == "answered"  # most common first
    assert hand_metrics["duration_ms_mean"] == pytest.approx(2000.0)  # (4k + 8k + 12k) / 12


def test_by_level(hand_metrics: dict) -> None:
    levels = hand_metrics["by_level"]
    assert list(levels) == ["1", "2"]
    one, two = levels["1"], levels["2"]
    # level 1 = P1, P2: avg (0.5 + 0.25)/2; maj (1 + 0)/2; pass@2 (5/6 + 1/2)/2 = 2/3
    assert (one["n_problems"], one["n_samples"], one["k"]) == (2, 8, 4)
    assert one["avg"]["value"] == pytest.approx(0.375)
    assert one["maj"]["value"] == pytest.approx(0.5)
    assert one["pass"] == pytest.approx({"1": 0.375, "2": 2 / 3, "3": 0.875, "4": 1.0})
    assert one["tokens"]["model_mean"] == pytest.approx(150.0)  # (400 + 800) / 8
    # level 2 = P3 alone: avg 0, maj 1, one problem -> stderr 0 and a collapsed CI
    assert two["n_problems"] == 1
    assert two["avg"] == {"value": 0.0, "stderr": 0.0, "ci95": [0.0, 0.0]}
    assert two["maj"] == {"value": 1.0, "stderr": 0.0, "ci95": [1.0, 1.0]}
    assert two["pass"] == {"1": 0.0, "2": 0.0, "3": 0.0, "4": 0.0}


def test_by_subject(hand_metrics: dict) -> None:
    subjects = hand_metrics["by_subject"]
    assert list(subjects) == ["Algebra", "Geometry"]
    algebra, geometry = subjects["Algebra"], subjects["Geometry"]
    # Algebra = P1, P3: avg (0.5 + 0)/2; maj (1 + 1)/2; pass@2 (5/6 + 0)/2
    assert algebra["n_problems"] == 2
    assert algebra["avg"]["value"] == pytest.approx(0.25)
    assert algebra["maj"]["value"] == pytest.approx(1.0)
    assert algebra["pass"]["2"] == pytest.approx(5 / 12)
    # Geometry = P2
    assert geometry["avg"]["value"] == pytest.approx(0.25)
    assert geometry["maj"]["value"] == 0.0


def test_groups_average_back_to_the_headline(hand_metrics: dict) -> None:
    for name in ("by_level", "by_subject"):
        groups = hand_metrics[name].values()
        for metric in ("avg", "maj"):
            weighted = sum(g[metric]["value"] * g["n_problems"] for g in groups) / 3
            assert weighted == pytest.approx(hand_metrics[metric]["value"])


def test_bootstrap_ci_is_deterministic_and_contains_the_mean(hand_metrics: dict) -> None:
    again = compute_metrics(hand_run(), equivalent=stub_equivalent, bootstrap=500, seed=0)
    assert again == hand_metrics
    for metric in ("avg", "maj"):
        lo, hi = hand_metrics[metric]["ci95"]
        assert 0.0 <= lo <= hand_metrics[metric]["value"] <= hi <= 1.0
        assert lo < hi  # the scores differ across problems, so the interval is not a point


def test_score_summary_by_hand() -> None:
    # scores 0, 1, 1, 1: mean 0.75; deviations -0.75, 0.25 x3; var = 0.75/3 = 0.25; /sqrt(4)
    summary = score_summary([0.0, 1.0, 1.0, 1.0], bootstrap=2000, seed=7)
    assert summary["value"] == 0.75
    assert summary["stderr"] == pytest.approx(0.25)
    lo, hi = summary["ci95"]
    # resampled means are multiples of 1/4; the interval must cover the mean
    assert lo <= 0.75 <= hi and lo in (0.0, 0.25, 0.5) and hi == 1.0
    assert score_summary([0.0, 1.0, 1.0, 1.0], bootstrap=2000, seed=7) == summary
    assert score_summary([0.4, 0.4, 0.4])["ci95"] == pytest.approx([0.4, 0.4])
    assert score_summary([0.0, 1.0], bootstrap=0)["ci95"] == [0.5, 0.5]


# ---------------------------------------------------------------------------------------------
# edge cases


def test_uneven_sample_counts_use_common_k_for_maj_and_pass() -> None:
    records = [  # A has 3 samples (given out of order), B has 2: k = 2
        rec("A", 2, "2", False, gold="1"),
        rec("A", 1, "2", False, gold="1"),
        rec("A", 0, "1", True, gold="1"),
        rec("B", 0, "5", True, gold="5"),
        rec("B", 1, "6", False, gold="5"),
    ]
    m = compute_metrics(records, equivalent=stub_equivalent, bootstrap=0)
    assert (m["n_problems"], m["n_samples"], m["k"]) == (2, 5, 2)
    # avg uses every sample: A 1/3, B 1/2 -> (1/3 + 1/2)/2 = 5/12
    assert m["avg"]["value"] == pytest.approx(5 / 12)
    # maj@2 votes on samples 0-1 only: A "1" vs "2" tie -> "1" (correct); B "5" -> correct.
    # (All three of A's samples would elect "2".)
    assert m["maj"]["value"] == 1.0
    # pass@1 = (1/3 + 1/2)/2 = 5/12; pass@2: A 1 - C(2,2)/C(3,2) = 2/3, B 1 -> 5/6
    assert m["pass"] == pytest.approx({"1": 5 / 12, "2": 5 / 6})


def test_maj_reuses_a_known_grade_instead_of_reverifying() -> None:
    # The stub would call "0.5" equal to gold "1/2", but the recorded grade says False: reused.
    eq = CountingEquivalent()
    records = [rec("P", i, "0.5", False, gold="1/2") for i in range(3)]
    assert compute_metrics(records, equivalent=eq, bootstrap=0)["maj"]["value"] == 0.0
    assert eq.calls == []


def test_maj_falls_back_to_equivalence_when_grades_are_null() -> None:
    eq = CountingEquivalent()
    records = [rec("P", 0, "y", None, gold="x"), rec("P", 1, "y", None, gold="x"),
               rec("Q", 0, "1/2", None, gold="0.5")]
    m = compute_metrics(records, equivalent=eq, bootstrap=0)
    assert m["maj"]["value"] == 0.5  # P: "y" != "x" -> 0; Q: "1/2" == "0.5" -> 1
    assert eq.calls == [("x", "y"), ("0.5", "1/2")]  # (gold, answer)


def test_no_answers_means_maj_wrong() -> None:
    records = [rec("P", 0, None, False, gold="1"), rec("P", 1, None, False, gold="1")]
    assert compute_metrics(records, equivalent=stub_equivalent)["maj"]["value"] == 0.0


def test_zero_tool_calls_give_zero_rates() -> None:
    records = [rec("P", i, "1", True, gold="1") for i in range(3)]
    m = compute_metrics(records, equivalent=stub_equivalent, bootstrap=0)
    assert m["tools"] == {"calls_per_sample": 0.0, "error_rate": 0.0, "timeout_rate": 0.0,
                          "truncation_rate": 0.0}


def test_breakdowns_only_with_meta_and_unknown_group() -> None:
    plain = [rec("P", 0, "1", True, gold="1"), rec("Q", 0, "2", False, gold="1")]
    m = compute_metrics(plain, equivalent=stub_equivalent, bootstrap=0)
    assert "by_level" not in m and "by_subject" not in m
    mixed = [rec("P", 0, "1", True, gold="1", problem_meta={"level": 10}),
             rec("Q", 0, "1", True, gold="1", problem_meta={"level": 2}),
             rec("R", 0, "2", False, gold="1")]
    m = compute_metrics(mixed, equivalent=stub_equivalent, bootstrap=0)
    assert list(m["by_level"]) == ["2", "10", "unknown"]  # numeric order, missing last
    assert m["by_level"]["unknown"]["avg"]["value"] == 0.0
    assert "by_subject" not in m


def test_bad_records_raise_data_error() -> None:
    with pytest.raises(DataError):
        compute_metrics([], equivalent=stub_equivalent)
    with pytest.raises(DataError, match="duplicate"):
        compute_metrics([rec("P", 0, "1", True), rec("P", 0, "1", True)])
    with pytest.raises(DataError, match="problem_id"):
        compute_metrics([{"sample_index": 0, "correct": True}])


def test_metrics_table_rows(hand_metrics: dict) -> None:
    rows = dict(metrics_table_rows(hand_metrics))
    lo, hi = hand_metrics["avg"]["ci95"]
    # avg 25.0%, stderr 0.25/sqrt(3) = 14.43 points
    assert rows["avg@4"] == f"25.0% ± 14.4 [{100 * lo:.1f}, {100 * hi:.1f}]"
    assert rows["maj@4"].startswith("66.7% ± 33.3 ")
    assert [name for name in rows if name.startswith("pass@")] == ["pass@1", "pass@2", "pass@4"]
    assert rows["pass@2"] == "44.4%"  # 4/9
    assert rows["problems"] == "3" and rows["samples"] == "12 (k=4)"
    assert rows["finish: answered"] == "9 (75.0%)"
    assert rows["tool error rate"] == "25.0%"
    assert rows["duration/sample"] == "2.00 s"
    assert rows["level 1"] == "avg@4 37.5% · maj@4 50.0% · n=2"
    assert rows["subject Geometry"] == "avg@4 25.0% · maj@4 0.0% · n=1"


# ---------------------------------------------------------------------------------------------
# the real equivalence (math-verify in the worker pool)


def test_default_equivalent_with_math_verify() -> None:
    assert default_equivalent("3", "3")  # exact string fast path
    assert default_equivalent(r"\frac{1}{2}", "0.5")
    assert not default_equivalent("3", "4")
    # a vote with the real check: \frac{1}{2} and 0.5 together (2) beat "3" (1)
    assert majority_answer(["3", r"\frac{1}{2}", "0.5"], default_equivalent) == r"\frac{1}{2}"
