"""OpenAIBackend.generate_interruptible against an in-memory transport: a streamed reply is
assembled into the unstreamed one, an interrupt cuts it (keeping the ids read, their text
decoded again), and a malformed stream is an error naming the URL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from agentmath.backends.base import Generation, Interruptible, SamplingParams
from agentmath.backends.openai import OpenAIBackend
from agentmath.errors import BackendError

URL = "http://vllm.test:8000"
SAMPLING = SamplingParams(temperature=0.0, logprobs=True)


def chunk(ids: list[int], text: str, finish: str | None = None,
          stop_reason: Any = None) -> str:
    """One vLLM-shaped streamed chunk (``return_token_ids``, ``logprobs=0``)."""
    choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish,
              "stop_reason": stop_reason,
              "logprobs": {"token_logprobs": [-0.25] * len(ids), "tokens": ["x"] * len(ids)}}
    return "data: " + json.dumps({"id": "cmpl-1", "choices": [choice]}) + "\n\n"


USAGE = "data: " + json.dumps({"id": "cmpl-1", "choices": [], "usage": {
    "prompt_tokens": 3, "completion_tokens": 4,
    "prompt_tokens_details": {"cached_tokens": 2}}}) + "\n\n"


class Streams:
    """A transport answering ``/v1/completions`` with the given events (then, with ``hang``,
    nothing more until the client goes away) and ``/detokenize`` with a fixed text."""

    def __init__(self, events: list[str], *, hang: bool = False) -> None:
        self.events, self.hang = events, hang
        self.paths: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.closed = asyncio.Event()

    async def _body(self) -> AsyncIterator[bytes]:
        try:
            for event in self.events:
                yield event.encode()
            if self.hang:
                await asyncio.Event().wait()
        finally:
            self.closed.set()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        self.bodies.append(json.loads(request.content))
        if request.url.path == "/detokenize":
            return httpx.Response(200, json={"prompt": "decoded"})
        return httpx.Response(200, content=self._body(),
                              headers={"content-type": "text/event-stream"})


def backend(handler: Callable[..., Any]) -> OpenAIBackend:
    return OpenAIBackend(URL, "tiny", transport=httpx.MockTransport(handler), backoff_s=0.001,
                         max_retries=1)


async def _generate(server: Streams, interrupt: asyncio.Event) -> Generation:
    client = backend(server)
    try:
        return await client.generate_interruptible([1, 2, 3], stop=["</code>"], max_tokens=50,
                                                   sampling=SAMPLING, interrupt=interrupt)
    finally:
        await client.aclose()


def test_a_whole_stream_is_the_unstreamed_reply() -> None:
    assert isinstance(backend(Streams([])), Interruptible)
    server = Streams([chunk([5], "a"), chunk([6, 7], "bc"),
                      chunk([8], "</code>", "stop", "</code>"), USAGE, "data: [DONE]\n\n"])
    gen = asyncio.run(_generate(server, asyncio.Event()))
    assert gen.token_ids == [5, 6, 7, 8] and gen.text == "abc</code>"
    assert gen.finish_reason == "stop" and gen.stop_string == "</code>"
    assert gen.logprobs == [-0.25] * 4 and not gen.interrupted
    assert gen.info["cached_tokens"] == 2
    body = server.bodies[0]
    assert body["stream"] is True and body["return_token_ids"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_an_interrupt_keeps_the_ids_read_and_decodes_their_text_again() -> None:
    server = Streams([chunk([5], "a"), chunk([6, 7], "b")], hang=True)

    async def main() -> Generation:
        interrupt = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, interrupt.set)  # the stream hangs by then
        gen = await _generate(server, interrupt)
        await asyncio.wait_for(server.closed.wait(), 5)  # the stream was closed (vLLM aborts)
        return gen

    gen = asyncio.run(main())
    assert gen.token_ids == [5, 6, 7] and gen.finish_reason == "length"
    assert gen.interrupted is True and gen.logprobs == [-0.25] * 3
    assert gen.text == "decoded"  # from /detokenize, not the lagging streamed "ab"
    assert server.paths == ["/v1/completions", "/detokenize"]
    assert server.bodies[1]["tokens"] == [5, 6, 7]


def test_an_interrupt_before_the_call_sends_nothing() -> None:
    server = Streams([chunk([5], "a")])
    interrupt = asyncio.Event()
    interrupt.set()
    gen = asyncio.run(_generate(server, interrupt))
    assert gen.token_ids == [] and gen.interrupted is True and server.paths == []


def test_an_interrupt_after_the_last_chunk_keeps_the_whole_reply() -> None:
    server = Streams([chunk([5], "a"), chunk([6], "b", "length")], hang=True)

    async def main() -> Generation:
        interrupt = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, interrupt.set)
        return await _generate(server, interrupt)

    gen = asyncio.run(main())  # finished (finish_reason came) before the interrupt
    assert gen.token_ids == [5, 6] and gen.text == "ab" and not gen.interrupted


@pytest.mark.parametrize("event, says", [
    ("data: {not json\n\n", "not JSON"),
    ("data: " + json.dumps({"choices": "x"}) + "\n\n", "choices is not a list"),
    ("data: " + json.dumps({"choices": [{"text": "a", "token_ids": 5}]}) + "\n\n",
     "token_ids is not a list"),
])
def test_a_malformed_stream_names_the_url_and_what_was_wrong(event: str, says: str) -> None:
    server = Streams([event, "data: [DONE]\n\n"])
    with pytest.raises(BackendError) as caught:
        asyncio.run(_generate(server, asyncio.Event()))
    assert URL in str(caught.value) and says in str(caught.value)
    assert len(server.paths) == 2  # a malformed reply is retried once (max_retries=1)
