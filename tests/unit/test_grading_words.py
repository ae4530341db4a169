"""Number words and interval detection: the two readings grading adds before math-verify."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agentmath.grading._mathverify import is_interval
from agentmath.grading.fastpath import choice_letters
from agentmath.grading.words import MAX_WORDS_CHARS, number_from_words


@pytest.mark.parametrize(("answer", "value"), [
    ("three", 3), ("Twenty-five", 25), ("twenty five.", 25), (r"\text{zero}", 0),
    (r"$\textbf{eleven}$", 11), ("one thousand two hundred", 1200),
])  # fmt: skip
def test_cardinals_are_read(answer: str, value: int) -> None:
    assert number_from_words(answer) == Decimal(value)


@pytest.mark.parametrize("answer", [
    "odd", "fourth", "three apples", "minus four", "a half", "3", r"\frac{1}{2}", "",
    "o", "O", r"\text{O}", "zero o",  # a point named O is not 0
    "one " * (MAX_WORDS_CHARS // 4 + 1),
])  # fmt: skip
def test_other_answers_are_not_numbers(answer: str) -> None:
    assert number_from_words(answer) is None


@pytest.mark.parametrize(("answer", "expected"), [
    (r"(-\infty, 3]", True), ("[0,1]", True), ("(0, 1]", True),
    (r"\left[ \frac{\pi^2}{8}, \frac{5 \pi^2}{4} \right]", True), (r"(1,2)\cup(3,4)", True),
    ("(1,2)", False),  # may be a point
    (r"\sqrt[3]{2}", False), ("[1,2,3]", False), (r"\{1,2\}", False), ("f(x)=[x]", False),
])  # fmt: skip
def test_is_interval_only_when_certain(answer: str, expected: bool) -> None:
    assert is_interval(answer) is expected


def test_choice_letters_are_a_set() -> None:
    assert choice_letters(r"\text{(A), (C)}") == choice_letters("C, A") == frozenset("AC")
    assert choice_letters("(B)") == frozenset("B")
    assert choice_letters("A, 2") is None
    assert choice_letters("F") is None
