"""The native tool-calling loop (openai_tools over chat completions)."""

from __future__ import annotations

import json

import pytest

from agentmath.agent.loop import run_chat_episode
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.errors import BackendError
from agentmath.sandbox import SandboxPool

pytestmark = pytest.mark.integration


class FakeChatBackend:
    """Replays assistant messages; records the conversation it was sent each turn."""

    name = "fake-chat"

    def __init__(self, replies: list[dict], fail_at: int | None = None) -> None:
        self.replies = replies
        self.seen: list[list[dict]] = []
        self.fail_at = fail_at

    async def chat(self, messages, *, tools=None, max_tokens=1024, sampling=None, **extra):
        if self.fail_at is not None and len(self.seen) == self.fail_at:
            raise BackendError("chat server down")
        self.seen.append(json.loads(json.dumps(messages)))
        assert tools and tools[0]["function"]["name"] == "python"
        return dict(self.replies[min(len(self.seen) - 1, len(self.replies) - 1)])


def call(code: str, call_id: str = "c1") -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": "python", "arguments": json.dumps({"code": code})}}


@pytest.fixture
async def pool():
    async with SandboxPool(SandboxConfig(spare_workers=1, max_sessions=4)) as p:
        yield p


async def test_chat_episode_runs_native_tool_calls_with_state(pool):
    backend = FakeChatBackend([
        {"role": "assistant", "content": "Compute.", "tool_calls": [call("x = 6 * 7\nx")],
         "finish_reason": "tool_calls"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("x + 1", "c2"),
                        {"id": "c3", "type": "function",
                         "function": {"name": "python", "arguments": "{bad json"}}],
         "finish_reason": "tool_calls"},
        {"role": "assistant", "content": "So \\boxed{43}.", "finish_reason": "stop"},
    ])
    traj = await run_chat_episode("q", backend, pool)
    assert traj.finish_reason == "answered" and traj.answer == "43"
    assert [t.result.value for t in traj.tool_calls[:2]] == ["42", "43"]  # state persisted
    assert traj.tool_calls[2].result.error_type == "ToolCallError"
    last = backend.seen[-1]
    tool_msgs = [m for m in last if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["c1", "c2", "c3"]
    assert "42" in tool_msgs[0]["content"]
    assert traj.token_exact is False


async def test_chat_episode_backend_failure_is_data(pool):
    backend = FakeChatBackend([{"role": "assistant", "content": "x",
                                "tool_calls": [call("1")]}], fail_at=1)
    traj = await run_chat_episode("q", backend, pool)
    assert traj.finish_reason == "error" and "chat server down" in traj.error
    assert len(traj.tool_calls) == 1


async def test_chat_episode_tool_budget(pool):
    backend = FakeChatBackend([{"role": "assistant", "content": "",
                                "tool_calls": [call("1")]}])
    traj = await run_chat_episode("q", backend, pool, LoopConfig(max_tool_calls=2))
    assert traj.finish_reason == "tool_budget" and len(traj.tool_calls) == 2


@pytest.mark.vllm
async def test_chat_episode_through_vllm_hermes_parser(vllm_server, pool):
    """A real server parses the test model's <tool_call> JSON into native tool calls; their
    code runs in the sandbox and the results go back as tool messages, turn after turn."""
    from agentmath.backends.base import SamplingParams
    from agentmath.backends.openai import OpenAIBackend
    from tests.fixtures.models import held_out_problems

    backend = OpenAIBackend(vllm_server, "tiny", timeout_s=60)
    try:
        trajs = [await run_chat_episode(p.problem, backend, pool,
                                        LoopConfig(max_model_tokens=300, max_tool_calls=4),
                                        SamplingParams(temperature=0.0))
                 for p in held_out_problems(3)]
    finally:
        await backend.aclose()
    for traj in trajs:
        assert traj.finish_reason != "error", traj.error
        assert traj.tool_calls, traj.model_text
        assert all(call.result.ok for call in traj.tool_calls), traj.tool_calls
        tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
        assert [m["content"].strip() for m in tool_msgs] == \
            [c.result.stdout.strip() for c in traj.tool_calls]
    assert any(len(t.tool_calls) >= 2 for t in trajs)  # the conversation went on after a result
