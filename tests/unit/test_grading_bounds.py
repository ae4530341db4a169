"""Grading stays bounded: extraction is linear (and means what it meant before), long responses
are searched in a worker under the grading timeout, and extraction and verification share one
time budget."""

from __future__ import annotations

import importlib
import random
import re
from typing import Any

import pytest

from agentmath.grading import extract as extract_module
from agentmath.grading import extract_answer, grade
from agentmath.grading.extract import clean_answer
from agentmath.grading.pool import CallResult
from agentmath.grading.verify import FAST_PATH_MAX_CHARS, INLINE_EXTRACT_MAX_CHARS, agrade

# The package exports a function named ``verify``; this is the module of that name.
verify_module = importlib.import_module("agentmath.grading.verify")

# ------------------------------------------------------------------ reference implementation
# The straightforward (quadratic) algorithm the linear one replaced, kept here as the oracle.


def _ref_balanced(text: str, open_at: int) -> str | None:
    depth, i = 0, open_at
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1: i]
        i += 1
    return None


def _ref_clean(answer: str) -> str | None:
    previous = None
    while answer != previous:
        previous = answer
        answer = answer.strip().strip("*").strip()
        for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if answer.startswith(opener) and answer.endswith(closer) and len(answer) > 1:
                answer = answer[len(opener): len(answer) - len(closer)]
        if answer.startswith("$") != answer.endswith("$") or not answer.strip("$"):
            answer = answer.strip("$")
        if answer.endswith(".") and not answer.endswith("\\."):
            answer = answer[:-1]
    return answer or None


def _ref_boxed(text: str) -> str | None:
    for match in reversed(list(re.finditer(r"\\(?:boxed|fbox|framebox)(?![A-Za-z])", text))):
        i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            content = _ref_balanced(text, i)
        else:
            bare = re.compile(r"[ \t]*([^\s$\\{}]+)").match(text, match.end())
            content = bare.group(1) if bare else None
        if content is not None and _ref_clean(content) is not None:
            return content
    return None


def _ref_gsm8k(text: str) -> str | None:
    found = re.findall(r"^[ \t]*####[ \t]*(.+?)[ \t]*$", text, re.MULTILINE)
    return found[-1] if found else None


PIECES = ["\\boxed", "\\fbox", "{", "}", "\\{", "\\}", "\\", "$", "$$", " ", "\t", "\n", ".",
          "*", "5", "x", "Answer:", "the answer is", "**Answer**:", "####", "\\(", "\\)", "\\[",
          "\\]", "_", "#", "12", "\\.", "\r"]


def _fuzz(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12))) for _ in range(count)]


def test_linear_extraction_agrees_with_the_reference() -> None:
    for text in _fuzz(4000, seed=8):
        assert clean_answer(text) == _ref_clean(text), repr(text)
        assert extract_module._last_boxed(text) == _ref_boxed(text), repr(text)
        new, old = extract_module._last_gsm8k(text), _ref_gsm8k(text)
        assert (None if new is None else clean_answer(new)) == (
            None if old is None else _ref_clean(old)), repr(text)


def test_cleaning_layers_of_delimiters_agrees_with_the_reference() -> None:
    rng = random.Random(3)
    pieces = ["$", "$$", "$$$", " ", ".", "*", "x", "\\(", "\\)", "\\[", "\\]", "\\.", "\n"]
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 16)))
        assert clean_answer(text) == _ref_clean(text), repr(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("so \\boxed{41} then " + "\\boxed{" * 20_000, "41"),  # unclosed boxes are skipped
    ("\\boxed{" + ". " * 20_000 + "} and \\boxed{7}", "7"),
    ("\\boxed{" + "$$" * 10_000 + "9" + "$$" * 10_000 + "}", "9"),
    ("#### 1" + " " * 50_000 + "2", "1" + " " * 50_000 + "2"),
    ("\n" + " " * 50_000 + "x\nAnswer: 3", "3"),
    ("\\boxed{" * 5000 + "6" + "}" * 5000, "6"),  # the last box is the innermost
])
def test_pathological_responses_extract_correctly(text: str, expected: str) -> None:
    assert extract_answer(text) == expected


class FakePool:
    """Stands in for the verifier pool: records calls, answers like a worker would."""

    def __init__(self, extract_elapsed: float = 0.0, status: str = "ok") -> None:
        self.calls: list[tuple[str, float]] = []
        self.extract_elapsed = extract_elapsed
        self.status = status

    def call(self, fn: str, args: tuple[Any, ...], timeout: float) -> CallResult:
        self.calls.append((fn, timeout))
        if fn.endswith(":extract_answer_args"):
            if self.status != "ok":
                return CallResult(self.status, error="boom", elapsed_s=timeout)  # type: ignore
            return CallResult("ok", extract_answer(args[0], strategies=args[1]),
                              elapsed_s=self.extract_elapsed)
        return CallResult("ok", value=args[0] == args[1], elapsed_s=0.01)


@pytest.fixture
def fake_pool(monkeypatch: pytest.MonkeyPatch) -> FakePool:
    pool = FakePool()
    monkeypatch.setattr(verify_module, "get_pool", lambda: pool)
    return pool


LONG = "x" * (INLINE_EXTRACT_MAX_CHARS + 1) + " so \\boxed{12}"


def test_short_responses_are_graded_inline(fake_pool: FakePool) -> None:
    result = grade("12", "the answer is \\boxed{12}", timeout=3)
    assert result.correct is True and result.method == "fast" and fake_pool.calls == []


def test_long_responses_are_extracted_in_a_worker(fake_pool: FakePool) -> None:
    result = grade("12", LONG, timeout=3)
    assert result.extracted == "12" and result.correct is True
    assert [fn.rsplit(":", 1)[1] for fn, _ in fake_pool.calls] == ["extract_answer_args"]
    assert fake_pool.calls[0][1] == 3


def test_verification_gets_what_extraction_left(fake_pool: FakePool) -> None:
    fake_pool.extract_elapsed = 2.5
    grade("\\frac{1}{2}", LONG.replace("12}", "0.5}"), timeout=3)  # not decided inline
    (_, first), (verify_fn, left) = fake_pool.calls
    assert first == 3 and verify_fn.endswith(":verify_answers")
    assert left == pytest.approx(0.5)


def test_extraction_using_the_whole_budget_times_out(fake_pool: FakePool) -> None:
    fake_pool.extract_elapsed = 3.0
    result = grade("12", LONG, timeout=3)
    assert result.timed_out and result.correct is False and result.extracted == "12"
    assert len(fake_pool.calls) == 1


@pytest.mark.parametrize(("status", "timed_out"), [("timeout", True), ("error", False)])
def test_extraction_failure_is_a_graded_result(fake_pool: FakePool, status: str,
                                               timed_out: bool) -> None:
    fake_pool.status = status
    result = grade("12", LONG, timeout=3)
    assert result.correct is False and result.timed_out is timed_out
    assert result.extracted is None and "extraction" in (result.error or "")


def test_long_answers_skip_the_inline_shortcuts(fake_pool: FakePool) -> None:
    answer = "1" * (FAST_PATH_MAX_CHARS + 1)
    result = grade(answer, f"\\boxed{{{answer}}}", timeout=3)
    assert result.method == "math_verify" and result.correct is True
    assert fake_pool.calls[0][0].endswith(":verify_answers")


async def test_agrade_matches_grade(fake_pool: FakePool) -> None:
    assert (await agrade("12", "\\boxed{12}", timeout=3)).method == "fast"
    result = await agrade("12", LONG, timeout=3)
    assert result.correct is True and len(fake_pool.calls) == 1


def test_a_real_worker_extracts_a_megabyte_response() -> None:
    text = "\\boxed{" * 150_000 + " \\boxed{5}"  # ~1 MiB: quadratic extraction never ended
    result = grade("5", text, timeout=30)
    assert result.extracted == "5" and result.correct is True and not result.timed_out
