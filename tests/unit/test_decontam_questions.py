"""The same-story rule (agentmath.synth.questions): a near-match whose reference answers differ
and whose texts differ in more than their numbers asks another question, and is kept (spared)
by decontamination and dedup; everything else a detector matches is still removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentmath.cli.main import app
from agentmath.errors import DataError
from agentmath.grading import GradeResult
from agentmath.synth import questions
from agentmath.synth.decontam import decontaminate, deduplicate, make_detectors
from agentmath.synth.questions import asks_another_question
from agentmath.synth.rows import Item, read_rows

runner = CliRunner()
LEXICAL = "ngram,minhash"

STORY = ("A farmer keeps 12 cows and 7 goats in a field beside the river that runs past the old "
         "mill at the edge of the village. Every cow eats 3 bales of hay a day and every goat "
         "eats 1 bale of hay a day, and the farmer buys hay from his neighbour once a week. ")
COWS = STORY + "How many bales of hay do the cows eat in one day?"       # 36
GOATS = STORY + "How many bales of hay do the goats eat in one week?"    # 49
COWS_AGAIN = STORY + "In one day, how many bales of hay are eaten by the cows?"  # 36
RENUMBERED = COWS.replace("12 cows", "15 cows")                          # 45

MARBLES_SOURCE = ("I have a bag with yellow and blue marbles in it. At the moment, the ratio of "
                  "blue marbles to yellow marbles is 4:3. If I add 5 blue marbles and remove 3 "
                  "yellow marbles, the ratio will be 7:3. How many blue marbles were in the bag "
                  "before I added more?")
MARBLES_YELLOW = ("A bag has blue and yellow marbles in the ratio 4:3. After 5 blue marbles are "
                  "added and 3 yellow marbles removed the ratio is 7:3. How many yellow marbles "
                  "are in the bag now?")


@pytest.mark.parametrize(("text", "answer", "ref_text", "ref_answer", "spared"), [
    (MARBLES_YELLOW, "9", MARBLES_SOURCE, "16", True),       # another unknown asked
    (GOATS, "49", COWS, "36", True),
    (COWS_AGAIN, "36", COWS, "36", False),                   # a paraphrase: the same answer
    (COWS_AGAIN, "\\frac{72}{2}", COWS, "36", False),        # ... written another way
    (COWS_AGAIN, "0.5", COWS, "\\frac{1}{2}", False),
    (RENUMBERED, "45", COWS, "36", False),                   # only the numbers differ: a copy
    (COWS, "40", COWS, "36", False),                         # a verbatim copy, a wrong answer
    (GOATS, None, COWS, "36", False),                        # an answer missing: in doubt
    (GOATS, "49", COWS, None, False),
    (GOATS, "N/A", COWS, "36", False),                       # a placeholder is no answer
    (GOATS, "see the solution", COWS, "36", False),
    # a reworded copy filed with its answer in plain text: the same answer, so removed
    ("Convert the point (0, 3) from rectangular into polar coordinates, as (r, theta).",
     "(3, pi/2)", "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
     "\\left( 3, \\frac{\\pi}{2} \\right)", False),
    (COWS_AGAIN, "sqrt(1296)", COWS, "36", False),
])
def test_same_story_rule_on_hand_made_pairs(text: str, answer: str | None, ref_text: str,
                                            ref_answer: str | None, spared: bool) -> None:
    assert asks_another_question(text, answer, ref_text, ref_answer) is spared


def test_decontaminate_keeps_another_question_and_lists_it_as_spared() -> None:
    refs = [Item("b-cows", COWS, "bench", "36")]
    rows = [Item("goats", GOATS, answer="49"), Item("again", COWS_AGAIN, answer="36"),
            Item("renumbered", RENUMBERED, answer="45"), Item("no-answer", GOATS)]
    report = decontaminate(rows, refs, make_detectors(LEXICAL))
    assert [r.id for r in report.removed] == ["again", "renumbered", "no-answer"]
    assert report.kept == [0]
    # spared once, by the first detector that matched it, though both stages matched it
    assert [(s.id, s.detector, s.matched, s.source) for s in report.spared] == [
        ("goats", "ngram", "b-cows", "bench")]
    assert report.to_json()["spared"][0]["id"] == "goats"
    plain = decontaminate(rows, refs, make_detectors(LEXICAL), spare=None)
    assert len(plain.removed) == 4 and not plain.spared


def test_a_spared_match_does_not_hide_a_real_one() -> None:
    """A row matching two items, one asking another question and one its own question, is
    removed by the second; nothing is listed as spared for a removed row."""
    refs = [Item("b-goats", GOATS, "bench", "49"), Item("b-cows", COWS, "bench", "36")]
    report = decontaminate([Item("again", COWS_AGAIN, answer="36")], refs,
                           make_detectors("ngram"))
    assert [(r.id, r.matched) for r in report.removed] == [("again", "b-cows")]
    assert report.spared == []


def test_deduplicate_keeps_both_questions_of_one_story() -> None:
    rows = [Item("cows", COWS, answer="36"), Item("goats", GOATS, answer="49"),
            Item("again", COWS_AGAIN, answer="36")]
    report = deduplicate(rows, make_detectors(LEXICAL))
    assert report.kept == [0, 1]
    assert [(r.id, r.matched) for r in report.removed] == [("again", "cows")]
    assert [(s.id, s.matched) for s in report.spared] == [("goats", "cows")]
    plain = deduplicate(rows, make_detectors(LEXICAL), spare=None)
    assert plain.kept == [0]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_read_rows_takes_answers_as_text_and_names_a_bad_one(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "a.jsonl", [{"problem": "p1", "answer": 36},
                                         {"problem": "p2", "answer": " 4.5 "},
                                         {"problem": "p3"}, {"problem": "p4", "answer": None},
                                         {"problem": "p5", "sol": "7"}])
    assert [r.item.answer for r in read_rows(path)] == ["36", "4.5", None, None, None]
    assert [r.item.answer for r in read_rows(path, answer_field="sol")][-1] == "7"
    assert all(r.item.answer is None for r in read_rows(path, answer_field=None))
    bad = _jsonl(tmp_path / "b.jsonl", [{"problem": "p1", "answer": "1"},
                                        {"problem": "p2", "answer": [1, 2]}])
    with pytest.raises(DataError, match=r"b\.jsonl: line 2: field 'answer': must be a string"):
        read_rows(bad)


def test_cli_dedup_spares_another_question_unless_told_to_ignore_answers(
        tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "train.jsonl", [
        {"id": "cows", "problem": COWS, "solution_answer": "36"},
        {"id": "goats", "problem": GOATS, "solution_answer": "49"}])
    args = ["dedup", str(path), "--detectors", LEXICAL, "--answer-field", "solution_answer",
            "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kept"] == 2 and data["removed"] == []
    assert [(s["id"], s["matched"]) for s in data["spared"]] == [("goats", "cows")]
    result = runner.invoke(app, [*args, "--ignore-answers"])
    data = json.loads(result.stdout)
    assert data["kept"] == 1 and data["spared"] == []
    table = runner.invoke(app, args[:-1])
    assert table.exit_code == 0 and "asking another question" in table.output


@pytest.mark.parametrize("result", [
    GradeResult("49", False, timed_out=True),            # the check ran out of time
    GradeResult("49", False, error="worker crashed"),    # the check failed
    GradeResult("49", None),                             # an answer did not parse
])
def test_an_answer_check_that_could_not_decide_spares_nothing(
        monkeypatch: pytest.MonkeyPatch, result: GradeResult) -> None:
    monkeypatch.setattr(questions, "check", lambda gold, predicted: result)
    assert not asks_another_question(GOATS, "49", COWS, "36")
    monkeypatch.setattr(questions, "check", lambda gold, predicted: GradeResult("49", False))
    assert asks_another_question(GOATS, "49", COWS, "36")
