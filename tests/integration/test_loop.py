"""The agent loop end to end: real tokenizer, real sandbox, scripted and real tiny models."""

from __future__ import annotations

import json

import pytest

from agentmath.agent.loop import run_episode
from agentmath.agent.trajectory import Trajectory
from agentmath.backends.base import SamplingParams
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.formats import get_format
from agentmath.sandbox import SandboxPool
from tests.fixtures.backends import RecordingBackend
from tests.fixtures.models import held_out_problems

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
    rec = RecordingBackend(ScriptedBackend([TURN_1, TURN_2, FINAL], tokenizer))
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
    traj = await run_episode("q", ScriptedBackend([TURN_1, FINAL], tokenizer),
                             get_format("code_interpreter"), pool)
    again = Trajectory.from_json(traj.to_json())
    assert again == traj
    assert json.loads(again.to_json()) == json.loads(traj.to_json())
    assert again.token_ids == traj.token_ids and again.loss_mask == traj.loss_mask
    assert again.logprobs == traj.logprobs


async def test_tool_budget_ends_episode(tokenizer, pool):
    backend = ScriptedBackend([TURN_1, TURN_1, TURN_1, FINAL], tokenizer)
    traj = await run_episode("q", backend, get_format("code_interpreter"), pool,
                             LoopConfig(max_tool_calls=2))
    assert traj.finish_reason == "tool_budget"
    assert len(traj.tool_calls) == 2


async def test_token_budget_ends_episode(tokenizer, pool):
    backend = ScriptedBackend([TURN_1, TURN_2, FINAL], tokenizer)
    traj = await run_episode("q", backend, get_format("code_interpreter"), pool,
                             LoopConfig(max_model_tokens=30))
    assert traj.finish_reason == "token_budget"
    assert traj.model_tokens <= 30


async def test_eos_without_answer(tokenizer, pool):
    traj = await run_episode("q", ScriptedBackend(["I do not know."], tokenizer),
                             get_format("code_interpreter"), pool)
    assert traj.finish_reason == "eos"
    assert traj.answer is None


async def test_backend_failure_is_data_not_a_crash(tokenizer, pool):
    backend = ScriptedBackend([TURN_1, FINAL], tokenizer, fail_at=1)
    traj = await run_episode("q", backend, get_format("code_interpreter"), pool)
    assert traj.finish_reason == "error"
    assert "server unavailable" in traj.error
    assert len(traj.tool_calls) == 1  # what happened before the failure is kept


async def test_tool_error_and_timeout_are_shown_to_the_model(tokenizer, pool):
    turns = ["<code>\n1/0\n</code>", "<code>\nwhile True: pass\n</code>", FINAL]
    traj = await run_episode("q", ScriptedBackend(turns, tokenizer),
                             get_format("code_interpreter"), pool,
                             LoopConfig(tool_timeout_s=0.5))
    first, second = traj.tool_calls
    assert "ZeroDivisionError" in first.text
    assert second.result.timed_out and "Timeout" in second.text
    assert traj.finish_reason == "answered"
    assert traj.num_tool_errors == 2


async def test_text_only_run_without_sandbox(tokenizer):
    traj = await run_episode("q", ScriptedBackend([TURN_1], tokenizer),
                             get_format("code_interpreter"), None)
    assert traj.finish_reason == "tool_budget"
    assert traj.tool_calls == []


@pytest.mark.parametrize("fmt", ["markdown", "tool_call", "code_interpreter", "openai_tools"])
async def test_every_format_runs_in_the_loop(tokenizer, pool, fmt):
    f = get_format(fmt)
    turn = "Compute.\n" + f.render_call("y = 6 * 7\ny") + "\n"
    traj = await run_episode("q", ScriptedBackend([turn, "\\boxed{42}"], tokenizer), f, pool)
    assert traj.finish_reason == "answered", traj.error
    assert traj.tool_calls[0].result.value == "42"
    assert traj.answer == "42"


# The test model was trained on every text format, each with its default instructions.
REAL_FORMATS = ("code_interpreter", "markdown", "tool_call", "openai_tools")


async def _real_model_episodes(backend, pool) -> list[Trajectory]:
    """One greedy episode per format on a held-out problem: each must be token-exact and
    call the tool with code that really runs, its output folded back into the context."""
    problem = held_out_problems(1)[0].problem
    trajs = []
    for name in REAL_FORMATS:
        rec = RecordingBackend(backend)
        traj = await run_episode(problem, rec, get_format(name), pool,
                                 LoopConfig(max_model_tokens=200),
                                 SamplingParams(temperature=0.0))
        assert traj.finish_reason != "error", traj.error
        assert_token_exact(traj, rec)
        model = [s for s in traj.segments if s.source == "model"]
        assert all(s.logprobs is not None and len(s.logprobs) == len(s.token_ids)
                   for s in model)
        assert traj.tool_calls, (name, traj.completion_text)
        for call in traj.tool_calls:
            assert call.result.ok, (name, call.code, call.result)  # the model's code ran
            assert call.result.stdout.strip() in call.text  # and the model was shown it
        trajs.append(traj)
    return trajs


async def test_real_model_token_exact_hf(tiny_model_dir, pool):
    """A real model and tokenizer (transformers): ids sent at every turn are the recorded prefix."""
    from agentmath.backends.hf import HFBackend

    backend = HFBackend(str(tiny_model_dir))
    try:
        await _real_model_episodes(backend, pool)
    finally:
        await backend.aclose()


@pytest.mark.vllm
async def test_real_model_token_exact_vllm(vllm_server, pool):
    """The same through a real vLLM server (OpenAI-compatible completions with token ids)."""
    from agentmath.backends.openai import OpenAIBackend

    backend = OpenAIBackend(vllm_server, "tiny", timeout_s=60)
    try:
        trajs = await _real_model_episodes(backend, pool)
    finally:
        await backend.aclose()
    assert any(t.finish_reason == "answered" for t in trajs)
