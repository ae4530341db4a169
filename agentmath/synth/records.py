"""From executed pieces to SFT records, exactly as the agent loop would have produced them.

Two record shapes, both read by the SFT module:

- text formats: ``{"id", "messages": [system, user], "answer", "completion": [{"text",
  "train"}, ...]}`` where model turns are trained and rendered tool outputs are not; each model
  turn ends where generation stops (the format's stop string), the tool output is
  ``fmt.render(result, max_chars=...)``, and the final piece has no end-of-turn token (the SFT
  module appends the tokenizer's EOS);
- native tool calling: ``{"id", "messages": [system, user, assistant+tool_calls, tool, ...,
  assistant], "tools": [python tool schema], "answer"}``, rendered by the tokenizer's chat
  template at training time.

``messages`` come from :func:`agentmath.agent.build_messages`, so training prompts are the
inference prompts. :func:`check_plan` replays the loop's parsing on a plan before anything runs
(each model turn ends with exactly its call and answers nothing before it; the last turn holds
no call), so a trajectory the loop would not reproduce is never written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentmath.agent.prompts import CHAT_SYSTEM_PROMPT, build_messages
from agentmath.formats.base import ToolFormat
from agentmath.formats.openai_tools import OPENAI_TOOLS, TOOL_NAME, tool_message, tool_spec
from agentmath.grading import extract_answer
from agentmath.sandbox.result import ExecResult
from agentmath.synth.pieces import Piece, Rejected, model_turns
from agentmath.tasks import Task


@dataclass(frozen=True)
class Event:
    """A piece of the final trajectory: text (``result`` None) or a snippet with its real
    ``result``; ``planned`` is False for pieces the pipeline added (self-correction turns)."""

    piece: Piece
    result: ExecResult | None = None
    planned: bool = True


def call_text(fmt: ToolFormat, code: str) -> str:
    """The call for ``code`` as a model writes it at inference: up to the end of the stop.

    ``render_call`` may end just before the stop string is complete (markdown's stop is
    ``"\\n```\\n"`` but its call ends with the fence): the rest of the stop string is
    appended, because the loop's model text always ends with the matched stop string.
    """
    text = fmt.render_call(code)
    for stop in fmt.stop_strings:
        if stop in text:
            return text[: text.index(stop) + len(stop)]
    for stop in fmt.stop_strings:
        for k in range(len(stop) - 1, 0, -1):
            if text.endswith(stop[:k]):
                return text + stop[k:]
    return text


def check_plan(pieces: Sequence[Piece], fmt: ToolFormat) -> None:
    """Raise :class:`Rejected` (stage ``format``) when the loop would not replay the plan:
    a snippet that the format cannot carry, a model turn that answers before its call or
    holds a call of its own, or a final turn with a call in it."""
    for index, turn, piece in model_turns(pieces):
        if piece is None:
            if index == 1:
                raise Rejected("format", "no_code", "the plan has no code snippet")
            if fmt.find_call(turn) is not None:
                raise Rejected("format", "malformed", "the final model turn contains a call")
            return
        found = fmt.find_call(call_text(fmt, piece.text))
        if found is None or found.code != piece.text:
            raise Rejected("format", "malformed", f"snippet {index} does not survive the "
                           f"{fmt.name} format (the call text parses to different code)")
        if extract_answer(turn) is not None:
            raise Rejected("format", "malformed", f"model turn {index} answers before its call")
        if fmt.find_call(turn) is not None:
            raise Rejected("format", "malformed", f"model turn {index} holds a second call")


def final_text(events: Sequence[Event]) -> str:
    """The model text after the last snippet: where the final answer is read."""
    tail: list[str] = []
    for event in reversed(events):
        if event.piece.kind == "code":
            break
        tail.append(event.piece.text)
    return "".join(reversed(tail))


def completion(events: Sequence[Event], fmt: ToolFormat,
               max_output_chars: int) -> list[dict[str, Any]]:
    """The text-format completion: model pieces (train) and rendered tool output (not)."""
    out: list[dict[str, Any]] = []
    for event in events:
        if event.result is None:
            out.append({"text": event.piece.text, "train": True})
        else:
            out.append({"text": call_text(fmt, event.piece.text), "train": True})
            out.append({"text": fmt.render(event.result, max_chars=max_output_chars),
                        "train": False})
    return _merge(out)


def chat_turns(events: Sequence[Event], max_output_chars: int) -> list[dict[str, Any]]:
    """The native-tool-calling turns: an assistant message per call (its lead text as content,
    one ``python`` tool call), the ``tool`` message the chat loop would send, then the answer."""
    turns: list[dict[str, Any]] = []
    content = ""
    for event in events:
        if event.result is None:
            content += event.piece.text
            continue
        call_id = f"call_{len(turns) // 2}"
        call = {"id": call_id, "type": "function", "function": {
            "name": TOOL_NAME, "arguments": json.dumps({"code": event.piece.text},
                                                       ensure_ascii=False)}}
        turns.append({"role": "assistant", "content": content.strip(), "tool_calls": [call]})
        turns.append(tool_message(call_id, event.result, max_chars=max_output_chars))
        content = ""
    turns.append({"role": "assistant", "content": content.strip()})
    return turns


def _merge(pieces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent pieces with the same ``train`` flag joined (a model turn is one piece)."""
    merged: list[dict[str, Any]] = []
    for piece in pieces:
        if merged and merged[-1]["train"] == piece["train"]:
            merged[-1] = {"text": merged[-1]["text"] + piece["text"], "train": piece["train"]}
        else:
            merged.append(dict(piece))
    return merged


def build_record(task: Task, events: Sequence[Event], fmt: ToolFormat | None, *,
                 system_prompt: str | None, max_output_chars: int) -> dict[str, Any]:
    """The SFT record of a verified trajectory (``fmt`` None: a native chat record)."""
    if fmt is None:
        messages = build_messages(task.problem, OPENAI_TOOLS, system_prompt or CHAT_SYSTEM_PROMPT)
        return {"id": task.id, "messages": messages + chat_turns(events, max_output_chars),
                "tools": [tool_spec()], "answer": task.answer}
    return {"id": task.id, "messages": build_messages(task.problem, fmt, system_prompt),
            "completion": completion(events, fmt, max_output_chars), "answer": task.answer}
