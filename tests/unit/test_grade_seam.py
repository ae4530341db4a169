"""The grading seam: one typed grade (correct / wrong / error with a reason) that eval records
and the RL accuracy reward pays for, with the outcomes each had before the seam existed."""

from __future__ import annotations

import pytest

from agentmath.agent.trajectory import Segment, Trajectory
from agentmath.errors import GradingError
from agentmath.grading import Grade, GradeResult, Verdict, agrade_answer, grade_answer
from agentmath.grading import answer as grade_module
from agentmath.rl import rewards
from agentmath.tasks import Task


def test_verdicts_of_grade_results() -> None:
    assert Grade.from_result(GradeResult("3", True)).verdict is Verdict.CORRECT
    wrong = Grade.from_result(GradeResult("4", False))
    assert wrong.verdict is Verdict.WRONG and wrong.correct is False and wrong.reason is None
    timeout = Grade.from_result(GradeResult("4", False, True))
    assert timeout.verdict is Verdict.ERROR and timeout.reason == "grading timed out"
    assert timeout.correct is False and timeout.timed_out  # eval's on-disk value: false
    gold = Grade.from_result(GradeResult("4", None))
    assert gold.verdict is Verdict.ERROR and gold.correct is None and gold.ungradable
    assert not any(g.is_correct for g in (wrong, timeout, gold))


def test_grade_answer_right_wrong_and_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert grade_answer("3", r"so \boxed{3}") == Grade(Verdict.CORRECT, "3")
    assert grade_answer("3", r"so \boxed{4}").verdict is Verdict.WRONG

    def refuse(*args: object, **kwargs: object) -> GradeResult:
        raise GradingError("gold too long")

    monkeypatch.setattr(grade_module, "grade", refuse)
    refused = grade_answer("3", r"\boxed{3}", answer="3")
    assert refused == Grade(Verdict.ERROR, "3", "gold too long", ungradable=True)
    assert refused.correct is None  # as eval recorded a GradingError before the seam


def test_a_timeout_keeps_the_loops_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    async def timed_out(*args: object, **kwargs: object) -> GradeResult:
        return GradeResult(None, False, True)

    monkeypatch.setattr(grade_module, "agrade", timed_out)
    import asyncio

    got = asyncio.run(agrade_answer("3", "long text", answer="3"))
    assert got.verdict is Verdict.ERROR and got.extracted == "3" and got.correct is False


def test_the_reward_and_eval_read_one_grade() -> None:
    task = Task("t", "q", "3")
    traj = Trajectory("q", [Segment("prompt", "q", [0]), Segment("model", r"\boxed{3}", [1])],
                      finish_reason="answered", answer="3")
    assert rewards.accuracy_reward(task, traj) == 1.0
    assert traj.grade == grade_answer("3", traj.model_text, answer="3")
    wrong = Trajectory("q", [Segment("model", r"\boxed{5}", [1])], finish_reason="answered")
    assert rewards.accuracy_reward(task, wrong) == 0.0 and wrong.grade is not None
    assert wrong.grade.verdict is Verdict.WRONG


def test_grade_round_trips_and_old_meta_cache_reads() -> None:
    g = Grade(Verdict.ERROR, "4", "grading timed out", timed_out=True)
    assert Grade.from_dict(g.to_dict()) == g
    old = Trajectory.from_dict({"problem": "q", "segments": [], "finish_reason": "answered",
                                "meta": {"correct": True, "extracted": "3", "format": "f"}})
    assert old.grade == Grade(Verdict.CORRECT, "3") and old.meta == {"format": "f"}
    again = Trajectory.from_dict(old.to_dict())
    assert again.grade == old.grade
