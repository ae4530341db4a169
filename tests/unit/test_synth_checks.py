"""The data engine's pure parts: the AST filter, output agreement, parsing a teacher's reply,
self-correction planning, the judge's verdict, the funnel, the teacher prompt file, config."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmath.errors import ConfigError
from agentmath.formats import get_format
from agentmath.synth.checks import AstLimits, check_snippet, outputs_agree
from agentmath.synth.config import SynthConfig
from agentmath.synth.funnel import build_funnel
from agentmath.synth.judge import parse_verdict
from agentmath.synth.pieces import Piece, Rejected
from agentmath.synth.pipeline import STAGES, Outcome
from agentmath.synth.records import check_plan
from agentmath.synth.selfcorrect import plan_corrections
from agentmath.synth.teacher import TeacherPrompt, parse_trajectory

LIMITS = AstLimits()


def _reason(code: str, before: str = "", simulated: str | None = None,
            limits: AstLimits = LIMITS) -> str | None:
    try:
        check_snippet(code, before, limits, 1, simulated)
    except Rejected as exc:
        assert exc.stage == "ast"
        return exc.reason
    return None


@pytest.mark.parametrize("code", [
    "print(42)", "x = 5\nprint(x)", "print('The answer is', 12)", "42", "answer = 'yes'",
    "print(f'{3}')", "pass", "x = -5\nprint(x)",
])
def test_trivial_snippets_are_rejected(code: str) -> None:
    assert _reason(code) == "trivial"


@pytest.mark.parametrize("code", [
    "print(3827 * 46)", "import math\nprint(math.comb(10, 3))", "total = sum(range(101))",
    "xs = [1, 2]\nprint(xs[0])", "for i in range(3):\n    print(i)", "print(abs(-3))",
    "from sympy import symbols\nx = symbols('x')", "print(-x)", "print(total)",
    "print(f'{total} apples')", "roots",
])
def test_snippets_that_compute_pass(code: str) -> None:
    assert _reason(code) is None


def test_restating_the_text_is_rejected_but_new_arithmetic_is_not() -> None:
    assert _reason("print(12 * 13)", "We have 12 * 13 = 156. Check:", "156") == "restates_text"
    assert _reason("print(12 * 13)", "We have 12 * 13 = 156.", "156") == "restates_text"
    assert _reason("print(12 * 13)", "Multiply 12 by 13:", "156") is None
    assert _reason("a = 12\nprint(a * 13)", "12 * 13 = 156", "156") is None  # uses state


def test_size_depth_and_syntax_limits() -> None:
    assert _reason("print(1 +)") == "syntax_error"
    long = "\n".join(f"x{i} = {i} + 1" for i in range(100))
    assert _reason(long) == "too_long"
    assert _reason("x = 1 + 1\n" + "#" * 5000) == "too_long"
    deep = "print(" + "abs(" * 60 + "1 + 1" + ")" * 60 + ")"
    assert _reason(deep, limits=AstLimits(max_depth=40)) == "too_deep"


@pytest.mark.parametrize("simulated,real,ok", [
    ("156", "156", True), ("156", "155", False), ("661807980", "661807981", False),
    ("0.142857", "0.14285714285714285", True), ("3.14", "3.141592653589793", True),
    ("3.15", "3.141592653589793", False), ("156", "156.0", True), ("1,234,567", "1234567", True),
    ("[2, 3]", "[2, 3, 5]", False), ("[2, 3, ...]", "[2, 3, 5]", True),
    ("x = 4, y = 5", "y = 5\nx = 4", True), ("True", "False", False), ("True", "True\n", True),
    ("{2: 3, 3: 2}", "{2: 3, 3: 2, 5: 1}", False), ("1.5e-07", "1.4999999e-07", True),
    ("-3", "-3", True), ("-3", "3", False),
])
def test_outputs_agree(simulated: str, real: str, ok: bool) -> None:
    assert outputs_agree(simulated, real) is ok


def test_parse_trajectory_pieces_and_simulated_outputs() -> None:
    reply = ("Let me compute.\n\n<code>\n```python\nx = 2 ** 10\nprint(x)\n```\n</code>\n"
             "<interpreter>\n1024\n</interpreter>\n\nSo x is 1024.\n<code>\nprint(x + 1)\n"
             "</code>\nThe answer is \\boxed{1025}.\n")
    pieces = parse_trajectory(reply)
    assert pieces == [Piece("text", "Let me compute.\n"),
                      Piece("code", "x = 2 ** 10\nprint(x)", "1024"),
                      Piece("text", "So x is 1024.\n"),
                      Piece("code", "print(x + 1)", None),
                      Piece("text", "The answer is \\boxed{1025}.")]
    markdown = ("Compute:\n```python\nprint(7 * 6)\n```\n```output\n42\n```\nSo \\boxed{42}.")
    assert [p.simulated for p in parse_trajectory(markdown, get_format("markdown"))
            if p.kind == "code"] == ["42"]
    for bad, reason in (("no code here \\boxed{1}", "no_code"),
                        ("<code>\nprint(1)\n", "unparseable")):
        with pytest.raises(Rejected) as exc:
            parse_trajectory(bad)
        assert (exc.value.stage, exc.value.reason) == ("convert", reason)


def test_check_plan_replays_the_loop_parsing() -> None:
    fmt = get_format("code_interpreter")
    ok = [Piece("text", "Go.\n"), Piece("code", "print(1 + 1)"), Piece("text", "\\boxed{2}")]
    check_plan(ok, fmt)
    early = [Piece("text", "\\boxed{2} first.\n"), *ok[1:]]
    late_call = [*ok[:2], Piece("text", "and <code>\nprint(3)\n</code>")]
    for plan in (early, late_call, [Piece("text", "\\boxed{2}")]):
        with pytest.raises(Rejected) as exc:
            check_plan(plan, fmt)
        assert exc.value.stage == "format"


def test_self_correction_is_seeded_and_realistic() -> None:
    pieces = [Piece("text", "a\n"), Piece("code", "import math\nbig = math.factorial(20)"),
              Piece("text", "b\n"), Piece("code", "print(big % 7)")]
    chosen = [plan_corrections(pieces, f"t{i}", rate=0.3) for i in range(400)]
    share = sum(bool(c) for c in chosen) / len(chosen)
    assert 0.22 < share < 0.38  # about the rate
    assert plan_corrections(pieces, "t1", rate=0.3) == chosen[1]  # deterministic
    assert plan_corrections(pieces, "t1", rate=0.0) == {}
    kinds = {fix.kind for c in chosen for fix in c.values()}
    assert kinds == {"typo", "missing_import"}
    for c in chosen:
        for index, fix in c.items():
            if fix.kind == "typo":
                assert index == 1 and fix.orig == "big" and fix.bad in fix.faulty
            else:
                assert index == 0 and "import math" not in fix.faulty


def test_parse_verdict() -> None:
    assert parse_verdict("ok\nVERDICT: CONSISTENT") is True
    assert parse_verdict("VERDICT: **INCONSISTENT** (output 2)") is False
    assert parse_verdict("verdict: consistent ... VERDICT: INCONSISTENT") is False
    assert parse_verdict("Looks consistent to me.") is None


def test_funnel_counts_entries_and_reasons() -> None:
    outcomes = [Outcome("a"), Outcome("b", "convert", "no_code", "x"),
                Outcome("c", "answer", "wrong_answer", "y"),
                Outcome("d", "answer", "wrong_answer", "z"), Outcome("e", tool_calls=3)]
    funnel = build_funnel(outcomes, [s for s in STAGES if s != "consistency"],
                          examples_per_reason=1)
    rows = {r.stage: r for r in funnel.stages}
    assert (funnel.total, funnel.kept, funnel.mean_tool_calls) == (5, 2, 1.5)
    assert (rows["convert"].entered, rows["convert"].left) == (5, 1)
    assert (rows["format"].entered, rows["answer"].entered, rows["answer"].left) == (4, 4, 2)
    assert rows["answer"].reasons == {"wrong_answer": 2} and len(rows["answer"].examples) == 1
    assert not rows["consistency"].enabled and rows["consistency"].entered == 0


def test_teacher_prompt_file(tmp_path: Path) -> None:
    path = tmp_path / "prompt.toml"
    path.write_text('system = "Be a teacher."\nuser = "P: {problem}\\nS: {solution}"\n'
                    '[[examples]]\nproblem = "1+1"\nsolution = "2"\nanswer = "2"\n'
                    'trajectory = "<code>\\nprint(1 + 1)\\n</code>"\n')
    prompt = TeacherPrompt.load(path)
    from agentmath.tasks import Task

    messages = prompt.messages(Task("t", "2+3", "5", {"solution": "five"}))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1]["content"] == "P: 2+3\nS: five"
    path.write_text('[[examples]]\nproblem = "1+1"\n')
    with pytest.raises(ConfigError, match="examples\\[1\\]"):
        TeacherPrompt.load(path)
    path.write_text('usr = "typo"\n')
    with pytest.raises(ConfigError, match="usr"):
        TeacherPrompt.load(path)


def test_config_needs_a_teacher_and_pins_identity() -> None:
    with pytest.raises(ValueError, match="teacher.model"):
        SynthConfig(input="x.jsonl")
    a = SynthConfig(input="x.jsonl", teacher={"model": "m", "base_url": "http://a"})
    b = a.model_copy(update={"concurrency": 64})
    assert a.identity() == b.identity()  # concurrency may change on resume
    c = SynthConfig(input="x.jsonl", teacher={"model": "m"}, format="native")
    assert a.identity() != c.identity()
