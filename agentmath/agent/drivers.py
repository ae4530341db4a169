"""The model side of an episode: how a turn is generated and how tool results go back.

Two drivers share one :class:`~agentmath.agent.episode.Episode` (budgets, time limit, sandbox,
answers, parking):

* :class:`TextDriver`: a text tool format (``<code>`` ... ``</code>`` and the others) over
  ``Backend.generate``. Token-exact: the context sent at every turn is the concatenation of
  the ids already recorded (prompt ids, each model segment's sampled ids, each tool segment's
  ids), so what the model conditioned on and what a trainer later sees are the same ids.
* :class:`ChatDriver`: native tool calling over ``/v1/chat/completions`` (a backend with a
  ``chat`` method). The server renders the whole conversation through its chat template at
  every turn. Where it reports the ids of each prompt it rendered and of what it sampled
  (vLLM with ``return_token_ids``), every trained sequence is still exactly what the sampler
  saw: a turn whose prompt extends the previous turn's prompt and sampled ids adds only the
  new ids (the template's render of the tool results), and one whose prompt does not (a
  template that rewrites history: Qwen3's drops earlier reasoning) starts a new sequence and
  flags the trajectory (:func:`record_prompt`). A server that does not report them leaves
  the trajectory's ``token_exact`` False, and training refuses it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentmath.agent.prompts import CHAT_SYSTEM_PROMPT, build_messages
from agentmath.agent.trajectory import HistoryRewrite, Segment, Trajectory
from agentmath.backends.base import Backend, Interruptible, SamplingParams
from agentmath.config import LoopConfig
from agentmath.errors import BackendError
from agentmath.formats.base import ToolFormat
from agentmath.formats.openai_tools import OPENAI_TOOLS, parse_tool_calls, tool_message, tool_spec
from agentmath.sandbox.result import ExecResult


class EpisodeState(Protocol):
    """What a driver reads of its episode (and the trajectory it appends to): the part of
    :class:`agentmath.agent.episode.Episode` it sees, declared here so that the drivers sit
    below the episode that owns them."""

    backend: Backend
    fmt: ToolFormat
    config: LoopConfig
    sampling: SamplingParams
    trajectory: Trajectory
    few_shot: Sequence[tuple[str, str]]
    policy_version: int


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call found in a model turn: its code, or why it could not be read."""

    code: str | None
    error: str | None = None
    id: str | None = None


@dataclass(slots=True)
class ModelTurn:
    """What one generate call gave: tokens spent, whether the turn was cut by a token limit
    (or ``interrupted``: cut at a partial-rollout iteration's end), the calls it ends with,
    and the text an answer is looked for in (before the first call)."""

    tokens: int
    finish_reason: str | None
    cut: bool
    calls: list[Call] = field(default_factory=list)
    answer_text: str = ""
    interrupted: bool = False


def loop_time() -> float:
    """The event loop's clock: monotonic time, or simulated time under the rollout simulator
    (so that time limits and durations mean the same thing there)."""
    return asyncio.get_running_loop().time()


def failure(exc: BaseException) -> str:
    """How a failed backend call is recorded: the error's type and message. A backend error
    of an unexpected type (a TypeError in a third-party backend) ends this episode the same
    way, so that one bad reply never takes down a whole evaluation."""
    kind = type(exc).__name__
    if isinstance(exc, BackendError | OSError | ValueError):
        return f"{kind}: {exc}"
    return f"{kind} (unexpected, from the backend): {exc}"


async def _call_model(ep: EpisodeState, coro: Any, deadline: float) -> Any:
    """Await one model call under the episode's deadline; a str is the finish reason."""
    try:
        return await asyncio.wait_for(coro, max(0.0, deadline - loop_time()))
    except TimeoutError:
        return "time_budget"
    except Exception as exc:  # noqa: BLE001 - any backend failure is this episode's error
        ep.trajectory.error = failure(exc)
        return "error"


def record_prompt(trajectory: Trajectory, prompt_ids: list[int],
                  messages: Sequence[dict[str, Any]], rewrite: HistoryRewrite) -> bool:
    """Record the ids of the prompt a chat server rendered for the next model turn; True
    when it rewrote the history.

    The first turn's ids fill the (empty) prompt segment. A later prompt that extends the
    ids of the sequence so far (the previous prompt and every turn sampled since) adds only
    its new ids, to the last tool segment (the template's render of the turn's tool results
    and of the next assistant header; with several tool results the last one holds them all).
    A prompt that does not extend them starts a new sequence: a prompt segment of all its
    ids (its text: the ``messages`` it was rendered from, as JSON), and the trajectory's
    ``history_rewrite`` becomes ``rewrite`` (kept from the first such turn)."""
    segments = trajectory.segments
    if len(segments) == 1 and segments[0].source == "prompt" and not segments[0].token_ids:
        segments[0].token_ids = list(prompt_ids)
        return False
    seen = [t for seg in trajectory.sequences[-1] for t in seg.token_ids]
    if segments[-1].source == "tool" and prompt_ids[:len(seen)] == seen:
        segments[-1].token_ids = segments[-1].token_ids + list(prompt_ids[len(seen):])
        return False
    segments.append(Segment("prompt", json.dumps(list(messages), ensure_ascii=False),
                            list(prompt_ids)))
    if trajectory.history_rewrite is None:
        trajectory.history_rewrite = rewrite
    return True


class TextDriver:
    """Token-exact turns in a text tool format over ``Backend.generate``."""

    can_cut = True  # a turn cut by a token limit can be continued from its ids

    def __init__(self, ep: EpisodeState) -> None:
        self.ep = ep
        self.context: list[int] = []
        self.format_name = ep.fmt.name

    def _add(self, segment: Segment) -> None:
        self.ep.trajectory.segments.append(segment)
        self.context.extend(segment.token_ids)

    def context_tokens(self) -> int:
        return len(self.context)

    def _open_turn(self) -> list[Segment]:
        """The model segments of the turn in progress (a turn cut by parking has several)."""
        out: list[Segment] = []
        for seg in reversed(self.ep.trajectory.segments):
            if seg.source != "model":
                break
            out.append(seg)
        return out[::-1]

    def open_turn_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self._open_turn())

    def turn_text(self) -> str:
        return "".join(s.text for s in self._open_turn())

    async def start(self) -> None:
        """Render the prompt through the backend's chat template (the first segment)."""
        ep = self.ep
        messages = build_messages(ep.trajectory.problem, ep.fmt, ep.config.system_prompt,
                                  ep.few_shot)
        try:
            prompt_ids = await ep.backend.render_prompt(messages)
        except Exception as exc:  # noqa: BLE001 - any backend failure is this episode's error
            raise BackendError(f"render_prompt failed: {failure(exc)}") from exc
        self._add(Segment("prompt", "".join(f"[{m['role']}] {m['content']}\n" for m in messages),
                          list(prompt_ids)))
        ep.trajectory.messages = messages

    async def model_turn(self, max_tokens: int, deadline: float,
                         interrupt: asyncio.Event | None = None) -> ModelTurn | str:
        """One generate call continuing the context (and the open turn, if any). With
        ``interrupt`` and an :class:`~agentmath.backends.base.Interruptible` backend, the
        call returns what it sampled once the event is set (a turn cut, maybe empty)."""
        ep = self.ep
        continued = bool(self._open_turn())
        started = loop_time()
        backend = ep.backend
        if interrupt is not None and isinstance(backend, Interruptible):
            call = backend.generate_interruptible(
                list(self.context), stop=ep.fmt.stop_strings, max_tokens=max_tokens,
                sampling=ep.sampling, interrupt=interrupt)
        else:
            call = backend.generate(list(self.context), stop=ep.fmt.stop_strings,
                                    max_tokens=max_tokens, sampling=ep.sampling)
        gen = await _call_model(ep, call, deadline)
        if isinstance(gen, str):
            return gen
        interrupted = gen.finish_reason == "length" and gen.interrupted
        if interrupted and not gen.token_ids:  # cut before its first token: nothing to keep
            return ModelTurn(0, "length", True, interrupted=True)
        self._add(Segment("model", gen.text, list(gen.token_ids), gen.logprobs,
                          gen.finish_reason, duration_ms=(loop_time() - started) * 1e3,
                          policy_version=ep.policy_version))
        text = self.turn_text()
        reason = gen.finish_reason
        if reason == "length" and continued and any(s in text for s in ep.fmt.stop_strings):
            reason = "stop"  # completed across a parking cut (a one-token extension)
        found = ep.fmt.find_call(text) if reason != "length" else None
        return ModelTurn(len(gen.token_ids), reason, reason == "length",
                         [Call(found.code)] if found is not None else [],
                         text[: found.start] if found is not None else text,
                         interrupted=interrupted and reason == "length")

    def ends_in_partial_stop(self) -> bool:
        """True when the open turn's text ends with a proper prefix of a stop string."""
        text = self.turn_text()
        return any(text.endswith(stop[:k]) for stop in self.ep.fmt.stop_strings
                   for k in range(1, len(stop)))

    async def add_tool(self, call: Call, result: ExecResult) -> str | None:
        """Render the result in the format, tokenize it, append it; an error message if the
        backend could not tokenize it."""
        ep = self.ep
        rendered = ep.fmt.render(result, max_chars=ep.config.max_output_chars)
        try:
            ids = await ep.backend.tokenize(rendered)
        except Exception as exc:  # noqa: BLE001 - any backend failure is this episode's error
            return f"tokenize failed: {failure(exc)}"
        self._add(Segment("tool", rendered, list(ids), code=call.code, result=result,
                          duration_ms=result.duration_ms))
        return None


class ChatDriver:
    """Native tool calling over a backend's ``chat`` (``/v1/chat/completions`` + ``tools``).

    ``messages`` is the conversation it sends, its working state, extended turn by turn. The
    trajectory's ``messages`` is that same list: the episode's only record of its conversation,
    which a parked episode's new driver takes back on another worker (``Episode.restore``)."""

    can_cut = False  # a chat turn cannot be continued from its ids: segments end between turns

    def __init__(self, ep: EpisodeState) -> None:
        self.ep = ep
        self.messages: list[dict[str, Any]] = []
        self.context = 0  # prompt + completion tokens of the last reply, as the server counts
        self.format_name = "openai_tools(chat)"

    def context_tokens(self) -> int:
        return self.context

    def open_turn_tokens(self) -> int:
        return 0

    def ends_in_partial_stop(self) -> bool:
        return False

    async def start(self) -> None:
        ep = self.ep
        self.messages = build_messages(ep.trajectory.problem, OPENAI_TOOLS,
                                       ep.config.system_prompt or CHAT_SYSTEM_PROMPT, ep.few_shot)
        ep.trajectory.segments.append(
            Segment("prompt", json.dumps(self.messages, ensure_ascii=False), []))
        # the live list: the trajectory's record of the conversation is the one sent
        ep.trajectory.messages = self.messages

    async def model_turn(self, max_tokens: int, deadline: float,
                         interrupt: asyncio.Event | None = None) -> ModelTurn | str:
        """One assistant message; its tool calls become the turn's calls. ``interrupt`` is
        not used: a chat turn cannot be continued from its ids, so it is never cut."""
        ep = self.ep
        started = loop_time()
        extra = {"logprobs": True} if ep.sampling.logprobs else {}
        message = await _call_model(ep, ep.backend.chat(  # type: ignore[attr-defined]
            self.messages, tools=[tool_spec()], max_tokens=max_tokens, sampling=ep.sampling,
            return_token_ids=True, **extra), deadline)
        if isinstance(message, str):
            return message
        text = message.get("content") or ""
        shown = text
        for raw in message.get("tool_calls") or []:
            fn = raw.get("function", {}) if isinstance(raw, dict) else {}
            body = json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")})
            shown += f"\n<tool_call>\n{body}\n</tool_call>"
        ids = list(message.get("token_ids") or [])
        usage = message.get("usage") or {}
        tokens = usage.get("completion_tokens") or len(ids)
        self.context = (usage.get("prompt_tokens") or self.context) + tokens
        self._record_ids(message)
        logprobs = message.get("logprobs")
        ep.trajectory.segments.append(Segment(
            "model", shown, ids,
            list(logprobs) if isinstance(logprobs, list) and len(logprobs) == len(ids) else None,
            message.get("finish_reason"),
            duration_ms=(loop_time() - started) * 1e3, policy_version=ep.policy_version))
        calls = [Call(c.code, c.error, c.id) for c in parse_tool_calls(message)]
        if calls:
            # the reasoning goes back too: a template that keeps it (Qwen3's, for the turns
            # after the last user query) then renders what the model sampled
            self.messages.append({k: v for k, v in message.items()
                                  if k in ("role", "content", "tool_calls") or
                                  (k in ("reasoning", "reasoning_content") and v is not None)})
        cut = message.get("finish_reason") == "length" and not calls
        return ModelTurn(tokens, message.get("finish_reason"), cut, calls, text)

    def _record_ids(self, message: dict[str, Any]) -> None:
        """Record the prompt ids the server rendered for this turn (:func:`record_prompt`);
        a reply without them, or without the sampled ids, makes the trajectory not
        token-exact from then on (its ids are no longer what the sampler saw)."""
        traj = self.ep.trajectory
        prompt = message.get("prompt_token_ids")
        if prompt is None or message.get("token_ids") is None:
            traj.token_exact = False
        if traj.token_exact:
            record_prompt(traj, list(prompt or []), self.messages,
                          self.ep.config.history_rewrite)

    async def add_tool(self, call: Call, result: ExecResult) -> str | None:
        ep = self.ep
        reply = tool_message(call.id or "call_0", result, max_chars=ep.config.max_output_chars)
        self.messages.append(reply)
        ep.trajectory.segments.append(Segment("tool", reply["content"], [], code=call.code,
                                              result=result, duration_ms=result.duration_ms))
        return None
