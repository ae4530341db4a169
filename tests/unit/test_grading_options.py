"""The grader's leniencies as options (agentmath.grading.options): each one, on by default and
off on request, on hand-made answers; the same options reach eval's config and metrics."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentmath.eval.config import EvalConfig
from agentmath.eval.metrics import compute_metrics, equivalence
from agentmath.grading import GradingOptions, Verdict, grade_answer, verify
from agentmath.grading.fastpath import quick_compare

STRICT = GradingOptions.math_verify_only()

# (gold, predicted, the option that accepts it): right answers only agentmath's leniency reads
LENIENT = [
    pytest.param("10", r"\text{ten}", "number_words", id="number-word"),
    pytest.param("25", "Twenty-five", "number_words", id="number-words-hyphen"),
    pytest.param(r"\frac{\pi}{4}", "pi/4", "plaintext_math", id="plain-pi"),
    pytest.param(r"\sqrt{2}", "√2", "plaintext_math", id="unicode-root"),
    pytest.param(r"90^\circ", "90°", "plaintext_math", id="unicode-degree"),
    pytest.param(r"\text{True}", "true", "word_case", id="word-case"),
    pytest.param("B", "(B) 42", "multiple_choice", id="choice-with-value"),
    pytest.param(r"\text{(A), (C)}", "C, A", "multiple_choice", id="choice-set"),
]


@pytest.mark.parametrize(("gold", "predicted", "option"), LENIENT)
def test_each_leniency_is_on_by_default_and_its_option_turns_it_off(
        gold: str, predicted: str, option: str) -> None:
    assert verify(gold, predicted) is True
    assert verify(gold, predicted, options=GradingOptions()) is True
    without = GradingOptions(**{option: False})
    assert verify(gold, predicted, options=without) is False
    assert verify(gold, predicted, options=STRICT) is False


@pytest.mark.parametrize(("gold", "predicted"), [
    ("204", "204"), ("25", "025"), (r"\frac{1}{2}", "0.5"), (r"2\sqrt{2}", r"\sqrt{8}"),
    (r"\dfrac{3}{4}", r"\frac{3}{4}"), (r"\text{ten}", r"\text{ten}")])
def test_math_verify_only_still_grades_plain_latex_right(gold: str, predicted: str) -> None:
    assert verify(gold, predicted, options=STRICT) is True


def test_number_words_off_leaves_the_pair_to_math_verify_not_the_fast_path() -> None:
    assert quick_compare("10", r"\text{ten}") is True
    assert quick_compare("10", r"\text{ten}", GradingOptions(number_words=False)) is None
    assert quick_compare("10", "11", STRICT) is False  # two numerals: still decided here


def test_a_whole_response_is_graded_with_the_options() -> None:
    boxed_word = r"The count is \boxed{\text{ten}}."
    assert grade_answer("10", boxed_word).verdict is Verdict.CORRECT
    strict = grade_answer("10", boxed_word, options=STRICT)
    assert strict.verdict is Verdict.WRONG and strict.extracted == r"\text{ten}"


def test_extraction_follows_the_options() -> None:
    phrase = "We add them up, so the answer is 42."
    assert grade_answer("42", phrase).verdict is Verdict.CORRECT
    assert grade_answer("42", phrase, options=STRICT).extracted is None
    last = GradingOptions(extraction=["boxed", "last_number"])
    assert grade_answer("42", "it comes to 40 + 2 = 42", options=last).is_correct


def test_unknown_extraction_strategy_is_a_validation_error_naming_it() -> None:
    with pytest.raises(ValidationError, match="nearest"):
        GradingOptions(extraction=["nearest"])


def test_eval_config_carries_the_options_from_a_config_file_section() -> None:
    config = EvalConfig.model_validate({
        "dataset": "aime24", "model": "m",
        "grading": {"number_words": False, "extraction": ["boxed"]}})
    assert config.grading.number_words is False and config.grading.plaintext_math is True
    assert EvalConfig(dataset="aime24", model="m").grading == GradingOptions()
    with pytest.raises(ValidationError, match="grading"):
        EvalConfig.model_validate({"dataset": "d", "model": "m", "grading": {"words": False}})


def test_the_majority_vote_groups_answers_with_the_options() -> None:
    # Three samples: "ten", "\text{ten}" and "11": lenient, the first two are one vote (10)
    rows = [{"problem_id": "p", "gold": "10", "extracted": e, "correct": c}
            for e, c in (("ten", None), (r"\text{ten}", None), ("11", False))]
    assert compute_metrics(rows, equivalent=equivalence(GradingOptions()))["maj"]["value"] == 1.0
    assert compute_metrics(rows, equivalent=equivalence(STRICT))["maj"]["value"] == 0.0
