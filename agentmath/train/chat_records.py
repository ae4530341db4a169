"""SFT records for native tool calling: whole conversations rendered by the chat template.

A text-format record (``messages`` = the prompt, ``completion`` = pieces) is what the text
agent loop produces. A model served with native tool calls (``/v1/chat/completions`` with
``tools``; :mod:`agentmath.agent.loop`) instead sees a conversation that the server renders
with the model's chat template, tool schemas in the system turn and tool results in ``tool``
turns. Such a record is ``{"messages": [..., assistant, tool, ..., assistant], "tools": [...]}``.

Encoding renders the conversation prefix by prefix: the text each assistant turn adds is
trained on up to and including the end-of-turn token (what the model must learn to write,
its tool calls included); everything else (system, user, tool results, the template's glue) is
masked. That needs a prefix-preserving template (rendering the first k messages yields a prefix
of rendering k + 1), which ChatML templates are; a template that rewrites earlier turns (e.g.
one that drops past reasoning) is reported as an error rather than trained on wrongly.
"""

from __future__ import annotations

from typing import Any

from agentmath.errors import DataError

IGNORE_INDEX = -100
_ROLES = ("system", "user", "assistant", "tool")


def is_chat_record(row: dict[str, Any]) -> bool:
    """A chat record has no ``completion``: its assistant turns are inside ``messages``."""
    return "completion" not in row


def check_chat_record(row: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate a chat record's shape, raising DataError naming ``where`` and the field."""
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: field 'messages': must be a non-empty list of objects")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in _ROLES:
            raise DataError(f"{where}: field 'messages[{i}].role': must be one of "
                            f"{', '.join(_ROLES)}")
        content = msg.get("content")
        if not (isinstance(content, str) or (content is None and msg.get("tool_calls"))):
            raise DataError(f"{where}: field 'messages[{i}].content': must be a string")
        if "tool_calls" in msg and not isinstance(msg["tool_calls"], list):
            raise DataError(f"{where}: field 'messages[{i}].tool_calls': must be a list")
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{where}: field 'messages': a record without 'completion' must hold "
                        "at least one assistant turn (nothing to train on)")
    tools = row.get("tools")
    if tools is not None and not (isinstance(tools, list)
                                  and all(isinstance(t, dict) for t in tools)):
        raise DataError(f"{where}: field 'tools': must be a list of tool schemas (objects)")
    return row


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict] | None,
            generation_prompt: bool) -> str:
    return str(tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                             add_generation_prompt=generation_prompt))


def chat_pieces(tokenizer: Any, example: dict[str, Any]) -> list[tuple[str, bool]]:
    """The rendered conversation as ``(text, train)`` pieces, in order (see module doc)."""
    messages, tools = example["messages"], example.get("tools")
    eos = tokenizer.eos_token
    pieces: list[tuple[str, bool]] = []
    done = ""
    for i, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        prompt = _render(tokenizer, messages[:i], tools, True)
        full = _render(tokenizer, messages[: i + 1], tools, False)
        if not prompt.startswith(done) or not full.startswith(prompt):
            raise DataError(f"record {example.get('id', '?')!r}: the chat template is not "
                            f"prefix-preserving at message {i}; chat records need one")
        pieces.append((prompt[len(done):], False))
        turn = full[len(prompt):]
        cut = turn.find(eos) + len(eos) if eos and eos in turn else len(turn)
        pieces.append((turn[:cut], True))
        if turn[cut:]:
            pieces.append((turn[cut:], False))  # template glue after the end-of-turn token
        done = full
    return [(text, train) for text, train in pieces if text]


def encode_chat(tokenizer: Any, example: dict[str, Any]) -> tuple[list[int], list[int]]:
    """Ids and labels of a chat record: each piece encoded on its own and appended (as the
    text loop does), labels = ids on assistant pieces, IGNORE_INDEX elsewhere."""
    ids: list[int] = []
    labels: list[int] = []
    for text, train in chat_pieces(tokenizer, example):
        piece_ids = list(tokenizer.encode(text, add_special_tokens=False))
        ids += piece_ids
        labels += piece_ids if train else [IGNORE_INDEX] * len(piece_ids)
    return ids, labels
