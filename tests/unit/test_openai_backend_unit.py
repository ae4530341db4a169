"""OpenAIBackend against an in-memory httpx transport: retries, errors, response mapping."""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agentmath.backends.base import Backend, SamplingParams
from agentmath.backends.openai import OpenAIBackend
from agentmath.errors import BackendError, MissingExtraError, ServerTimeout

URL = "http://vllm.test:8000"
GREEDY = SamplingParams(temperature=0.0, logprobs=True)


def completion(token_ids: list[int] | None = None, *, text: str = "ab",
               finish_reason: str = "stop", stop_reason: Any = None,
               logprobs: bool = True) -> dict[str, Any]:
    """A vLLM-shaped ``/v1/completions`` response body."""
    ids = [5, 6] if token_ids is None else token_ids
    choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish_reason,
                              "stop_reason": stop_reason, "token_ids": ids,
                              "prompt_token_ids": [1, 2, 3]}
    if logprobs:
        choice["logprobs"] = {"token_logprobs": [-0.5] * len(ids), "tokens": ["x"] * len(ids)}
    return {"id": "cmpl-1", "choices": [choice],
            "usage": {"prompt_tokens": 3, "completion_tokens": len(ids),
                      "prompt_tokens_details": {"cached_tokens": 0}}}


def make_backend(handler: Callable[[httpx.Request], httpx.Response],
                 **kwargs: Any) -> OpenAIBackend:
    kwargs.setdefault("backoff_s", 0.001)
    return OpenAIBackend(URL, "tiny", transport=httpx.MockTransport(handler), **kwargs)


class Recorder:
    """A handler that replays ``responses`` in order and records the requests."""

    def __init__(self, *responses: httpx.Response | Exception) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if isinstance(item, Exception):
            raise item
        return item

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def test_is_a_backend() -> None:
    assert isinstance(make_backend(Recorder(httpx.Response(200, json={}))), Backend)


async def test_request_payload_and_mapping() -> None:
    rec = Recorder(httpx.Response(200, json=completion(stop_reason="</code>", text="x</code>")))
    backend = make_backend(rec, api_key="sk-test")
    gen = await backend.generate([1, 2, 3], stop=["</code>"], max_tokens=7,
                                 sampling=SamplingParams(temperature=0.7, top_p=0.9, top_k=20,
                                                         seed=3, logprobs=True))
    await backend.aclose()
    body = rec.bodies[0]
    assert rec.requests[0].url == f"{URL}/v1/completions"
    assert rec.requests[0].headers["authorization"] == "Bearer sk-test"
    assert body["prompt"] == [1, 2, 3] and body["max_tokens"] == 7
    assert body["stop"] == ["</code>"] and body["include_stop_str_in_output"] is True
    assert body["return_token_ids"] is True and body["skip_special_tokens"] is False
    assert (body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (0.7, 0.9, 20, 3)
    assert body["logprobs"] == 0
    assert gen.token_ids == [5, 6] and gen.text == "x</code>"
    assert gen.finish_reason == "stop" and gen.stop_string == "</code>"
    assert gen.logprobs == [-0.5, -0.5]
    assert gen.info["prompt_token_ids"] == [1, 2, 3] and gen.info["cached_tokens"] == 0


@pytest.mark.parametrize(("finish_reason", "stop_reason", "expected"), [
    ("stop", None, "eos"), ("stop", 151643, "eos"), ("length", None, "length"),
])
async def test_finish_reasons(finish_reason: str, stop_reason: Any, expected: str) -> None:
    body = completion(finish_reason=finish_reason, stop_reason=stop_reason)
    backend = make_backend(Recorder(httpx.Response(200, json=body)))
    gen = await backend.generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert gen.finish_reason == expected and gen.stop_string is None


async def test_no_logprobs_requested() -> None:
    rec = Recorder(httpx.Response(200, json=completion(logprobs=False)))
    gen = await make_backend(rec).generate([1], stop=[], max_tokens=2,
                                           sampling=SamplingParams(logprobs=False))
    assert "logprobs" not in rec.bodies[0] and gen.logprobs is None


async def test_retries_on_503_then_succeeds() -> None:
    rec = Recorder(httpx.Response(503, text="overloaded"), httpx.Response(429, text="slow down"),
                   httpx.Response(200, json=completion()))
    gen = await make_backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert gen.token_ids == [5, 6] and len(rec.requests) == 3


async def test_retries_on_connection_error() -> None:
    rec = Recorder(httpx.ConnectError("refused"), httpx.Response(200, json=completion()))
    gen = await make_backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert gen.token_ids == [5, 6] and len(rec.requests) == 2


async def test_no_retry_on_400() -> None:
    rec = Recorder(httpx.Response(400, json={"error": {"message": "max_tokens is too large"}}))
    with pytest.raises(BackendError) as info:
        await make_backend(rec).generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert len(rec.requests) == 1
    message = str(info.value)
    assert "400" in message and "max_tokens is too large" in message and URL in message


async def test_gives_up_after_max_retries() -> None:
    rec = Recorder(httpx.Response(502, text="bad gateway"))
    with pytest.raises(BackendError) as info:
        await make_backend(rec, max_retries=2).generate([1], stop=[], max_tokens=2,
                                                        sampling=GREEDY)
    assert len(rec.requests) == 3
    assert "502" in str(info.value) and "bad gateway" in str(info.value)
    assert f"{URL}/v1/completions" in str(info.value)


async def test_a_timeout_fails_at_once_unless_timeout_retries_allow() -> None:
    """A request that gets no answer within timeout_s is not sent again to the same server
    (max_retries is for other faults): ServerTimeout naming the URL and the timeout;
    timeout_retries sends it again."""
    rec = Recorder(httpx.ReadTimeout("read timed out"))
    with pytest.raises(ServerTimeout, match="timed out after 0.5 s") as info:
        await make_backend(rec, max_retries=3, timeout_s=0.5).generate(
            [1], stop=[], max_tokens=2, sampling=GREEDY)
    assert len(rec.requests) == 1 and "after 1 attempt:" in str(info.value)
    assert info.value.url == f"{URL}/v1/completions" and info.value.timeout_s == 0.5
    assert pickle.loads(pickle.dumps(info.value)).url == info.value.url
    rec = Recorder(httpx.ReadTimeout("read timed out"))
    with pytest.raises(ServerTimeout, match="3 attempts"):
        await make_backend(rec, max_retries=3, timeout_s=0.5, timeout_retries=2).generate(
            [1], stop=[], max_tokens=2, sampling=GREEDY)
    assert len(rec.requests) == 3


async def test_slow_server_hits_the_deadline() -> None:
    import asyncio
    import time

    calls = []

    async def slow(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        await asyncio.sleep(5)
        return httpx.Response(200, json=completion())

    backend = OpenAIBackend(URL, "tiny", transport=httpx.MockTransport(slow), timeout_s=0.05,
                            max_retries=1, backoff_s=0.001)
    started = time.monotonic()
    with pytest.raises(ServerTimeout, match="timed out after 0.05 s"):
        await backend.generate([1], stop=[], max_tokens=2, sampling=GREEDY)
    assert len(calls) == 1 and time.monotonic() - started < 1


async def test_missing_token_ids_is_a_clear_error() -> None:
    body = completion()
    del body["choices"][0]["token_ids"]
    with pytest.raises(BackendError, match="token-exact generation needs a server") as info:
        await make_backend(Recorder(httpx.Response(200, json=body))).generate(
            [1], stop=[], max_tokens=2, sampling=GREEDY)
    assert "vLLM" in str(info.value)


async def test_logprob_count_mismatch_is_an_error() -> None:
    body = completion()
    body["choices"][0]["logprobs"]["token_logprobs"] = [-1.0]
    with pytest.raises(BackendError, match="logprobs"):
        await make_backend(Recorder(httpx.Response(200, json=body))).generate(
            [1], stop=[], max_tokens=2, sampling=GREEDY)


async def test_tokenize_and_render_via_server() -> None:
    rec = Recorder(httpx.Response(200, json={"tokens": [7, 8], "count": 2}))
    backend = make_backend(rec)
    assert await backend.tokenize("hi") == [7, 8]
    assert await backend.render_prompt([{"role": "user", "content": "hi"}]) == [7, 8]
    first, second = rec.bodies
    assert rec.requests[0].url == f"{URL}/tokenize"
    assert first == {"model": "tiny", "prompt": "hi", "add_special_tokens": False}
    assert second["messages"] == [{"role": "user", "content": "hi"}]
    assert second["add_generation_prompt"] is True


def test_base_url_with_v1_suffix() -> None:
    backend = OpenAIBackend(f"{URL}/v1/", "tiny")
    assert backend.base_url == URL


async def test_local_tokenizer_object_is_used() -> None:
    class FakeTokenizer:
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            assert add_special_tokens is False
            return [ord(c) for c in text]

        def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
            assert kwargs["add_generation_prompt"] is True and kwargs["tokenize"] is False
            return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<a>"

    def fail(request: httpx.Request) -> httpx.Response:
        raise AssertionError("no request expected")

    backend = make_backend(fail, tokenizer=FakeTokenizer())
    assert await backend.tokenize("ab") == [97, 98]
    assert await backend.render_prompt([{"role": "user", "content": "x"}]) == [
        ord(c) for c in "<user>x<a>"]


async def test_chat_returns_the_message() -> None:
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c1", "type": "function",
                               "function": {"name": "python", "arguments": "{}"}}]}
    rec = Recorder(httpx.Response(200, json={"choices": [
        {"index": 0, "message": message, "finish_reason": "tool_calls"}]}))
    out = await make_backend(rec).chat([{"role": "user", "content": "x"}],
                                       tools=[{"type": "function", "function": {"name": "python"}}])
    assert out["tool_calls"][0]["function"]["name"] == "python"
    assert out["finish_reason"] == "tool_calls"
    assert rec.requests[0].url == f"{URL}/v1/chat/completions" and "tools" in rec.bodies[0]


def test_vllm_engine_imports_without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    from agentmath.backends import vllm_engine

    with pytest.raises(MissingExtraError, match="agentmath\\[vllm\\]"):
        vllm_engine.VLLMBackend("/nonexistent/model")
