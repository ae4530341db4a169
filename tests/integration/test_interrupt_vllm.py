"""A real vLLM (CPU) server's generation cut short (``OpenAIBackend.generate_interruptible``):
the ids streamed before the interrupt are a prefix of the uncut greedy run, the server stops
generating (closing the stream aborts the request), and continuing from the cut ids gives the
rest of the uncut run, as partial rollout's ``interrupt_turns`` needs."""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest

from agentmath.backends import _stream
from agentmath.backends._replies import prometheus_sum
from agentmath.backends.base import Generation, SamplingParams
from agentmath.backends.openai import OpenAIBackend

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

GREEDY = SamplingParams(temperature=0.0, seed=0)
LONG = 1_900  # of the 2,048 the server holds


def _backend(url: str) -> OpenAIBackend:
    # ignore_eos: the tiny model must not end its turn before the interrupt
    return OpenAIBackend(url, "tiny", timeout_s=120, max_retries=1,
                         extra_body={"ignore_eos": True})


def _prompt() -> list[int]:
    rng = random.Random(7)
    return [rng.randrange(20, 520) for _ in range(40)]


def _metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return prometheus_sum(text, name) or 0.0


async def _cut_after(backend: OpenAIBackend, tokens: int) -> Generation:
    """A long greedy generation, interrupted once the client has read ``tokens`` streamed
    token ids (a chunk holds one, or more when the client lags behind the server)."""
    interrupt = asyncio.Event()
    add = _stream._Body.add

    def counted(body: _stream._Body, data: str) -> None:
        add(body, data)
        if len(body.ids) >= tokens:
            interrupt.set()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_stream._Body, "add", counted)
        return await backend.generate_interruptible(_prompt(), stop=["</never>"],
                                                    max_tokens=LONG, sampling=GREEDY,
                                                    interrupt=interrupt)


def test_a_streamed_generation_is_cut_at_the_interrupt_and_continues_exactly(
        vllm_server: str) -> None:
    url = vllm_server

    async def main() -> tuple[Generation, Generation, Generation, float, Generation]:
        backend = _backend(url)
        try:
            started = time.monotonic()
            cut = await _cut_after(backend, 50)
            returned = time.monotonic() - started
            n = len(cut.token_ids)
            rest = await backend.generate(_prompt() + cut.token_ids, stop=["</never>"],
                                          max_tokens=40, sampling=GREEDY)
            whole = await backend.generate(_prompt(), stop=["</never>"], max_tokens=n + 40,
                                           sampling=GREEDY)
            ready = asyncio.Event()
            ready.set()
            at_once = await backend.generate_interruptible(
                _prompt(), stop=[], max_tokens=10, sampling=GREEDY, interrupt=ready)
            return cut, rest, whole, returned, at_once
        finally:
            await backend.aclose()

    cut, rest, whole, returned, at_once = asyncio.run(main())
    n = len(cut.token_ids)
    assert cut.finish_reason == "length" and cut.interrupted is True
    # cut soon after the 50th token: chunks already buffered may still be read first
    assert 50 <= n < LONG and returned < 30
    assert cut.logprobs is not None and len(cut.logprobs) == n
    assert cut.token_ids == whole.token_ids[:n]  # greedy: the uncut run's prefix
    assert rest.token_ids == whole.token_ids[n:]  # and continued from its ids, the rest
    assert whole.text.startswith(cut.text)  # the cut's text decoded again from its ids
    # closing the stream aborted the request: the server is not still writing 1,900 tokens
    deadline = time.monotonic() + 10
    while _metric(url, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _metric(url, "vllm:num_requests_running") == 0
    assert at_once.token_ids == [] and at_once.interrupted is True


def test_an_uninterrupted_stream_is_the_unstreamed_reply(vllm_server: str) -> None:
    async def main() -> tuple[Generation, Generation]:
        backend = OpenAIBackend(vllm_server, "tiny", timeout_s=120, max_retries=1)
        try:
            never = asyncio.Event()
            streamed = await backend.generate_interruptible(
                _prompt(), stop=["\n"], max_tokens=30, sampling=GREEDY, interrupt=never)
            plain = await backend.generate(_prompt(), stop=["\n"], max_tokens=30,
                                           sampling=GREEDY)
            return streamed, plain
        finally:
            await backend.aclose()

    streamed, plain = asyncio.run(main())
    assert not streamed.interrupted
    assert streamed.token_ids == plain.token_ids and streamed.text == plain.text
    assert streamed.finish_reason == plain.finish_reason
    assert streamed.stop_string == plain.stop_string
    assert streamed.logprobs == pytest.approx(plain.logprobs, abs=1e-4)
    assert streamed.info.get("usage", {}).get("completion_tokens") == len(plain.token_ids)
