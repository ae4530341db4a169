"""Native tool calling (chat-completions servers) and its text twin, Hermes/Qwen ``<tool_call>``.

Native path: send :func:`tool_spec` in ``tools``; read the assistant message's calls with
:func:`parse_tool_calls`; answer each with :func:`tool_message`. A call whose arguments are not
valid JSON becomes a :class:`NativeToolCall` with ``code=None`` and an ``error``; answer it with
``tool_message(call.id, ExecResult(error=call.error, error_type="ToolCallError"))`` so that the
model sees what was wrong.

Text path (completion servers, or chat templates that render tool calls as text), the format
Qwen2.5/Qwen3 chat templates use::

    <tool_call>
    {"name": "python", "arguments": {"code": "print(2 + 2)"}}
    </tool_call>
    <tool_response>
    4
    </tool_response>

Stop string: ``"</tool_call>"`` (anywhere). The body is JSON, where code lives inside a string:
``render_call`` writes ``"</"`` as ``"<\\/"`` (valid JSON), so a call it writes never contains
the closing tag, and a model that omits the newline before the tag still stops.

Invalid JSON in a closed call: ``find_call`` returns a call whose code is a two-line snippet
that raises ``SyntaxError`` with the JSON parser's message and the expected shape. Running it
yields an error the model can act on, in the same place a result would be; returning the raw
text instead could even *run* (a JSON object is often a valid Python dict), which would hide
the mistake.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from agentmath.formats.base import DelimitedFormat, render_body
from agentmath.sandbox.result import ExecResult

TOOL_NAME = "python"
_EXPECTED = '{"name": "python", "arguments": {"code": "..."}}'
_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Run Python code in a persistent session (variables and imports carry over between "
            "calls). Returns the printed output, then the value of the last expression, or the "
            "error."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python code to run."},
            },
            "required": ["code"],
        },
    },
}


def tool_spec() -> dict[str, Any]:
    """The OpenAI function tool ``python(code: str)``, a fresh copy for ``tools=[...]``."""
    return copy.deepcopy(_SPEC)


def code_from_arguments(arguments: Any) -> tuple[str | None, str | None]:
    """``(code, None)`` from a call's arguments (JSON text or dict), or ``(None, error)``.

    The error is one sentence written for the model: what was wrong and what was expected.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments, strict=False)  # strict=False: raw newlines in code
        except json.JSONDecodeError as exc:
            return None, (f"the arguments are not valid JSON ({exc.msg} at line {exc.lineno} "
                          f"column {exc.colno}); expected {{\"code\": \"...\"}}")
    if not isinstance(arguments, dict) or not isinstance(arguments.get("code"), str):
        return None, 'the arguments must be a JSON object with a string field "code"'
    return arguments["code"], None


def code_from_call_json(text: str) -> tuple[str | None, str | None]:
    """``(code, None)`` from the JSON body of a text tool call, or ``(None, error)``."""
    try:
        obj = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        return None, (f"the tool call is not valid JSON ({exc.msg} at line {exc.lineno} column "
                      f"{exc.colno}); expected {_EXPECTED}")
    if not isinstance(obj, dict):
        return None, f"the tool call must be a JSON object; expected {_EXPECTED}"
    name = obj.get("name", TOOL_NAME)
    if name != TOOL_NAME:
        return None, f"unknown tool {name!r}; the only tool is {TOOL_NAME!r}"
    arguments = obj.get("arguments", obj.get("parameters"))
    if arguments is None and "code" in obj:
        arguments = {"code": obj["code"]}  # lenient: {"code": ...} without the wrapper
    return code_from_arguments(arguments)


def error_snippet(error: str) -> str:
    """Python that raises ``SyntaxError(error)``: how a malformed call reaches the model."""
    return f"_tool_call_error = {error!r}\nraise SyntaxError(_tool_call_error)"


@dataclass(frozen=True)
class NativeToolCall:
    """One call of a chat-completions message: its id and code, or why it could not be read."""

    id: str
    code: str | None
    error: str | None = None


def parse_tool_calls(message: dict[str, Any]) -> list[NativeToolCall]:
    """The python calls of an assistant ``message``; never raises on malformed calls.

    A missing id becomes ``call_<index>``; a call of another function, or with arguments that
    are not a JSON object with a string ``code``, has ``code=None`` and an ``error``.
    """
    calls: list[NativeToolCall] = []
    for index, raw in enumerate(message.get("tool_calls") or []):
        raw = raw if isinstance(raw, dict) else {}
        call_id = str(raw.get("id") or f"call_{index}")
        function = raw.get("function") if isinstance(raw.get("function"), dict) else {}
        name = function.get("name")
        if name != TOOL_NAME:
            calls.append(NativeToolCall(call_id, None,
                                        f"unknown tool {name!r}; the only tool is {TOOL_NAME!r}"))
            continue
        code, error = code_from_arguments(function.get("arguments"))
        calls.append(NativeToolCall(call_id, code, error))
    return calls


def tool_message(call_id: str, result: ExecResult, *, max_chars: int = 4000) -> dict[str, Any]:
    """The ``role: tool`` message that answers call ``call_id`` with ``result``."""
    return {"role": "tool", "tool_call_id": call_id,
            "content": render_body(result, max_chars=max_chars)}


class OpenAIToolsFormat(DelimitedFormat):
    """Hermes/Qwen JSON tool calls in text; results in ``<tool_response>`` tags."""

    name = "openai_tools"
    stop_strings = ("</tool_call>",)
    call_open = "<tool_call>\n"
    call_close = "</tool_call>"
    output_open = "<tool_response>"
    output_close = "</tool_response>"
    opener = re.compile(r"<tool_call>[ \t]*(?:\n|(?=\{))")  # not a mention in prose
    closer = re.compile(r"</tool_call>")
    output_closer = re.compile(r"</tool_response>")

    def encode(self, code: str) -> str:
        """The JSON body of a call; ``"</"`` is escaped so the body never holds a closing tag."""
        body = json.dumps({"name": TOOL_NAME, "arguments": {"code": code}}, ensure_ascii=False)
        return body.replace("</", "<\\/")

    def decode(self, body: str) -> str:
        """The code of a JSON body; for a malformed body, a snippet that reports why."""
        code, error = code_from_call_json(body)
        return code if code is not None else error_snippet(error or "malformed tool call")

    def decode_unclosed(self, body: str) -> str | None:
        """A call cut at a stripped stop string counts only if its JSON is complete."""
        code, _ = code_from_call_json(body)
        return code

    def instructions(self) -> str:
        """How to call the ``python`` tool with Hermes-style JSON, with a tiny example."""
        example = self.render_call(self.example_code) + self.render(self.example_result)
        return (
            "You can call one tool, python, which runs code in a persistent session (variables "
            "and imports carry over between calls). To call it, write <tool_call>, then a JSON "
            f"object {_EXPECTED} on one line, then </tool_call>, and stop. The result (printed "
            "output, then the value of the last expression, or the error) comes back in "
            f"<tool_response> ... </tool_response>; read it before you continue.\n\n"
            f"Example:\n{example}"
        )


class ChatMLToolsFormat(OpenAIToolsFormat):
    """Native tool calling as a ChatML chat template renders it, in text.

    The same ``<tool_call>`` JSON calls; each result a ``user`` turn holding ``<tool_response>``,
    and the model's next turn opened after it. This is byte for byte what Qwen2.5/Qwen3's chat
    templates (and agentmath's tiny models' template) make of an assistant tool call, its
    ``tool`` message and the generation prompt, so that the token-exact loop drives a model in
    the very protocol its native tool-calling records trained (and TRL's tool loop samples in).

    The assistant turn's end (``<|im_end|>``) is part of the rendered result, not of the model's
    text: generation stops at ``</tool_call>`` as in ``openai_tools``."""

    name = "chatml_tools"
    output_open = "<|im_end|>\n<|im_start|>user\n<tool_response>"
    output_close = "</tool_response><|im_end|>\n<|im_start|>assistant"

    def render(self, result: ExecResult, *, max_chars: int = 4000) -> str:
        """``<|im_end|>``, the tool turn and the next assistant header for ``result``."""
        prefix, suffix = f"{self.output_open}\n", f"\n{self.output_close}\n"
        budget = max(max_chars - len(prefix) - len(suffix), 0)
        return f"{prefix}{render_body(result, max_chars=budget)}{suffix}"


OPENAI_TOOLS = OpenAIToolsFormat()
CHATML_TOOLS = ChatMLToolsFormat()
