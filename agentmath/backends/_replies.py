"""Validation of the replies of an OpenAI-compatible server, field by field.

A server (or a proxy in front of it) can answer 200 with a body of the wrong shape: null token
ids, ``text: null``, ``usage`` that is a list, ``logprobs`` of the wrong length, a tokenizer
that returns strings. Each field agentmath uses is checked here before it is used, and any
surprise is a :class:`MalformedReply` (a :class:`~agentmath.errors.BackendError`) whose message
names the URL and the field, never a ``TypeError`` deep in the agent loop.

A malformed reply is retried by the backend (a proxy hiccup or an overloaded server can garble
one response); a reply that is well-formed but says the server lacks a feature (no
``token_ids`` field at all) is a plain BackendError and is not. :class:`Retryable` is the
backend's word for any attempt worth another (a status, a transport error, a timeout).

Also here, for the same reason (reading what a server sent): :func:`retry_after_s` (a
``Retry-After`` header) and :func:`prometheus_sum` (a counter of a ``/metrics`` page), both
re-exported by :mod:`agentmath.backends.openai`.
"""

from __future__ import annotations

import email.utils
import json
import math
import reprlib
from datetime import UTC, datetime
from typing import Any

from agentmath.backends.base import FinishReason, Generation
from agentmath.errors import BackendError

_SNIPPET = 300
MAX_TOKEN_ID = 2**31 - 1  # far above any vocabulary; a bigger "id" is garbage
_MAX_LOGPROB = 1e-3  # a log-probability is <= 0; this leaves room for rounding only
NO_TOKEN_IDS_MESSAGE = (
    "the server at {url} did not return the sampled token ids (choices[0].token_ids); "
    "token-exact generation needs a server that returns them, such as vLLM >= 0.10.2 with "
    "'return_token_ids: true'. agentmath does not re-tokenize generated text."
)


class MalformedReply(BackendError):
    """A reply whose shape is wrong (a field missing, null, of the wrong type or size)."""


class Retryable(Exception):
    """An attempt failed in a way worth retrying; ``detail`` describes it, ``retry_after`` is
    the server's ``Retry-After`` in seconds when it sent one; ``unreachable``: the server did
    not answer (connection refused or reset, connect timeout, 502/503/504); ``hung``: it took
    the request and gave no answer within the timeout; ``refused``: nothing listens at its
    address (the connection was refused: the server process is gone, and one that answers
    later has restarted; a dropped connection alone may be a keep-alive race)."""

    def __init__(self, detail: str, retry_after: float | None = None,
                 unreachable: bool = False, hung: bool = False, refused: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after
        self.unreachable = unreachable
        self.hung = hung
        self.refused = refused


def snippet(value: Any) -> str:
    """A short JSON rendering of ``value`` for error messages (a bounded repr when the value
    cannot be rendered: nested too deep, or not JSON at all)."""
    try:
        text = json.dumps(value, default=str)
    except (ValueError, TypeError, RecursionError):
        text = reprlib.repr(value)
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def text_field(value: Any, url: str, field: str) -> str:
    """A string that is valid Unicode (JSON can smuggle in lone surrogates, which could not
    be written to a UTF-8 file later)."""
    if not isinstance(value, str):
        raise malformed(url, field, f"must be a string, not {_kind(value)}", value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise malformed(url, field, "is not valid Unicode (lone surrogate)") from None
    return value


def _kind(value: Any) -> str:
    """The JSON name of a value's type (``null``, ``string``, ``list``...)."""
    if value is None:
        return "null"
    names = {bool: "boolean", str: "string", list: "list", dict: "object"}
    return names.get(type(value), "number" if isinstance(value, int | float) else
                     type(value).__name__)


def malformed(url: str, field: str, problem: str, value: Any = ...) -> MalformedReply:
    """A MalformedReply saying which field of which URL's reply is wrong, and how."""
    shown = "" if value is ... else f" (got {snippet(value)})"
    return MalformedReply(f"malformed reply from {url}: {field} {problem}{shown}")


def expect_object(value: Any, url: str, field: str) -> dict[str, Any]:
    """``value`` if it is a JSON object, else a MalformedReply naming ``field``."""
    if not isinstance(value, dict):
        raise malformed(url, field, f"must be an object, not {_kind(value)}", value)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def token_ids(value: Any, url: str, field: str) -> list[int]:
    """A list of token ids (integers in ``[0, MAX_TOKEN_ID]``); the first bad one is named."""
    if not isinstance(value, list):
        raise malformed(url, field, f"must be a list of token ids, not {_kind(value)}", value)
    for index, item in enumerate(value):
        if not _is_int(item) or not 0 <= item <= MAX_TOKEN_ID:
            raise malformed(url, f"{field}[{index}]", "must be a non-negative integer token "
                            f"id, not {_kind(item)}", item)
    return list(value)


def _count(value: Any, url: str, field: str) -> int | None:
    """An optional non-negative integer count (usage fields)."""
    if value is None:
        return None
    if not _is_int(value) or value < 0:
        raise malformed(url, field, "must be a non-negative integer", value)
    return int(value)


def usage(data: dict[str, Any], url: str) -> dict[str, Any] | None:
    """The ``usage`` object (None when absent); its counts must be non-negative integers."""
    raw = data.get("usage")
    if raw is None:
        return None
    raw = expect_object(raw, url, "usage")
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        _count(raw.get(name), url, f"usage.{name}")
    details = raw.get("prompt_tokens_details")
    if details is not None:
        details = expect_object(details, url, "usage.prompt_tokens_details")
        _count(details.get("cached_tokens"), url, "usage.prompt_tokens_details.cached_tokens")
    return raw


def first_choice(data: Any, url: str) -> dict[str, Any]:
    """``choices[0]`` of a completion reply, checked to be an object. A body that carries an
    ``error`` instead (some servers answer 200 with one) has it quoted in the message."""
    body = expect_object(data, url, "the response body")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        said = f"; the server said: {snippet(body['error'])}" if "error" in body else ""
        raise malformed(url, "choices", f"must be a non-empty list{said}", choices)
    return expect_object(choices[0], url, "choices[0]")


def _finish(choice: dict[str, Any], url: str) -> tuple[FinishReason, str | None]:
    """Map vLLM's ``finish_reason``/``stop_reason`` onto stop / eos / length."""
    reason, stop_reason = choice.get("finish_reason"), choice.get("stop_reason")
    if stop_reason is not None and not isinstance(stop_reason, str) and not _is_int(stop_reason):
        raise malformed(url, "choices[0].stop_reason", "must be null, a string or a token id",
                        stop_reason)
    if reason == "length":
        return "length", None
    if reason == "stop":
        if isinstance(stop_reason, str):
            return "stop", stop_reason
        return "eos", None  # EOS (stop_reason None) or a stop token id (an int)
    raise malformed(url, "choices[0].finish_reason", "must be 'stop' or 'length'", reason)


def _is_logprob(value: Any) -> bool:
    """Whether ``value`` is a log-probability as a reply writes one: a number (not a bool),
    not NaN, at most ``_MAX_LOGPROB`` (0 up to rounding); -inf included."""
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and not math.isnan(value) and value <= _MAX_LOGPROB)


def _logprobs(choice: dict[str, Any], n_tokens: int, url: str) -> list[float]:
    """The sampled tokens' logprobs (``logprobs.token_logprobs``), one per token id.

    A null entry (vLLM's way of saying -inf) becomes ``-inf``; NaN, +inf or a non-number is
    malformed.
    """
    block = expect_object(choice.get("logprobs"), url, "choices[0].logprobs")
    raw = block.get("token_logprobs")
    field = "choices[0].logprobs.token_logprobs"
    if not isinstance(raw, list):
        raise malformed(url, field, f"must be a list, not {_kind(raw)}", raw)
    if len(raw) != n_tokens:
        raise malformed(url, field, f"has {len(raw)} entries for {n_tokens} token ids")
    out: list[float] = []
    for index, value in enumerate(raw):
        if value is None:
            out.append(float("-inf"))
            continue
        if not _is_logprob(value):
            raise malformed(url, f"{field}[{index}]", "must be a log-probability (a number "
                            "<= 0) or null", value)
        out.append(float(value))
    return out


def completion(data: Any, url: str, want_logprobs: bool, max_tokens: int) -> Generation:
    """A :class:`Generation` from a ``/v1/completions`` reply that carries token ids.

    The echoed ``prompt_token_ids`` (kept in ``info``) are checked for shape only: servers
    differ in what they echo, and the ids sent are what the trajectory records anyway.
    """
    choice = first_choice(data, url)
    text = text_field(choice.get("text"), url, "choices[0].text")
    if "token_ids" not in choice:
        raise BackendError(NO_TOKEN_IDS_MESSAGE.format(url=url))
    ids = token_ids(choice["token_ids"], url, "choices[0].token_ids")
    if len(ids) > max_tokens:
        raise malformed(url, "choices[0].token_ids", f"has {len(ids)} tokens but max_tokens "
                        f"was {max_tokens}")
    if not ids and text:
        raise malformed(url, "choices[0].token_ids", "is empty but text is not", text)
    finish_reason, stop_string = _finish(choice, url)
    logprobs = _logprobs(choice, len(ids), url) if want_logprobs else None
    info: dict[str, Any] = {"stop_reason": choice.get("stop_reason")}
    if choice.get("prompt_token_ids") is not None:
        info["prompt_token_ids"] = token_ids(choice["prompt_token_ids"], url,
                                             "choices[0].prompt_token_ids")
    counts = usage(data, url)
    if counts is not None:
        info["usage"] = counts
        cached = (counts.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            info["cached_tokens"] = cached
    return Generation(token_ids=ids, text=text, finish_reason=finish_reason,
                      stop_string=stop_string, logprobs=logprobs, info=info)


def tokens(data: Any, url: str, non_empty: bool) -> list[int]:
    """The ``tokens`` list of a ``/tokenize`` reply (``non_empty``: the input had text, so
    an empty list is wrong)."""
    body = expect_object(data, url, "the response body")
    ids = token_ids(body.get("tokens"), url, "tokens")
    if non_empty and not ids:
        raise malformed(url, "tokens", "is empty for a non-empty input")
    return ids


def _chat_logprobs(choice: dict[str, Any], n_tokens: int, url: str) -> list[float]:
    """The sampled tokens' logprobs of a chat reply (``logprobs.content[i].logprob``), one
    per sampled token id."""
    block = expect_object(choice.get("logprobs"), url, "choices[0].logprobs")
    content = block.get("content")
    field = "choices[0].logprobs.content"
    if not isinstance(content, list):
        raise malformed(url, field, f"must be a list, not {_kind(content)}", content)
    if len(content) != n_tokens:
        raise malformed(url, field, f"has {len(content)} entries for {n_tokens} token ids")
    out: list[float] = []
    for index, entry in enumerate(content):
        value = expect_object(entry, url, f"{field}[{index}]").get("logprob")
        if not _is_logprob(value):
            raise malformed(url, f"{field}[{index}].logprob", "must be a log-probability (a "
                            "number <= 0)", value)
        out.append(float(value))
    return out


def chat_message(data: Any, url: str) -> dict[str, Any]:
    """The assistant message of a ``/v1/chat/completions`` reply, plus ``finish_reason`` and,
    where reported, ``token_ids`` (the sampled ids), ``prompt_token_ids`` (the ids of the
    prompt the server rendered: vLLM reports both with ``return_token_ids``), ``logprobs``
    (the sampled ids' logprobs, a list of floats, when asked for with ``logprobs`` and the
    ids came back) and ``usage``; every one of them checked."""
    choice = first_choice(data, url)
    message = dict(expect_object(choice.get("message"), url, "choices[0].message"))
    if message.get("content") is not None:
        text_field(message["content"], url, "choices[0].message.content")
    calls = message.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise malformed(url, "choices[0].message.tool_calls", "must be a list or null",
                            calls)
        for index, call in enumerate(calls):
            # Only the shape is checked: a bad name or bad arguments are the model's doing,
            # and the format records them as a tool error that the model then reads.
            expect_object(call, url, f"choices[0].message.tool_calls[{index}]")
    reason = choice.get("finish_reason")
    if not isinstance(reason, str):
        raise malformed(url, "choices[0].finish_reason", "must be a string", reason)
    message["finish_reason"] = reason
    if choice.get("token_ids") is not None:
        message["token_ids"] = token_ids(choice["token_ids"], url, "choices[0].token_ids")
        if choice.get("logprobs") is not None:
            message["logprobs"] = _chat_logprobs(choice, len(message["token_ids"]), url)
    if data.get("prompt_token_ids") is not None:
        message["prompt_token_ids"] = token_ids(data["prompt_token_ids"], url,
                                                "prompt_token_ids")
    counts = usage(data, url)
    if counts is not None:
        message["usage"] = counts
    return message


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds (``"7"``, ``"1.5"``) or
    an HTTP date (a date in the past means now); None when absent or unreadable."""
    if not value or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def prometheus_sum(text: str, name: str) -> float | None:
    """The sum of every sample of metric ``name`` (over all label sets) in a Prometheus text
    exposition; None when there is none."""
    total, found = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name):]
        if rest.startswith("{"):
            rest = rest[rest.rfind("}") + 1:]
        elif not rest[:1].isspace():
            continue  # another metric whose name starts with this one
        fields = rest.split()
        try:
            total += float(fields[0])
        except (IndexError, ValueError):
            continue
        found = True
    return total if found else None
