"""A streamed ``/v1/completions`` reply, assembled into the body of an unstreamed one, and cut
short on request: how :class:`~agentmath.backends.openai.OpenAIBackend` is
:class:`~agentmath.backends.base.Interruptible`.

vLLM streams server-sent events (``data: {json}`` lines, ``data: [DONE]`` at the end); with
``return_token_ids`` each chunk's ``choices[0]`` carries the ids sampled since the last chunk
(``token_ids``), their text, their logprobs and, on the last one, ``finish_reason``. The chunks
are concatenated into one body of the unstreamed shape, so that one validator
(:func:`agentmath.backends._replies.completion`) reads both. When the interrupt event is set
the stream is left (closing the connection, which makes vLLM abort the request) and the body
holds what came so far, with ``finish_reason`` "length" and :data:`INTERRUPTED` set.

The text of a cut reply is not trusted: vLLM holds back text that may begin a stop string
until it knows, so the streamed text can lag the ids. The backend re-decodes the ids instead.

Written here rather than taken from the ``openai`` SDK: the SDK's stream types drop vLLM's
``token_ids`` field (an extra the schema does not name), and the backend's retries, outage gate
and validation already sit on httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx

from agentmath.backends._replies import MalformedReply, expect_object, snippet

#: Set (True) in an assembled body whose stream was cut by the interrupt.
INTERRUPTED = "agentmath_interrupted"


async def post_streamed(client: httpx.AsyncClient, path: str, payload: dict[str, Any],
                        interrupt: asyncio.Event, url: str
                        ) -> tuple[httpx.Response, dict[str, Any] | None]:
    """POST ``payload`` (with ``stream``) and read its events until the end or the interrupt:
    the response and the assembled body (None when the status is not 2xx: the body was read
    for the caller's error message)."""
    async with client.stream("POST", path, json=payload) as response:
        if not 200 <= response.status_code < 300:
            await response.aread()
            return response, None
        return response, await assemble(response, interrupt, url)


async def assemble(response: httpx.Response, interrupt: asyncio.Event,
                   url: str) -> dict[str, Any]:
    """The events of ``response`` as one unstreamed completion body (module docstring)."""
    body = _Body(url)
    reader = asyncio.ensure_future(_read(response, body, interrupt))
    waiter = asyncio.ensure_future(interrupt.wait())
    try:
        await asyncio.wait({reader, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not reader.done():  # interrupted (or cancelled): stop reading; leaving the stream
            reader.cancel()  # then closes it, and vLLM aborts the request
            with contextlib.suppress(asyncio.CancelledError):
                await reader
    if reader.cancelled():
        return body.cut()
    return reader.result()


async def _read(response: httpx.Response, body: _Body,
                interrupt: asyncio.Event) -> dict[str, Any]:
    """Read events to the end of the stream (``data: [DONE]``) into ``body``, or until the
    interrupt (checked between chunks too: chunks already buffered are not read on; a
    stream with nothing to read is cancelled by :func:`assemble`). Cancelled only at an
    await, so that ``body`` always holds whole chunks."""
    async for line in response.aiter_lines():
        if interrupt.is_set():
            return body.cut()
        if not line.startswith("data:"):
            continue  # blank separators, comments, other SSE fields
        data = line[5:].strip()
        if data == "[DONE]":
            break
        body.add(data)
    return body.whole()


class _Body:
    """The concatenated ``choices[0]`` of a stream's chunks, and its usage."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.text: list[str] = []
        self.ids: list[Any] = []
        self.logprobs: list[Any] = []
        self.has_ids = self.has_logprobs = False
        self.finish: Any = None
        self.stop_reason: Any = None
        self.usage: Any = None

    def add(self, data: str) -> None:
        """One event's JSON: its choice's pieces appended (types checked by the reader of
        the assembled body; only the shapes that concatenation needs are checked here)."""
        try:
            chunk = expect_object(json.loads(data), self.url, "a streamed chunk")
        except (ValueError, RecursionError) as exc:
            raise MalformedReply(f"malformed reply from {self.url}: a streamed chunk is not "
                                 f"JSON: {snippet(data)}") from exc
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if not choices:  # the usage chunk at the end has none
            return
        if not isinstance(choices, list):
            raise MalformedReply(f"malformed reply from {self.url}: a streamed chunk's "
                                 f"choices is not a list: {snippet(choices)}")
        choice = expect_object(choices[0], self.url, "a streamed chunk's choices[0]")
        piece = choice.get("text")
        self.text.append(piece if isinstance(piece, str) else "")
        if choice.get("token_ids") is not None:
            self.has_ids = True
            self.ids.extend(_as_list(choice["token_ids"], self.url, "token_ids"))
        block = choice.get("logprobs")
        if isinstance(block, dict) and block.get("token_logprobs") is not None:
            self.has_logprobs = True
            self.logprobs.extend(_as_list(block["token_logprobs"], self.url,
                                          "logprobs.token_logprobs"))
        if choice.get("finish_reason") is not None:
            self.finish, self.stop_reason = choice["finish_reason"], choice.get("stop_reason")

    def whole(self) -> dict[str, Any]:
        """The body of a stream that ran to its end."""
        choice: dict[str, Any] = {"text": "".join(self.text), "finish_reason": self.finish,
                                  "stop_reason": self.stop_reason}
        if self.has_ids:
            choice["token_ids"] = self.ids
        if self.has_logprobs:
            choice["logprobs"] = {"token_logprobs": self.logprobs}
        body: dict[str, Any] = {"choices": [choice]}
        if self.usage is not None:
            body["usage"] = self.usage
        return body

    def cut(self) -> dict[str, Any]:
        """The body of a stream left at the interrupt (one that had finished stays whole)."""
        body = self.whole()
        choice = body["choices"][0]
        if choice["finish_reason"] is None:
            choice.update(finish_reason="length", stop_reason=None, token_ids=self.ids,
                          logprobs={"token_logprobs": self.logprobs})
            body[INTERRUPTED] = True
        return body


def _as_list(value: Any, url: str, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise MalformedReply(f"malformed reply from {url}: a streamed chunk's "
                             f"choices[0].{field} is not a list: {snippet(value)}")
    return value
