"""The agent loop over native chat tool calling (``/v1/chat/completions`` with ``tools``).

For servers and models that speak OpenAI-style tool calls: the model answers with
``tool_calls`` to a ``python`` function, each call runs in the episode's sandbox session and
its result goes back as a ``tool``-role message. The server renders the conversation through
its chat template at every turn, so this path is *not* token-exact (see docs/agent-loop.md):
segments carry the ids the server reports where it does (vLLM with ``return_token_ids``), and
the trajectory's ``meta["token_exact"]`` is False. Use a text format for training data.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from agentmath.backends.base import SamplingParams
from agentmath.config import LoopConfig
from agentmath.errors import AgentMathError, BackendError
from agentmath.formats.openai_tools import OPENAI_TOOLS, parse_tool_calls, tool_message, tool_spec
from agentmath.loop import _extract, _run_tool, build_messages
from agentmath.sandbox.pool import SandboxPool
from agentmath.sandbox.result import ExecResult
from agentmath.trajectory import Segment, Trajectory

CHAT_SYSTEM_PROMPT = ("Solve the problem step by step. You can call the `python` tool to run "
                      "code in a persistent session; put the final answer in \\boxed{}.")


class _ChatEpisode:
    """Mutable state of one chat episode (private)."""

    def __init__(self, config: LoopConfig, deadline: float) -> None:
        self.config = config
        self.deadline = deadline
        self.model_used = 0
        self.calls = 0
        self.session: Any = None


def _model_segment(message: dict[str, Any]) -> Segment:
    """The assistant turn as a segment: its text plus its tool calls rendered as JSON."""
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        body = json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")})
        text += f"\n<tool_call>\n{body}\n</tool_call>"
    ids = list(message.get("token_ids") or [])
    return Segment("model", text, ids, None, message.get("finish_reason"))


async def _chat_turn(ep: _ChatEpisode, traj: Trajectory, backend: Any, pool: SandboxPool | None,
                     messages: list[dict[str, Any]], sampling: SamplingParams) -> str | None:
    """One assistant turn and its tool calls; returns a finish reason or None to continue."""
    budget = min(ep.config.max_model_tokens - ep.model_used,
                 ep.config.max_tokens_per_turn or ep.config.max_model_tokens)
    if budget <= 0:
        return "token_budget"
    if time.monotonic() > ep.deadline:
        return "time_budget"
    message = await backend.chat(messages, tools=[tool_spec()], max_tokens=budget,
                                 sampling=sampling, return_token_ids=True)
    segment = _model_segment(message)
    ep.model_used += (message.get("usage") or {}).get("completion_tokens") or \
        len(segment.token_ids)
    traj.segments.append(segment)
    calls = parse_tool_calls(message)
    if ep.config.stop_on_answer and _extract(message.get("content") or "") is not None:
        return "answered"
    if not calls:
        return "token_budget" if message.get("finish_reason") == "length" else "eos"
    messages.append({k: v for k, v in message.items()
                     if k in ("role", "content", "tool_calls")})
    for call in calls:
        if pool is None or ep.calls >= ep.config.max_tool_calls:
            return "tool_budget"
        ep.calls += 1
        if call.code is None:
            result = ExecResult(error=call.error, error_type="ToolCallError")
        else:
            result = await _run_tool(ep, pool, call.code)  # type: ignore[arg-type]
        reply = tool_message(call.id, result, max_chars=ep.config.max_output_chars)
        messages.append(reply)
        traj.segments.append(Segment("tool", reply["content"], [], code=call.code,
                                     result=result, duration_ms=result.duration_ms))
    return None


async def run_chat_episode(
    problem: str,
    backend: Any,
    pool: SandboxPool | None,
    config: LoopConfig | None = None,
    sampling: SamplingParams | None = None,
    few_shot: Sequence[tuple[str, str]] = (),
) -> Trajectory:
    """Run one episode with native tool calling (``backend`` needs a ``chat`` method).

    Never raises for model, sandbox or budget failures; they become the finish reason.
    """
    config = config or LoopConfig()
    sampling = sampling or SamplingParams()
    start = time.monotonic()
    traj = Trajectory(problem=problem, meta={"format": "openai_tools(chat)",
                                             "backend": getattr(backend, "name", "?"),
                                             "token_exact": False})
    ep = _ChatEpisode(config, start + config.time_limit_s)
    messages: list[dict[str, Any]] = build_messages(
        problem, OPENAI_TOOLS, config.system_prompt or CHAT_SYSTEM_PROMPT, few_shot)
    traj.segments.append(Segment("prompt", json.dumps(messages, ensure_ascii=False), []))
    traj.meta["messages"] = messages
    try:
        finish = None
        while finish is None:
            finish = await _chat_turn(ep, traj, backend, pool, messages, sampling)
        traj.finish_reason = finish
    except (BackendError, AgentMathError, OSError, ValueError) as exc:
        traj.finish_reason, traj.error = "error", f"{type(exc).__name__}: {exc}"
    finally:
        if ep.session is not None:
            await ep.session.close()
    traj.answer = _extract(traj.model_text)
    traj.duration_ms = (time.monotonic() - start) * 1000.0
    return traj
