"""Code injection end to end: plans parse in every format, the real sandbox verifies them,
broken trajectories are dropped with their reason, and the loop replays a record exactly."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from agentmath.agent.loop import build_messages, run_episode
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.errors import DataError
from agentmath.formats import get_format
from agentmath.jsonl import read_jsonl, write_jsonl
from agentmath.sandbox import ExecResult, SandboxPool
from agentmath.synth.converters import RuleBasedConverter
from agentmath.synth.inject import ConversionReport, inject, text_only_example
from agentmath.synth.pieces import Piece
from agentmath.synth.records import call_text
from agentmath.tasks import Task
from agentmath.tasks.synthetic import Step, generate_problems, steps_of

pytestmark = pytest.mark.integration
FORMATS = ("markdown", "tool_call", "code_interpreter", "openai_tools")
PROBLEMS = generate_problems(12, seed=11)


@pytest.fixture
async def pool():
    async with SandboxPool(SandboxConfig(spare_workers=1, max_sessions=8)) as p:
        yield p


def _joined(record: dict) -> str:
    return "".join(piece["text"] for piece in record["completion"])


class WrongExpression(RuleBasedConverter):
    """Writes ``+ 1`` into the last step's snippet: it runs, but prints the wrong value."""

    async def convert(self, task: Task) -> list[Piece]:
        pieces = await super().convert(task)
        last = max(i for i, p in enumerate(pieces) if p.kind == "code")
        pieces[last] = dataclasses.replace(
            pieces[last], text=pieces[last].text.replace("\nprint(", " + 1\nprint("))
        return pieces


class ForgetsState(RuleBasedConverter):
    """Refers to a name no snippet defined: the snippet raises NameError."""

    def code(self, step: Step) -> str:
        return f"{step.name} = undefined_name + 1\nprint({step.name})"


class NoPlan(RuleBasedConverter):
    async def convert(self, task: Task) -> list[Piece]:
        return []


class AnswersEarly(RuleBasedConverter):
    """Puts a boxed answer before the first call: the loop would stop there."""

    def lead(self, step: Step) -> str:
        return f"Guess: \\boxed{{{step.value}}}. " + super().lead(step)


@pytest.mark.parametrize("name", FORMATS)
def test_every_call_is_found_by_find_call(name: str) -> None:
    fmt = get_format(name)
    for problem in PROBLEMS:
        text = ""
        pieces = asyncio.run(RuleBasedConverter().convert(problem))
        assert pieces is not None and pieces[-1].kind == "text"
        codes = [p for p in pieces if p.kind == "code"]
        assert len(codes) == len(steps_of(problem))
        for piece, step in zip(pieces[::2], steps_of(problem), strict=False):
            assert str(step.value) not in piece.text  # the lead leaves the result out
        for piece in pieces:
            if piece.kind == "text":
                text += piece.text
                continue
            text += call_text(fmt, piece.text)
            call = fmt.find_call(text)
            assert call is not None and call.code == piece.text
            assert not text[call.end:].strip()
            assert any(text.endswith(stop) for stop in fmt.stop_strings) or \
                text.endswith(fmt.render_call(piece.text))
            text += fmt.render(ExecResult(stdout="1\n"))
        assert fmt.find_call(text) is None  # the final text holds no unanswered call


async def test_inject_keeps_verified_trajectories(pool: SandboxPool) -> None:
    fmt = get_format("code_interpreter")
    report = await inject(PROBLEMS, RuleBasedConverter(), fmt, pool, concurrency=4)
    assert report.kept == len(PROBLEMS) and not report.dropped and not report.failures
    for record, problem in zip(report.records, PROBLEMS, strict=True):
        assert set(record) == {"id", "messages", "completion", "answer"}
        assert record["id"] == problem.id and record["answer"] == problem.answer
        assert record["messages"] == build_messages(problem.problem, fmt)
        flags = [piece["train"] for piece in record["completion"]]
        assert flags == [True, False] * len(steps_of(problem)) + [True]
        outputs = [p["text"] for p in record["completion"] if not p["train"]]
        assert outputs == [fmt.render(ExecResult(stdout=f"{s.value}\n"), max_chars=2000)
                           for s in steps_of(problem)]
        assert record["completion"][-1]["text"].endswith(f"\\boxed{{{problem.answer}}}.")
    assert "kept 12/12" in report.summary()


async def test_state_carries_across_snippets(pool: SandboxPool) -> None:
    problem = next(p for p in PROBLEMS if len(steps_of(p)) == 3)
    converter = RuleBasedConverter()
    later = converter.code(steps_of(problem)[1])
    assert steps_of(problem)[0].name in later and str(steps_of(problem)[0].value) not in later
    alone = await pool.run(later)  # a fresh session does not know the earlier name
    assert alone.error_type == "NameError"
    report = await inject([problem], converter, get_format("markdown"), pool)
    assert report.kept == 1


async def test_broken_trajectories_are_dropped_with_reasons(pool: SandboxPool) -> None:
    fmt = get_format("tool_call")
    good, wrong_expr, no_state, tampered, bad_gold, no_plan, early = PROBLEMS[:7]
    steps = list(tampered.meta["steps"])
    steps[0] = dataclasses.replace(steps[0], value=steps[0].value + 7)
    tampered = dataclasses.replace(tampered, meta={**tampered.meta, "steps": tuple(steps)})
    bad_gold = dataclasses.replace(bad_gold, answer=str(int(bad_gold.answer) + 1))
    cases = [(good, RuleBasedConverter()), (wrong_expr, WrongExpression()),
             (no_state, ForgetsState()), (tampered, RuleBasedConverter()),
             (bad_gold, RuleBasedConverter()), (no_plan, NoPlan()), (early, AnswersEarly())]
    report = ConversionReport()
    for problem, converter in cases:
        part = await inject([problem], converter, fmt, pool)
        report.records += part.records
        report.dropped.update(part.dropped)
        report.failures += part.failures
    assert [r["id"] for r in report.records] == [good.id]
    assert dict(report.dropped) == {"output_mismatch": 2, "error": 1, "wrong_answer": 1,
                                    "no_plan": 1, "malformed": 1}
    by_id = {f["id"]: f for f in report.failures}
    assert by_id[no_state.id]["reason"] == "error" and "NameError" in by_id[no_state.id]["detail"]
    assert by_id[wrong_expr.id]["reason"] == "output_mismatch"
    assert by_id[tampered.id]["reason"] == "output_mismatch"
    assert by_id[bad_gold.id]["reason"] == "wrong_answer"
    assert by_id[early.id]["reason"] == "malformed"
    assert report.total == len(cases)


async def test_mixed_batch_counts_every_problem(pool: SandboxPool) -> None:
    report = await inject(PROBLEMS, WrongExpression(), get_format("markdown"), pool)
    assert report.kept == 0 and report.dropped["output_mismatch"] == len(PROBLEMS)
    assert len(report.failures) == len(PROBLEMS)


@pytest.mark.parametrize("name", FORMATS)
async def test_agent_loop_replays_the_completion_exactly(name: str, pool: SandboxPool) -> None:
    """Feed the record's model pieces to the real loop: its trajectory must be the record."""
    fmt = get_format(name)
    problems = PROBLEMS[:3]
    report = await inject(problems, RuleBasedConverter(), fmt, pool)
    assert report.kept == len(problems)
    for record, problem in zip(report.records, problems, strict=True):
        turns = [p["text"] for p in record["completion"] if p["train"]]
        traj = await run_episode(problem.problem, ScriptedBackend(turns), fmt, pool,
                                 LoopConfig())
        assert traj.messages == record["messages"]
        assert traj.completion_text == _joined(record)
        sources = [s.source for s in traj.segments if s.source != "prompt"]
        assert sources == ["model" if p["train"] else "tool" for p in record["completion"]]
        assert traj.finish_reason == "answered" and traj.answer == problem.answer


async def test_custom_system_prompt_reaches_the_messages(pool: SandboxPool) -> None:
    fmt = get_format("code_interpreter")
    report = await inject(PROBLEMS[:1], RuleBasedConverter(), fmt, pool,
                          system_prompt="Use the tool.")
    assert report.records[0]["messages"][0] == {"role": "system", "content": "Use the tool."}


def test_text_only_example() -> None:
    problem = PROBLEMS[0]
    record = text_only_example(problem, "Think step by step.")
    assert record["messages"] == build_messages(problem.problem, get_format("markdown"),
                                                "Think step by step.")
    assert record["completion"] == [{"text": problem.solution, "train": True}]
    assert record["answer"] == problem.answer and record["id"] == problem.id


def test_jsonl_round_trip_and_errors(tmp_path: Path) -> None:
    records = [text_only_example(p) for p in PROBLEMS[:3]]
    path = tmp_path / "sub" / "out.jsonl"
    assert write_jsonl(records, path) == 3
    assert read_jsonl(path) == records
    path.write_text(path.read_text() + "{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"out\.jsonl:4: invalid JSON"):
        read_jsonl(path)
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"out\.jsonl:1: expected a JSON object"):
        read_jsonl(path)
    with pytest.raises(DataError, match="cannot read"):
        read_jsonl(tmp_path / "missing.jsonl")


class FenceInCode(RuleBasedConverter):
    """A snippet holding the markdown stop string: generation would stop inside it."""

    def code(self, step: Step) -> str:
        return f"s = '''\n```\n'''\n{super().code(step)}"


async def test_snippet_that_the_format_cannot_carry_is_dropped(pool: SandboxPool) -> None:
    report = await inject(PROBLEMS[:1], FenceInCode(), get_format("markdown"), pool)
    assert report.kept == 0 and dict(report.dropped) == {"malformed": 1}
    report = await inject(PROBLEMS[:1], FenceInCode(), get_format("code_interpreter"), pool)
    assert report.kept == 1


async def test_native_records_replay_through_the_chat_loop(pool: SandboxPool) -> None:
    """A native record's assistant turns, replayed by the chat loop, give back the record's
    conversation exactly: same prompt, same tool messages (the sandbox's real output)."""
    from agentmath.agent.loop import run_chat_episode
    from agentmath.formats.openai_tools import tool_spec
    from tests.integration.test_chat_loop import FakeChatBackend

    problems = PROBLEMS[:3]
    report = await inject(problems, RuleBasedConverter(), get_format("markdown"), pool,
                          native=True)
    assert report.kept == len(problems)
    for record, problem in zip(report.records, problems, strict=True):
        assert "completion" not in record and record["tools"] == [tool_spec()]
        messages = record["messages"]
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        assert len([m for m in messages if m["role"] == "tool"]) == len(steps_of(problem))
        replies = [{**m, "finish_reason": "tool_calls" if m.get("tool_calls") else "stop"}
                   for m in messages if m["role"] == "assistant"]
        backend = FakeChatBackend(replies)
        traj = await run_chat_episode(problem.problem, backend, pool)
        assert traj.finish_reason == "answered" and traj.answer == problem.answer
        assert backend.seen[-1] == messages[:-1]  # the whole conversation before the answer
        step_values = [str(s.value) for s in steps_of(problem)]
        assert [t.result.stdout.strip() for t in traj.tool_calls] == step_values


async def test_native_records_drop_like_text_records(pool: SandboxPool) -> None:
    report = await inject(PROBLEMS[:4], WrongExpression(), get_format("markdown"), pool,
                          native=True)
    assert report.kept == 0 and report.dropped["output_mismatch"] == 4


async def test_native_record_that_answers_before_a_call_is_dropped(pool: SandboxPool) -> None:
    report = await inject(PROBLEMS[:3], AnswersEarly(), get_format("markdown"), pool,
                          native=True)
    assert report.kept == 0 and report.dropped["malformed"] == 3
