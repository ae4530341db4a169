"""The data engine on realistic teacher outputs: each check keeps or drops what it should,
real outputs replace simulated ones, records replay through the agent loop, and the funnel
accounts for every task (tests/fixtures/teacher.py holds the hand-written cases)."""

from __future__ import annotations

import json

import pytest

from agentmath.agent.loop import run_episode
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.formats import get_format
from agentmath.sandbox import SandboxPool
from agentmath.synth.config import ChecksConfig
from agentmath.synth.funnel import build_funnel
from agentmath.synth.judge import ConsistencyJudge
from agentmath.synth.pipeline import Pipeline
from agentmath.synth.teacher import TeacherConverter
from agentmath.tasks import Task
from tests.fixtures.teacher import CASES, FakeTeacher

pytestmark = pytest.mark.integration
BY_ID = {c.id: c for c in CASES}


@pytest.fixture
async def pool():
    async with SandboxPool(SandboxConfig(spare_workers=2, max_sessions=8)) as p:
        yield p


def _pipeline(pool: SandboxPool, fmt: str | None = "code_interpreter", **kw) -> Pipeline:
    return Pipeline(TeacherConverter(FakeTeacher()), pool,
                    None if fmt is None else get_format(fmt), **kw)


async def test_each_case_ends_where_it_should(pool: SandboxPool) -> None:
    pipeline = _pipeline(pool)
    outcomes = await pipeline.run([c.task() for c in CASES], concurrency=4)
    got = {o.id: (o.stage, o.reason) for o in outcomes}
    assert got == {c.id: (c.stage, c.reason) for c in CASES}
    funnel = build_funnel(outcomes, pipeline.enabled())
    assert funnel.total == len(CASES) and funnel.kept == sum(c.stage is None for c in CASES)
    rows = {r.stage: r for r in funnel.stages}
    assert rows["convert"].entered == len(CASES)
    assert rows["convert"].reasons == {"no_code": 1, "unparseable": 1}
    assert rows["format"].entered == len(CASES) - 2
    assert rows["answer"].reasons == {"wrong_answer": 1}
    assert not rows["consistency"].enabled
    mismatch = next(o for o in outcomes if o.id == "primes")
    assert "'26'" in mismatch.detail and "'25'" in mismatch.detail  # simulated vs real


async def test_real_outputs_replace_simulated_ones(pool: SandboxPool) -> None:
    fmt = get_format("code_interpreter")
    outcome = await _pipeline(pool).run_one(BY_ID["rounded"].task())
    assert outcome.kept
    outputs = [p["text"] for p in outcome.record["completion"] if not p["train"]]
    assert outputs == [fmt.render_call and "\n<interpreter>\n0.14285714285714285\n"
                       "</interpreter>\n"]
    text = "".join(p["text"] for p in outcome.record["completion"])
    assert "0.142857\n" not in text  # the teacher's rounded guess is gone


async def test_planned_mistake_keeps_its_real_error(pool: SandboxPool) -> None:
    outcome = await _pipeline(pool).run_one(BY_ID["fixed"].task())
    assert outcome.kept and outcome.tool_calls == 2
    outputs = [p["text"] for p in outcome.record["completion"] if not p["train"]]
    assert "NameError: name 'x' is not defined" in outputs[0]
    assert "[2, 3] 5" in outputs[1]


async def test_turning_a_check_off_lets_its_cases_through(pool: SandboxPool) -> None:
    tasks = [BY_ID[i].task() for i in ("trivial", "restated", "primes", "drift")]
    off = _pipeline(pool, checks=ChecksConfig(ast=False, outputs=False, answer=False))
    assert [o.kept for o in await off.run(tasks)] == [True, True, True, True]
    assert off.enabled() == ("convert", "format", "execute")


async def test_judge_drops_what_it_finds_inconsistent(pool: SandboxPool) -> None:
    class Judge:
        name = "judge"

        def __init__(self) -> None:
            self.seen: list[str] = []

        async def chat(self, messages, *, max_tokens=512, sampling=None, **extra) -> dict:
            view = messages[-1]["content"]
            self.seen.append(view)
            verdict = "INCONSISTENT" if "0.14285714285714285" in view else "CONSISTENT"
            return {"content": f"Checked each output.\nVERDICT: {verdict}"}

    judge = Judge()
    pipeline = _pipeline(pool, judge=ConsistencyJudge(judge))
    outcomes = await pipeline.run([BY_ID["gauss"].task(), BY_ID["rounded"].task()])
    assert [(o.stage, o.reason) for o in outcomes] == [(None, None),
                                                       ("consistency", "inconsistent")]
    assert "[output 1]\n5050" in judge.seen[0]  # the judge reads the REAL output


async def test_self_correction_turns_around_real_errors(pool: SandboxPool) -> None:
    reply = ("First the total.\n<code>\ntotal = sum(range(1, 101))\nprint(total)\n</code>\n"
             "<interpreter>\n5050\n</interpreter>\nHalf of it:\n<code>\nhalf = total // 2\n"
             "print(half)\n</code>\n<interpreter>\n2525\n</interpreter>\nSo \\boxed{2525}.")

    class Teacher(FakeTeacher):
        async def chat(self, messages, **kw) -> dict:
            return {"content": reply, "finish_reason": "stop"}

    task = Task("half", "What is half the sum of 1..100?", "2525", {"solution": "5050 / 2"})
    pipeline = Pipeline(TeacherConverter(Teacher()), pool, get_format("code_interpreter"),
                        correction_rate=1.0)
    outcome = await pipeline.run_one(task)
    assert outcome.kept and outcome.self_corrections == 1 and outcome.tool_calls == 3
    outputs = [p["text"] for p in outcome.record["completion"] if not p["train"]]
    assert "NameError" in outputs[1] and "2525" in outputs[2]
    model_text = "".join(p["text"] for p in outcome.record["completion"] if p["train"])
    assert model_text.count("half = total // 2") == 1  # the faulty call has the typo
    again = await pipeline.run_one(task)
    assert again.record == outcome.record  # seeded by the task id: a resume plans the same
    none = Pipeline(TeacherConverter(Teacher()), pool, get_format("code_interpreter"))
    assert (await none.run_one(task)).self_corrections == 0


@pytest.mark.parametrize("name", ["markdown", "tool_call", "deepmath", "code_interpreter"])
async def test_records_replay_through_the_agent_loop(pool: SandboxPool, name: str) -> None:
    fmt = get_format(name)
    task = BY_ID["fixed"].task()
    outcome = await _pipeline(pool, name).run_one(task)
    assert outcome.kept
    turns = [p["text"] for p in outcome.record["completion"] if p["train"]]
    traj = await run_episode(task.problem, ScriptedBackend(turns), fmt, pool,
                             LoopConfig(max_output_chars=4000))
    assert traj.messages == outcome.record["messages"]
    assert traj.completion_text == "".join(p["text"] for p in outcome.record["completion"])
    assert traj.finish_reason == "answered" and traj.answer == task.answer


async def test_native_records(pool: SandboxPool) -> None:
    outcome = await _pipeline(pool, None).run_one(BY_ID["state"].task())
    assert outcome.kept
    roles = [m["role"] for m in outcome.record["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    call = outcome.record["messages"][2]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"])["code"].startswith("a = 2**10")
