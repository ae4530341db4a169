"""Tests of agentmath.grading: answer extraction, verification, hard timeouts and the CLI.

The regression table runs each pair twice: with the in-process fast path and with math-verify
alone (in the worker pool), so the shortcuts can never disagree with the real verifier.
"""

from __future__ import annotations

import asyncio
import json
import operator
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from agentmath.cli.grade import register
from agentmath.errors import GradingError
from agentmath.grading import (
    ALL_STRATEGIES,
    BOXED_ONLY,
    GradeResult,
    acheck,
    agrade,
    averify,
    check,
    extract_answer,
    get_pool,
    grade,
    verify,
)
from agentmath.grading.fastpath import braces_balanced, normalize, quick_compare
from agentmath.grading.pool import VerifierPool

# sympy evaluates this factorial eagerly: minutes of CPU, so math-verify never returns in time.
PATHOLOGICAL = r"(10^{7})!"


@pytest.fixture(scope="module", autouse=True)
def warm_pool() -> Iterator[None]:
    """Start the shared workers once, so timings below measure checks, not start-up."""
    get_pool().warm_up()
    yield


# (gold, predicted, expected); realistic answers from MATH / AIME / HMMT / GSM8K / AMC styles.
REGRESSION: list[tuple[str, str, bool]] = [
    # fractions vs decimals, \dfrac
    (r"\frac{1}{2}", "0.5", True),
    ("0.5", r"\frac12", True),
    (r"\dfrac{3}{4}", "0.75", True),
    (r"\dfrac{14}{3}", r"\frac{14}{3}", True),
    (r"\frac{14}{3}", "4.67", False),
    (r"\frac{1}{2}", "0.51", False),
    # radicals
    (r"2\sqrt{2}", r"\sqrt{8}", True),
    (r"11\sqrt2", r"11\sqrt{2}", True),
    (r"\frac{9 \sqrt{23}}{23}", r"\frac{9}{\sqrt{23}}", True),
    (r"\sqrt{\frac{95}{24}}", r"\frac{\sqrt{570}}{12}", True),
    (r"2\sqrt{2}", r"\sqrt{6}", False),
    # intervals
    ("(0, 1]", "(0,1]", True),
    (r"(-\infty, 3)", r"(-\infty,3)", True),
    ("(0, 1]", "[0, 1]", False),
    # an interval answered as the inequality it stands for (gold certainly an interval)
    (r"(-\infty, 3]", r"x \le 3", True),
    (r"(2,\infty)", "x>2", True),
    (r"[2,5)", r"2 \le x < 5", True),
    (r"(-\infty, 2) \cup (3, \infty)", r"x<2 \text{ or } x>3", True),
    (r"(0,9) \cup (9,36)", r"0<x<9 \text{ or } 9<x<36", True),
    (r"(-\infty, 3]", "x<3", False),
    (r"(2,\infty)", r"x \geq 2", False),
    (r"(-\infty, 2) \cup (3, \infty)", r"x<2 \text{ or } x>4", False),
    (r"(0,9) \cup (9,36)", "0<x<36", False),
    ("(1,2)", "1<x<2", False),  # (1, 2) may be a point: not compared with an inequality
    # sets and unordered lists of values
    (r"\{1,2\}", r"\{2,1\}", True),
    ("3, 5, 7", "7, 5, 3", True),
    (r"\frac{-1+\sqrt{17}}{2}, \frac{-1-\sqrt{17}}{2}",
     r"\frac{-1-\sqrt{17}}{2}, \frac{-1+\sqrt{17}}{2}", True),
    (r"\{1,2\}", r"\{1,3\}", False),
    # tuples / points
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{\pi}{2})", True),
    ("(3, -1)", "(3,-1)", True),
    ("(3, -1)", "(-1, 3)", False),
    # equations vs values
    ("x=5", "5", True),
    ("5", "x=5", True),
    ("x=5", "x=6", False),
    # multiple-choice letters
    ("(B)", "B", True),
    (r"\text{(B)}", "B", True),
    ("C", r"\textbf{(C)}", True),
    ("(B)", "C", False),
    (r"\text{(A), (C)}", "A, C", True),
    (r"\text{(A), (C)}", "(C), (A)", True),
    (r"\text{(A), (C)}", "(A)", False),
    ("(B)", r"\text{(B), (D)}", False),
    ("B", "(B) 42", True),  # a letter with its value after it
    ("B", r"\textbf{(B) }42", True),
    (r"\text{(C)}", r"\textbf{(C)} 17", True),
    ("42", "(B) 42", True),  # ... against a gold that is the value
    ("B", "(C) 42", False),
    ("41", "(B) 42", False),
    # words, whatever their case
    (r"\text{True}", "true", True),
    ("False", r"\text{false}", True),
    (r"\text{Monday}", "monday", True),
    (r"\text{True}", "false", False),
    # number words (cardinals only)
    ("3", "three", True),
    ("25", "Twenty-five", True),
    ("120", "one hundred and twenty", True),
    ("0", r"\text{zero}", True),
    (r"\text{six}", "6", True),
    ("3", "four", False),
    ("3", "three apples", False),
    ("4", "fourth", False),
    ("0", "O", False),  # a point's name
    # AIME zero padding
    ("025", "25", True),
    ("073", r"\textbf{(073)}", True),
    ("80", "080", True),
    ("025", "24", False),
    # units and text answers
    (r"10\text{ cm}", "10", True),
    ("10", r"10 \text{ cm}", True),
    (r"\text{Evelyn}", "Evelyn", True),
    (r"\text{Evelyn}", r"\text{Bob}", False),
    (r"\$18.90", "18.9", True),
    # percentages
    (r"50\%", "50", True),
    (r"10\%", "0.1", True),
    (r"50\%", "5", False),
    # thousands separators
    ("1,000", "1000", True),
    ("70000", "70,000", True),
    (r"1{,}000", "1000", True),
    ("70000", "7000", False),
    # degrees
    (r"90^\circ", "90", True),
    ("336", r"336^{\circ}", True),
    (r"90^\circ", "45", False),
    # assorted MATH-500 / HMMT shapes
    ("6 - 5i", "6-5i", True),
    ("6 - 5i", "6+5i", False),
    ("x^2+7x+10", "(x+5)(x+2)", True),
    (r"2^{25} \cdot 26!", r"26! \cdot 2^{25}", True),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}", True),
    # a vector written as a tuple, either way round; its entries compared in order
    (r"\begin{pmatrix} -1/3 \\ 2/3 \\ 5/3 \end{pmatrix}",
     r"\left(-\frac{1}{3}, \frac{2}{3}, \frac{5}{3}\right)", True),
    (r"\begin{pmatrix} 1/5 \\ -18/5 \end{pmatrix}", "(0.2, -3.6)", True),
    ("(1, 2)", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", True),
    (r"\begin{pmatrix} 1 & 2 \end{pmatrix}", "[1, 2]", True),
    (r"\begin{pmatrix} -2 \\ -14 \\ -7 \end{pmatrix}", "(-2, -7, -14)", False),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", "(1, 2, 3)", False),
    (r"\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}", "(-1, 0, 0, -1)", False),
    (r"\pi", "3", False),
    ("18", "18", True),
    ("2", "3", False),
]


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "math_verify"])
@pytest.mark.parametrize(("gold", "predicted", "expected"), REGRESSION)
def test_regression_table(gold: str, predicted: str, expected: bool, fast_path: bool) -> None:
    assert verify(gold, predicted, fast_path=fast_path) is expected


def test_regression_table_is_big_enough() -> None:
    assert len(REGRESSION) >= 40
    assert sum(expected for *_, expected in REGRESSION) < len(REGRESSION)


# ----------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"So $x = \boxed{\frac{1}{\sqrt{2}}}$.", r"\frac{1}{\sqrt{2}}"),  # nested braces
        (r"First \boxed{3}, then corrected: \boxed{4}.", "4"),  # multiple -> last
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not count
        (r"The answer is $\boxed 5$.", "5"),  # \boxed without braces
        (r"\fbox{12}", "12"),
        (r"\boxed{ \$18.90. }", r"\$18.90"),  # whitespace and trailing period stripped
        (r"\boxed{$\frac{3}{4}$}", r"\frac{3}{4}"),  # surrounding $ stripped
        (r"Done: \boxed{7}. Then \boxed{8", "7"),  # truncated last box is skipped
        (r"\boxed{\textbf{(113) }}", r"\textbf{(113) }"),
        ("The final answer is $42$. I hope it is correct.", "42"),
        ("Thus the answer is: 3.5\nmore text", "3.5"),
        ("**Answer:** $x = 3$", "x = 3"),
        ("Answer: \\(\\frac{7}{2}\\)", r"\frac{7}{2}"),
        ("She earns 9 * 2 = $<<9*2=18>>18.\n#### 1,234", "1,234"),
        (r"Answer: 5 but really \boxed{6}", "6"),  # boxed wins over phrases
        ("<think>3 + 4 = 7</think> <answer>7</answer>", "7"),  # R1-Zero's template
        ("<answer>1</answer> no, <answer> $\\frac{1}{2}$ </answer>", r"\frac{1}{2}"),
        ("<answer>x</answer> and <answer>  </answer>", "x"),  # an empty tag is skipped
        ("<answer>7</answer> so \\boxed{8}", "8"),  # a box wins over the tag
        ("<answer>7 (unclosed", None),
        ("I computed 3 + 4 = 7 and stopped.", None),  # last number is off by default
        ("", None),
        (None, None),
    ],
)
def test_extract_answer(text: str | None, expected: str | None) -> None:
    assert extract_answer(text) == expected


def test_last_number_fallback_is_opt_in() -> None:
    text = "I computed 3 + 4 = 7, then 1,250 more."
    assert extract_answer(text) is None
    assert extract_answer(text, strategies=ALL_STRATEGIES) == "1,250"


def test_boxed_only_ignores_phrases() -> None:
    assert extract_answer("The answer is 5.", strategies=BOXED_ONLY) is None
    assert extract_answer("The answer is 5. \\boxed{6}", strategies=BOXED_ONLY) == "6"


def test_unknown_strategy_is_an_error() -> None:
    with pytest.raises(GradingError, match="unknown extraction strategies"):
        extract_answer("x", strategies=("boxed", "magic"))


# ----------------------------------------------------------------------------- verification


def test_gold_unparsable_gives_none() -> None:
    assert verify("}{", "1") is None
    assert verify("", "1") is None
    result = check("}{", "1")
    assert result.correct is None and result.error == "gold answer could not be parsed"


def test_missing_or_unparsable_prediction_is_false() -> None:
    assert verify("5", None) is False
    assert verify("5", "}{") is False


def test_bad_arguments_raise_grading_error() -> None:
    with pytest.raises(GradingError, match="must be a str"):
        verify(5, "5")  # type: ignore[arg-type]
    with pytest.raises(GradingError, match="timeout"):
        verify("5", "5", timeout=0)


def test_grade_extracts_then_verifies() -> None:
    result = grade("025", r"... so the answer is $\boxed{\textbf{(025)}}$.")
    assert result == GradeResult(r"\textbf{(025)}", True, False, None, "fast")
    wrong = grade(r"\frac{1}{2}", r"I get \boxed{0.6}")
    assert (wrong.extracted, wrong.correct, wrong.timed_out) == ("0.6", False, False)
    assert grade("5", "no answer here").correct is False


@pytest.mark.parametrize(
    ("gold", "predicted", "expected"),
    [("18", "18", True), ("025", "25", True), ("(B)", r"\text{B}", True), ("A", "B", False),
     ("12", "13", False), ("1,000", "1000", True), (r"90^\circ", "90", True),
     (r"\frac12", "0.5", None), ("2.5", "2.50001", None), ("x=5", "5", None), ("}{", "}{", None)],
)  # fmt: skip
def test_quick_compare_decides_only_easy_pairs(
    gold: str, predicted: str, expected: bool | None
) -> None:
    assert quick_compare(gold, predicted) is expected


def test_normalize_and_braces() -> None:
    assert normalize(r"\left( 3, \dfrac{\pi}{2} \right)") == r"(3,\frac{\pi}{2})"
    assert normalize(r"$\text{(B)}$.") == "(B)"
    assert braces_balanced(r"\{1\}") and not braces_balanced("}{")


# ----------------------------------------------------------------------------- timeouts


def _assert_timed_out(result: GradeResult, elapsed: float) -> None:
    assert result.timed_out is True and result.correct is False
    assert result.error is not None and "exceeded" in result.error
    assert elapsed < 5.0, f"a 1 s timeout took {elapsed:.1f} s"


def test_timeout_from_a_non_main_thread() -> None:
    results: list[GradeResult] = []
    thread = threading.Thread(target=lambda: results.append(check("1", PATHOLOGICAL, timeout=1)))
    start = time.monotonic()
    thread.start()
    thread.join(timeout=30)
    _assert_timed_out(results[0], time.monotonic() - start)
    assert verify(r"\frac{1}{2}", "0.5", fast_path=False) is True  # the pool recovered


async def test_timeout_inside_asyncio_does_not_block_the_loop() -> None:
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    start = time.monotonic()
    result = await acheck("1", PATHOLOGICAL, timeout=1)
    elapsed = time.monotonic() - start
    beat.cancel()
    _assert_timed_out(result, elapsed)
    assert ticks >= 10, "the event loop was blocked during verification"
    assert await averify(r"2\sqrt{2}", r"\sqrt{8}", fast_path=False) is True
    graded = await agrade("7", r"so \boxed{7}")
    assert graded.correct is True and graded.extracted == "7"


def test_pool_kills_only_the_overrunning_call() -> None:
    pool = VerifierPool(2, memory_mb=None)
    try:
        outcomes: dict[str, Any] = {}

        def slow() -> None:
            outcomes["slow"] = pool.call(time.sleep, (60,), timeout=0.5)

        thread = threading.Thread(target=slow)
        thread.start()
        outcomes["fast"] = pool.call("operator:add", (2, 3), timeout=10)
        thread.join(timeout=30)
        assert outcomes["slow"].status == "timeout"
        assert outcomes["fast"].status == "ok" and outcomes["fast"].value == 5
        error = pool.call("math:sqrt", (-1,), timeout=10)
        assert error.status == "error" and "ValueError" in (error.error or "")
        assert pool.call("operator:mul", (6, 7), timeout=10).value == 42
    finally:
        pool.close()


def test_pool_survives_crashes_and_bad_calls() -> None:
    pool = VerifierPool(1, memory_mb=None)
    try:
        died = pool.call("os:_exit", (3,), timeout=10)
        assert died.status == "error" and "exit code 3" in (died.error or "")
        with pytest.raises(GradingError, match="cannot send"):
            pool.call(operator.add, (threading.Lock(), 1), timeout=10)  # unpicklable argument
        assert pool.call(operator.add, (1, 2), timeout=10).value == 3
    finally:
        pool.close()


def test_script_without_main_guard_can_grade(tmp_path: Path) -> None:
    """Workers are plain subprocesses: they never re-import the caller's ``__main__``."""
    script = tmp_path / "grade_me.py"
    script.write_text(
        "from agentmath.grading import verify\n"
        "print(verify(r'\\frac{1}{2}', '0.5', fast_path=False))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_closed_pool_refuses_calls() -> None:
    pool = VerifierPool(1, memory_mb=None)
    pool.close()
    with pytest.raises(GradingError, match="closed"):
        pool.call("operator:add", (1, 2), timeout=1)


# ----------------------------------------------------------------------------- CLI


def _cli(lines: list[str], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:
        """Test app: a callback keeps ``grade`` a subcommand."""

    result = CliRunner().invoke(app, ["grade", *args], input="\n".join(lines) + "\n")
    records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return result.exit_code, records, result.stderr


def test_cli_grades_jsonl() -> None:
    lines = [
        json.dumps({"id": "a", "gold": r"\frac{1}{2}", "response": r"so \boxed{0.5}"}),
        "",  # blank lines are not records
        json.dumps({"id": "b", "gold": 27.0, "response": "The answer is 28."}),
        json.dumps({"id": "c", "gold": "3", "response": None}),
    ]
    code, records, stderr = _cli(lines)
    assert code == 0, stderr
    assert [r["id"] for r in records] == ["a", "b", "c"]
    assert [r["correct"] for r in records] == [True, False, False]
    assert records[0]["extracted"] == "0.5" and records[0]["timed_out"] is False
    assert records[1]["extracted"] == "28"
    assert "1 correct" in stderr


def test_cli_malformed_lines_are_reported_not_dropped() -> None:
    lines = [
        "not json",
        json.dumps({"gold": "5"}),
        json.dumps({"gold": None, "response": "x"}),
        json.dumps({"gold": "5", "response": r"\boxed{5}"}),
    ]
    code, records, stderr = _cli(lines)
    assert code == 2
    assert len(records) == 4
    assert records[0]["line"] == 1 and "not valid JSON" in records[0]["error"]
    assert records[1]["correct"] is None and "'response' is missing" in records[1]["error"]
    assert "line 3: field 'gold' must be a string or a number, got null" in stderr
    assert records[3]["correct"] is True and records[3]["error"] is None


def test_cli_fallback_and_timeout_options() -> None:
    lines = [json.dumps({"gold": "5", "response": "The answer is 5."}),
             json.dumps({"gold": "1", "response": rf"\boxed{{{PATHOLOGICAL}}}"})]
    code, records, _ = _cli(lines, "--no-fallback", "--timeout", "1")
    assert code == 0
    assert records[0]["extracted"] is None and records[0]["correct"] is False
    assert records[1]["timed_out"] is True and records[1]["correct"] is False
    code, records, _ = _cli(lines[:1], "--fallback")
    assert records[0]["correct"] is True
