"""The agent loop end to end: real tokenizer, real sandbox, scripted and real tiny models."""

from __future__ import annotations

import json

import pytest

from agentmath.backends.base import SamplingParams
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.formats import get_format
from agentmath.loop import run_episode
from agentmath.sandbox import SandboxPool
from agentmath.trajectory import Trajectory
from tests.fixtures.backends import RecordingBackend, ScriptedBackend

pytestmark = pytest.mark.integration

TURN_1 = "Let me compute.\n<code>\nx = 123 * 456\nprint(x)\n</code>\nignored"
TURN_2 = "So x is known.\n<code>\nx + 1\n</code>"
FINAL = "The answer is \\boxed{56089}."


@pytest.fixture(scope="module")
def tokenizer():
    from agentmath.models.tiny import build_tokenizer

    corpus = [TURN_1, TURN_2, FINAL, "<interpreter>\n56088\n</interpreter>", "system user"] * 20
    return build_tokenizer(corpus, vocab_size=400)


@pytest.fixture
async def pool():
    async with SandboxPool(SandboxConfig(spare_workers=1, max_sessions=8)) as p:
        yield p


def assert_token_exact(traj: Trajectory, rec: RecordingBackend) -> None:
    """Every context sent is a prefix of the final ids; every model segment is what was sampled."""
    ids = traj.token_ids
    assert rec.sent, "the backend was never called"
    for sent in rec.sent:
        assert ids[: len(sent)] == sent
    model_segments = [s.token_ids for s in traj.segments if s.source == "model"]
    assert model_segments == rec.received
    assert len(traj.loss_mask) == len(ids)
    for seg_start, seg in _offsets(traj):
        expected = 1 if seg.source == "model" else 0
        assert traj.loss_mask[seg_start: seg_start + len(seg.token_ids)] == \
            [expected] * len(seg.token_ids)


def _offsets(traj: Trajectory):
    pos = 0
    for seg in traj.segments:
        yield pos, seg
        pos += len(seg.token_ids)


async def test_episode_runs_tools_with_state_and_answers(tokenizer, pool):
    rec = RecordingBackend(ScriptedBackend(tokenizer, [TURN_1, TURN_2, FINAL]))
    traj = await run_episode("What is 123*456+1?", rec, get_format("code_interpreter"), pool)
    assert traj.finish_reason == "answered"
    assert traj.answer == "56089"
    tools = traj.tool_calls
    assert [t.code for t in tools] == ["x = 123 * 456\nprint(x)", "x + 1"]
    assert tools[0].result.stdout == "56088\n"
    assert tools[1].result.value == "56089"  # state persisted across calls
    assert "<interpreter>\n56089\n</interpreter>" in tools[1].text
    assert_token_exact(traj, rec)
    assert len(rec.sent) == 3


async def test_trajectory_json_round_trip_is_lossless(tokenizer, pool):
    traj = await run_episode("q", ScriptedBackend(tokenizer, [TURN_1, FINAL]),
                             get_format("code_interpreter"), pool)
    again = Trajectory.from_json(traj.to_json())
    assert again == traj
    assert json.loads(again.to_json()) == json.loads(traj.to_json())
    assert again.token_ids == traj.token_ids and again.loss_mask == traj.loss_mask
    assert again.logprobs == traj.logprobs


async def test_tool_budget_ends_episode(tokenizer, pool):
    backend = ScriptedBackend(tokenizer, [TURN_1, TURN_1, TURN_1, FINAL])
    traj = await run_episode("q", backend, get_format("code_interpreter"), pool,
                             LoopConfig(max_tool_calls=2))
    assert traj.finish_reason == "tool_budget"
    assert len(traj.tool_calls) == 2


async def test_token_budget_ends_episode(tokenizer, pool):
    backend = ScriptedBackend(tokenizer, [TURN_1, TURN_2, FINAL])
    traj = await run_episode("q", backend, get_format("code_interpreter"), pool,
                             LoopConfig(max_model_tokens=30))
    assert traj.finish_reason == "token_budget"
    assert traj.model_tokens <= 30


async def test_eos_without_answer(tokenizer, pool):
    traj = await run_episode("q", ScriptedBackend(tokenizer, ["I do not know."]),
                             get_format("code_interpreter"), pool)
    assert traj.finish_reason == "eos"
    assert traj.answer is None


async def test_backend_failure_is_data_not_a_crash(tokenizer, pool):
    backend = ScriptedBackend(tokenizer, [TURN_1, FINAL], fail_at=1)
    traj = await run_episode("q", backend, get_format("code_interpreter"), pool)
    assert traj.finish_reason == "error"
    assert "server unavailable" in traj.error
    assert len(traj.tool_calls) == 1  # what happened before the failure is kept


async def test_tool_error_and_timeout_are_shown_to_the_model(tokenizer, pool):
    turns = ["<code>\n1/0\n</code>", "<code>\nwhile True: pass\n</code>", FINAL]
    traj = await run_episode("q", ScriptedBackend(tokenizer, turns),
                             get_format("code_interpreter"), pool,
                             LoopConfig(tool_timeout_s=0.5))
    first, second = traj.tool_calls
    assert "ZeroDivisionError" in first.text
    assert second.result.timed_out and "Timeout" in second.text
    assert traj.finish_reason == "answered"
    assert traj.num_tool_errors == 2


async def test_text_only_run_without_sandbox(tokenizer):
    traj = await run_episode("q", ScriptedBackend(tokenizer, [TURN_1]),
                             get_format("code_interpreter"), None)
    assert traj.finish_reason == "tool_budget"
    assert traj.tool_calls == []


@pytest.mark.parametrize("fmt", ["markdown", "tool_call", "code_interpreter", "openai_tools"])
async def test_every_format_runs_in_the_loop(tokenizer, pool, fmt):
    f = get_format(fmt)
    turn = "Compute.\n" + f.render_call("y = 6 * 7\ny") + "\n"
    traj = await run_episode("q", ScriptedBackend(tokenizer, [turn, "\\boxed{42}"]), f, pool)
    assert traj.finish_reason == "answered", traj.error
    assert traj.tool_calls[0].result.value == "42"
    assert traj.answer == "42"


async def test_real_model_token_exact(tool_model_dir, pool):
    """A real (tiny, trained) model and tokenizer: ids sent at every turn are the recorded prefix."""
    from agentmath.backends.hf import HFBackend
    from tests.fixtures.tool_model import SYSTEM

    inner = HFBackend(str(tool_model_dir))
    rec = RecordingBackend(inner)
    traj = await run_episode(
        "Compute 123 * 456.", rec, get_format("code_interpreter"), pool,
        LoopConfig(system_prompt=SYSTEM, max_model_tokens=200),
        SamplingParams(temperature=0.0))
    await inner.aclose()
    assert len(traj.tool_calls) >= 1, traj.completion_text
    assert traj.tool_calls[0].result.stdout.strip() == "56088"
    assert len(rec.sent) >= 2
    assert_token_exact(traj, rec)
    model = [s for s in traj.segments if s.source == "model"]
    assert all(s.logprobs is not None and len(s.logprobs) == len(s.token_ids) for s in model)
