"""What reading a completion as a stream costs the client (``OpenAIBackend``).

Run: ``.venv/bin/python benchmarks/stream_client.py`` (``--quick``: fewer replies; ``--json``).

``rollout.interrupt_turns`` makes the backend stream every completion
(``generate_interruptible``) so that a running turn can be cut; the unstreamed ``generate`` is
the baseline. Both read the same replies, vLLM-shaped (``return_token_ids``, ``logprobs=0``),
from an in-memory transport, so that only the client's own work is timed (HTTP framing, JSON,
assembly, validation), on one thread: CPU microseconds per generated token, by how many tokens
vLLM puts in one streamed chunk (its ``--stream-interval``; 1 by default). A client that reads
R tokens per second for its whole fleet spends R x that figure of a CPU per second on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from agentmath.backends.base import SamplingParams
from agentmath.backends.openai import OpenAIBackend

SAMPLING = SamplingParams(temperature=1.0, logprobs=True)


def _choice(ids: list[int], finish: str | None) -> dict[str, Any]:
    return {"index": 0, "text": "x" * len(ids), "token_ids": ids, "finish_reason": finish,
            "stop_reason": None, "logprobs": {"token_logprobs": [-0.5] * len(ids),
                                              "tokens": ["x"] * len(ids),
                                              "text_offset": list(range(len(ids))),
                                              "top_logprobs": [{"x": -0.5}] * len(ids)}}


def unstreamed(tokens: int) -> bytes:
    body = {"id": "cmpl-1", "object": "text_completion", "model": "tiny",
            "choices": [_choice(list(range(100, 100 + tokens)), "length")],
            "usage": {"prompt_tokens": 100, "completion_tokens": tokens}}
    return json.dumps(body).encode()


def streamed(tokens: int, interval: int) -> list[bytes]:
    events = []
    for start in range(0, tokens, interval):
        ids = list(range(100 + start, 100 + min(tokens, start + interval)))
        finish = "length" if start + interval >= tokens else None
        events.append(b"data: " + json.dumps({"id": "cmpl-1", "object": "text_completion",
                                               "model": "tiny",
                                               "choices": [_choice(ids, finish)]}).encode()
                      + b"\n\n")
    events.append(b"data: " + json.dumps({"id": "cmpl-1", "choices": [], "usage": {
        "prompt_tokens": 100, "completion_tokens": tokens}}).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


async def _reply(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


def _backend(events: list[bytes] | None, body: bytes | None) -> OpenAIBackend:
    def handler(request: httpx.Request) -> httpx.Response:
        if events is None:
            return httpx.Response(200, content=body,
                                  headers={"content-type": "application/json"})
        return httpx.Response(200, content=_reply(events),
                              headers={"content-type": "text/event-stream"})

    return OpenAIBackend("http://bench.test", "tiny",
                         transport=httpx.MockTransport(handler))


async def _read(backend: OpenAIBackend, replies: int, tokens: int, stream: bool) -> float:
    """CPU seconds (this thread) to read ``replies`` replies of ``tokens`` tokens."""
    never = asyncio.Event()
    prompt = list(range(100))
    start = time.thread_time()
    for _ in range(replies):
        if stream:
            gen = await backend.generate_interruptible(prompt, stop=[], max_tokens=tokens,
                                                       sampling=SAMPLING, interrupt=never)
        else:
            gen = await backend.generate(prompt, stop=[], max_tokens=tokens,
                                         sampling=SAMPLING)
        assert len(gen.token_ids) == tokens
    return time.thread_time() - start


async def measure(replies: int, tokens: int, intervals: list[int]) -> list[dict[str, Any]]:
    rows = []
    cases: list[tuple[str, int | None]] = [("generate (unstreamed)", None)]
    cases += [(f"generate_interruptible, {n} token(s) per chunk", n) for n in intervals]
    for name, interval in cases:
        backend = _backend(None if interval is None else streamed(tokens, interval),
                           unstreamed(tokens) if interval is None else None)
        try:
            await _read(backend, 3, tokens, interval is not None)  # warm up
            cpu = await _read(backend, replies, tokens, interval is not None)
        finally:
            await backend.aclose()
        rows.append({"reader": name, "tokens_per_chunk": interval,
                     "cpu_us_per_token": cpu / (replies * tokens) * 1e6})
    base = rows[0]["cpu_us_per_token"]
    for row in rows:
        row["vs_unstreamed"] = row["cpu_us_per_token"] / base
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer replies")
    parser.add_argument("--tokens", type=int, default=1000, help="tokens per reply")
    parser.add_argument("--intervals", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    ns = parser.parse_args()
    if ns.tokens < 1 or any(n < 1 for n in ns.intervals):
        parser.error("--tokens and --intervals must be at least 1")
    replies = 5 if ns.quick else 40
    rows = asyncio.run(measure(replies, ns.tokens, ns.intervals))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._common import print_table

    if ns.json:
        print(json.dumps({"replies": replies, "tokens": ns.tokens, "rows": rows}))
        return
    print_table(f"client CPU per generated token ({replies} replies of {ns.tokens} tokens, "
                "one thread)", ["reader", "CPU us / token", "vs unstreamed"],
                [[r["reader"], f"{r['cpu_us_per_token']:.1f}", f"{r['vs_unstreamed']:.2f}x"]
                 for r in rows])


if __name__ == "__main__":
    main()
