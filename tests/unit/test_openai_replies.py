"""OpenAIBackend against malformed server replies and Retry-After: every wrong shape is a
BackendError naming the URL and the field (retried, then given up), never a TypeError."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from agentmath.backends import openai as openai_module
from agentmath.backends.base import SamplingParams
from agentmath.backends.openai import OpenAIBackend, retry_after_s
from agentmath.errors import BackendError
from tests.fixtures.fault_server import with_path
from tests.unit.test_openai_backend_unit import URL, Recorder, completion

GREEDY = SamplingParams(temperature=0.0, logprobs=True)
Body = dict[str, Any]


def backend(rec: Recorder, **kwargs: Any) -> OpenAIBackend:
    kwargs.setdefault("backoff_s", 0.0001)
    kwargs.setdefault("max_retries", 2)
    return OpenAIBackend(URL, "tiny", transport=httpx.MockTransport(rec), **kwargs)


edit = with_path  # a rewrite of a good completion that sets a dotted path


def replace(value: Any) -> Callable[[Body], Any]:
    return lambda _body: value


# (rewrite of a good completion, the field the error must name)
COMPLETION_FAULTS: list[tuple[Callable[[Body], Any], str]] = [
    (replace([]), "response body"),
    (replace(7), "response body"),
    (replace({"error": {"message": "model overloaded"}}), "model overloaded"),
    (edit("choices", None), "choices"),
    (edit("choices", []), "choices"),
    (edit("choices", {"0": {}}), "choices"),
    (edit("choices.0", None), "choices[0]"),
    (edit("choices.0.text", None), "choices[0].text"),
    (edit("choices.0.text", 17), "choices[0].text"),
    (edit("choices.0.token_ids", None), "choices[0].token_ids"),
    (edit("choices.0.token_ids", "5 6"), "choices[0].token_ids"),
    (edit("choices.0.token_ids", [5, None]), "choices[0].token_ids[1]"),
    (edit("choices.0.token_ids", [5, "6"]), "choices[0].token_ids[1]"),
    (edit("choices.0.token_ids", [5, 6.0]), "choices[0].token_ids[1]"),
    (edit("choices.0.token_ids", [-1, 6]), "choices[0].token_ids[0]"),
    (edit("choices.0.token_ids", [True, 6]), "choices[0].token_ids[0]"),
    (edit("choices.0.token_ids", [5, 2**40]), "choices[0].token_ids[1]"),
    (edit("choices.0.token_ids", [5, 6, 7, 8]), "max_tokens"),
    (edit("choices.0.logprobs", None), "choices[0].logprobs"),
    (edit("choices.0.logprobs", [-0.5, -0.5]), "choices[0].logprobs"),
    (edit("choices.0.logprobs.token_logprobs", None), "token_logprobs"),
    (edit("choices.0.logprobs.token_logprobs", {"a": 1}), "token_logprobs"),
    (edit("choices.0.logprobs.token_logprobs", [-0.5]), "token_logprobs"),
    (edit("choices.0.logprobs.token_logprobs", [-0.5, "x"]), "token_logprobs[1]"),
    (edit("choices.0.logprobs.token_logprobs", [-0.5, float("nan")]), "token_logprobs[1]"),
    (edit("choices.0.logprobs.token_logprobs", [-0.5, float("inf")]), "token_logprobs[1]"),
    (edit("choices.0.logprobs.token_logprobs", [3.0, -0.5]), "token_logprobs[0]"),
    (edit("choices.0.finish_reason", None), "choices[0].finish_reason"),
    (edit("choices.0.finish_reason", "abort"), "choices[0].finish_reason"),
    (edit("choices.0.stop_reason", ["</code>"]), "choices[0].stop_reason"),
    (edit("choices.0.prompt_token_ids", [1, None]), "choices[0].prompt_token_ids[1]"),
    (edit("usage", [1, 2]), "usage"),
    (edit("usage", "3 tokens"), "usage"),
    (edit("usage.prompt_tokens", "3"), "usage.prompt_tokens"),
    (edit("usage.completion_tokens", -2), "usage.completion_tokens"),
    (edit("usage.prompt_tokens_details", [0]), "usage.prompt_tokens_details"),
    (edit("usage.prompt_tokens_details.cached_tokens", "0"), "cached_tokens"),
]


@pytest.mark.parametrize(("rewrite", "field"), COMPLETION_FAULTS)
async def test_malformed_completion_is_a_backend_error(
        rewrite: Callable[[Body], Any], field: str) -> None:
    rec = Recorder(httpx.Response(200, content=json.dumps(rewrite(completion())).encode()))
    with pytest.raises(BackendError) as info:
        await backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    message = str(info.value)
    assert f"{URL}/v1/completions" in message and field in message
    assert "malformed reply" in message
    assert len(rec.requests) == 3  # a garbled reply is retried (max_retries=2)


async def test_a_malformed_reply_then_a_good_one_succeeds() -> None:
    rec = Recorder(httpx.Response(200, json=edit("choices.0.token_ids", [None])(completion())),
                   httpx.Response(200, content=b'{"choices": ['),
                   httpx.Response(200, json=completion()))
    gen = await backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert gen.token_ids == [5, 6] and len(rec.requests) == 3


@pytest.mark.parametrize("content", [b"<html>bad gateway</html>", b'{"choices": [',
                                     b"\xff\xfe\x00", b""])
async def test_a_body_that_is_not_json_is_retried_then_an_error(content: bytes) -> None:
    rec = Recorder(httpx.Response(200, content=content))
    with pytest.raises(BackendError, match="not JSON") as info:
        await backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert URL in str(info.value) and len(rec.requests) == 3


async def test_absent_token_ids_fail_at_once() -> None:
    body = completion()
    del body["choices"][0]["token_ids"]
    rec = Recorder(httpx.Response(200, json=body))
    with pytest.raises(BackendError, match="token-exact generation needs a server"):
        await backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert len(rec.requests) == 1  # a server without the feature: retrying cannot help


async def test_logprobs_unchecked_when_not_requested_and_null_means_minus_inf() -> None:
    body = edit("choices.0.logprobs", "garbage")(completion())
    gen = await backend(Recorder(httpx.Response(200, json=body))).generate(
        [1], stop=[], max_tokens=2, sampling=SamplingParams(logprobs=False))
    assert gen.logprobs is None
    body = edit("choices.0.logprobs.token_logprobs", [None, -1])(completion())
    gen = await backend(Recorder(httpx.Response(200, json=body))).generate(
        [1], stop=[], max_tokens=2, sampling=GREEDY)
    assert gen.logprobs == [float("-inf"), -1.0]


@pytest.mark.parametrize(("body", "field"), [
    ({"tokens": None}, "tokens"), ({"tokens": [1, None]}, "tokens[1]"),
    ({"tokens": ["a"]}, "tokens[0]"), ({}, "tokens"), ([1, 2], "response body"),
    ({"tokens": []}, "tokens"), ({"tokens": {"0": 1}}, "tokens"),
])
async def test_malformed_tokenize_is_a_backend_error(body: Any, field: str) -> None:
    rec = Recorder(httpx.Response(200, json=body))
    for call in (lambda b: b.tokenize("hi"),
                 lambda b: b.render_prompt([{"role": "user", "content": "x"}])):
        with pytest.raises(BackendError) as info:
            await call(backend(rec))
        assert f"{URL}/tokenize" in str(info.value) and field in str(info.value)


async def test_tokenize_of_empty_text_may_be_empty() -> None:
    assert await backend(Recorder(httpx.Response(200, json={"tokens": []}))).tokenize("") == []


def chat_body(**changes: Any) -> Body:
    choice = {"index": 0, "finish_reason": "stop",
              "message": {"role": "assistant", "content": "hi", "tool_calls": None}}
    body: Body = {"choices": [choice], "usage": {"prompt_tokens": 1}}
    for path, value in changes.items():
        body = edit(path.replace("__", "."), value)(body)
    return body


@pytest.mark.parametrize(("body", "field"), [
    (chat_body(choices__0__message=None), "choices[0].message"),
    (chat_body(choices__0__message__content=5), "choices[0].message.content"),
    (chat_body(choices__0__message__tool_calls={"a": 1}), "tool_calls"),
    (chat_body(choices__0__message__tool_calls=["call"]), "tool_calls[0]"),
    (chat_body(choices__0__finish_reason=None), "choices[0].finish_reason"),
    (chat_body(choices__0__token_ids=[None]), "choices[0].token_ids[0]"),
    (chat_body(usage=7), "usage"),
    ({"choices": "none"}, "choices"),
    (chat_body(prompt_token_ids=[1, -2]), "prompt_token_ids[1]"),
    (chat_body(choices__0__token_ids=[3], choices__0__logprobs={"content": []}),
     "choices[0].logprobs.content"),
    (chat_body(choices__0__token_ids=[3],
               choices__0__logprobs={"content": [{"logprob": "x"}]}),
     "choices[0].logprobs.content[0].logprob"),
])
async def test_malformed_chat_is_a_backend_error(body: Body, field: str) -> None:
    rec = Recorder(httpx.Response(200, json=body))
    with pytest.raises(BackendError) as info:
        await backend(rec).chat([{"role": "user", "content": "x"}])
    assert f"{URL}/v1/chat/completions" in str(info.value) and field in str(info.value)


async def test_chat_keeps_token_ids_and_usage() -> None:
    body = chat_body(choices__0__token_ids=[3, 4])
    out = await backend(Recorder(httpx.Response(200, json=body))).chat(
        [{"role": "user", "content": "x"}])
    assert out["token_ids"] == [3, 4] and out["usage"] == {"prompt_tokens": 1}
    assert out["content"] == "hi" and out["finish_reason"] == "stop"


async def test_chat_keeps_the_rendered_prompt_ids_and_the_logprobs() -> None:
    """vLLM's chat reply with ``return_token_ids`` and ``logprobs``: the prompt ids it
    rendered (top level) and one logprob per sampled id (kept only with the ids)."""
    body = chat_body(prompt_token_ids=[1, 2], choices__0__token_ids=[3, 4],
                     choices__0__logprobs={"content": [{"token": "a", "logprob": -0.5},
                                                       {"token": "b", "logprob": 0.0}]})
    out = await backend(Recorder(httpx.Response(200, json=body))).chat(
        [{"role": "user", "content": "x"}], return_token_ids=True, logprobs=True)
    assert (out["prompt_token_ids"], out["token_ids"], out["logprobs"]) == \
        ([1, 2], [3, 4], [-0.5, 0.0])
    plain = await backend(Recorder(httpx.Response(200, json=chat_body()))).chat(
        [{"role": "user", "content": "x"}])
    assert "prompt_token_ids" not in plain and "logprobs" not in plain


def test_retry_after_parsing() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_s("7") == 7.0 and retry_after_s(" 1.5 ") == 1.5
    assert retry_after_s(format_datetime(now + timedelta(seconds=30), usegmt=True),
                         now=now) == 30.0
    assert retry_after_s(format_datetime(now - timedelta(hours=1), usegmt=True), now=now) == 0.0
    assert retry_after_s("-3") == 0.0
    for bad in (None, "", "soon", "nan", "inf", "Mon, 99 Foo 2025"):
        assert retry_after_s(bad) is None


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Records the backend's backoff sleeps (and skips them)."""
    recorded: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        recorded.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(openai_module.asyncio, "sleep", fake_sleep)
    return recorded


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_is_honoured(status: int, sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(status, headers={"Retry-After": "3"}),
                   httpx.Response(200, json=completion()))
    gen = await backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert gen.token_ids == [5, 6] and sleeps == [3.0]


async def test_retry_after_http_date_and_cap(sleeps: list[float]) -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(hours=2), usegmt=True)
    rec = Recorder(httpx.Response(503, headers={"Retry-After": later}),
                   httpx.Response(429, headers={"Retry-After": "1e9"}),
                   httpx.Response(200, json=completion()))
    await backend(rec, max_retry_after_s=5).generate([1], stop=[], max_tokens=2,
                                                     sampling=GREEDY)
    assert sleeps == [5.0, 5.0]


async def test_retry_after_ignored_elsewhere_and_408_retried(sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(500, headers={"Retry-After": "50"}),
                   httpx.Response(408), httpx.Response(200, json=completion()))
    await backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert len(rec.requests) == 3 and all(s < 1 for s in sleeps)


async def test_retry_budget_is_configurable() -> None:
    rec = Recorder(httpx.Response(503))
    with pytest.raises(BackendError, match="failed after 1 attempt: HTTP 503"):
        await backend(rec, max_retries=0).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert len(rec.requests) == 1
    with pytest.raises(ValueError, match="timeout_s"):
        OpenAIBackend(URL, "tiny", timeout_s=0)


async def test_redirects_and_other_statuses_fail_clearly() -> None:
    rec = Recorder(httpx.Response(302, headers={"Location": "/elsewhere"}))
    with pytest.raises(BackendError, match="HTTP 302"):
        await backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert len(rec.requests) == 1


@pytest.mark.parametrize(("content", "field"), [
    (json.dumps(completion(text="a\ud800b")).encode(), "choices[0].text"),  # lone surrogate
    (b"[" * 100_000 + b"]" * 100_000, "not JSON"),  # nested past the JSON parser's depth
    (json.dumps({"choices": [[[[[[[[[[[1]]]]]]]]]]]}).encode(), "choices[0]"),
])
async def test_hostile_bodies_are_backend_errors(content: bytes, field: str) -> None:
    rec = Recorder(httpx.Response(200, content=content))
    with pytest.raises(BackendError) as info:
        await backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert field in str(info.value) and len(str(info.value)) < 2000
