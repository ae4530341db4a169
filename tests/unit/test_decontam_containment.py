"""Short benchmark problems pasted into longer rows (a chat template, an instruction, a worked
solution): the N-gram detector finds them by containment (agentmath/synth/containment.py).
Before it, 7 of 12 sampled MATH500 problems wrapped in ChatML were kept: a problem shorter
than 13 fingerprint tokens, or one with too few words to mask its numbers, shares no N-gram
with a longer row quoting it."""

from __future__ import annotations

import pytest

from agentmath.synth.containment import ShortTextIndex
from agentmath.synth.decontam import Item, decontaminate, deduplicate, make_detectors
from agentmath.synth.detectors import NGramDetector
from agentmath.synth.normalize import fingerprint, keeps_numbers, number_tokens
from agentmath.tasks import load_tasks

# MATH500 items: a short one (6 tokens) and a formula-heavy one (15 tokens, 4 words: its
# fingerprint keeps its numbers)
NINE_HALVES = "What is $\\frac{9}{2}$ expressed as a decimal?"
FRACTIONS = "Write the expression \\[\\frac{4+6a}{5}-\\frac{1+3a}{4}\\] as a single fraction."

WRAPPERS = {
    "chatml": lambda t: ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                         f"<|im_start|>user\n{t}<|im_end|>\n<|im_start|>assistant\n"),
    "llama3": lambda t: ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
                         f"{t}<|eot_id|><|start_header_id|>assistant<|end_header_id|>"),
    "instruction": lambda t: ("Solve the following math problem step by step. Put the final "
                              f"answer in \\boxed{{}}.\n\nProblem: {t}\n\nSolution:"),
    "with_solution": lambda t: (f"{t}\n\nSolution: We divide and simplify carefully; the "
                                "long division gives the decimal expansion we want, and we "
                                "check it by multiplying back."),
}


def test_the_two_problems_are_the_kinds_that_need_containment() -> None:
    assert len(fingerprint(NINE_HALVES)) < 13
    assert len(fingerprint(FRACTIONS)) >= 13 and keeps_numbers(fingerprint(FRACTIONS))
    assert "9/2" in number_tokens(NINE_HALVES) and "#" in fingerprint(WRAPPERS["chatml"](
        FRACTIONS))  # the wrapped copy masks what the reference keeps


@pytest.mark.parametrize("wrap", list(WRAPPERS))
def test_wrapped_short_problem_is_found_with_score_one(wrap: str) -> None:
    detector = NGramDetector()
    detector.index([NINE_HALVES, FRACTIONS, "Find the area of a triangle with sides 13, 14 "
                    "and 15 when the triangle is drawn on a square grid of unit squares."])
    found = detector.query([WRAPPERS[wrap](NINE_HALVES), WRAPPERS[wrap](FRACTIONS)])
    assert [(m.ref, m.score) for m in found[0]] == [(0, 1.0)]
    assert [(m.ref, m.score) for m in found[1]] == [(1, 1.0)]


def test_other_numbers_or_a_fragment_are_not_contained() -> None:
    detector = NGramDetector()
    detector.index([NINE_HALVES, "Simplify $\\sqrt{242}$."])
    found = detector.query([
        WRAPPERS["chatml"]("What is $\\frac{7}{2}$ expressed as a decimal?"),  # other numbers
        WRAPPERS["chatml"]("What is $\\frac{9}{2}$?"),  # part of the problem only
        # under min_contained tokens (3): found only as an exact copy
        "First simplify $\\sqrt{242}$, then add the square root of 8 to it and double it.",
        "Simplify $\\sqrt{242}$."])
    assert found[:3] == [[], [], []]
    assert [m.ref for m in found[3]] == [1]


def test_earlier_only_finds_an_earlier_short_row_inside_a_later_one() -> None:
    texts = [NINE_HALVES, WRAPPERS["instruction"](NINE_HALVES), WRAPPERS["chatml"](NINE_HALVES)]
    index = ShortTextIndex()
    index.index(texts, [True, False, False])
    assert index.query(texts, earlier_only=True) == [[], [0], [0]]
    assert index.query(texts) == [[0], [0], [0]]
    with pytest.raises(ValueError, match="min_tokens"):
        ShortTextIndex(0)


def test_decontam_removes_wrapped_short_math500_problems_and_spares_other_questions() -> None:
    math500 = load_tasks("math500")
    short = [t for t in math500 if len(number_tokens(t.problem)) >= 4
             and (len(fingerprint(t.problem)) < 13 or keeps_numbers(fingerprint(t.problem)))]
    assert len(short) >= 100  # a fifth of MATH500
    against = [Item(t.id, t.problem, "math500", t.answer) for t in math500]
    rows = [Item(f"{wrap}-{t.id}", WRAPPERS[wrap](t.problem), answer=t.answer)
            for t in short[:40] for wrap in ("chatml", "instruction")]
    # the same short question inside a longer row that asks another one (another answer)
    other = Item("other", f"{NINE_HALVES} Then multiply that decimal by 1000 and subtract 4 "
                 "to get the number of marbles in the jar; how many marbles are there?",
                 answer="4496")
    report = decontaminate(rows + [other], against, make_detectors("ngram"))
    assert len(report.removed) == len(rows) and all(
        r.detector == "ngram" and r.score == 1.0 for r in report.removed)
    assert [rows[r.index].id.split("-", 1)[1] for r in report.removed] == [
        r.id.split("-", 1)[1] for r in rows]
    assert report.kept == [len(rows)] and report.spared[0].id == "other"


def test_dedup_keeps_the_short_row_and_drops_the_wrapped_copies() -> None:
    rows = [Item("short", NINE_HALVES), Item("distinct", FRACTIONS),
            Item("chat", WRAPPERS["chatml"](NINE_HALVES)),
            Item("llama", WRAPPERS["llama3"](FRACTIONS))]
    report = deduplicate(rows, make_detectors("ngram"))
    assert report.kept == [0, 1]
    assert [(r.id, r.matched) for r in report.removed] == [("chat", "short"),
                                                           ("llama", "distinct")]
