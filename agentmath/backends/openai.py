"""A token-exact backend over an OpenAI-compatible HTTP server (vLLM, SGLang-style servers).

``generate`` sends the prompt as a list of token ids to ``/v1/completions`` and records the
token ids the server *sampled* (vLLM returns them with ``return_token_ids``). Nothing is ever
re-tokenized from text: a server that does not return token ids is rejected with a
:class:`~agentmath.errors.BackendError` rather than silently approximated.

Tokenization (``tokenize``, ``render_prompt``) goes through the server's ``/tokenize`` endpoint,
so the chat template and tokenizer are the ones the server actually uses, or through a local
Hugging Face tokenizer when one is given. Nothing is cached: a model swapped behind the URL is
seen by the next call.

Retries: 429, 5xx, connection errors and timeouts are retried with exponential backoff and
jitter; other 4xx responses fail at once. Each attempt holds one slot of a semaphore bounding
the number of requests in flight; the backoff sleep does not.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from agentmath._lazy import require
from agentmath.backends.base import FinishReason, Generation, SamplingParams
from agentmath.errors import BackendError

_BODY_SNIPPET = 500
_MAX_BACKOFF_S = 30.0
NO_TOKEN_IDS_MESSAGE = (
    "the server at {url} did not return the sampled token ids (choices[0].token_ids); "
    "token-exact generation needs a server that returns them, such as vLLM >= 0.10.2 with "
    "'return_token_ids: true'. agentmath does not re-tokenize generated text."
)


class _Retryable(Exception):
    """An attempt failed in a way worth retrying; ``detail`` describes it."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class OpenAIBackend:
    """Token-exact generation against an OpenAI-compatible server that returns token ids.

    ``base_url`` is the server root (``http://host:port``; a trailing ``/v1`` is accepted).
    ``tokenizer`` (a path or a loaded Hugging Face tokenizer) makes ``tokenize`` and
    ``render_prompt`` local instead of going through ``/tokenize``. ``transport`` and
    ``backoff_s`` (first retry delay) exist for tests.
    """

    name: str = "openai"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_concurrency: int = 64, timeout_s: float = 120,
                 max_retries: int = 4, tokenizer: Any = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 backoff_s: float = 0.5) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        root = base_url.rstrip("/")
        self.base_url = root[:-3] if root.endswith("/v1") else root
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._semaphore = asyncio.Semaphore(max_concurrency)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, transport=transport,
            timeout=httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0)),
            limits=httpx.Limits(max_connections=max_concurrency,
                                max_keepalive_connections=max_concurrency))
        self._tokenizer = _load_tokenizer(tokenizer)

    # ----------------------------------------------------------------------------- protocol

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """Continue ``prompt_ids`` (sent verbatim as ids) and return the sampled ids.

        Stop strings are kept in ``text`` (``include_stop_str_in_output``). The last sampled
        token may run past the stop string, so ``decode(token_ids)`` can be longer than
        ``text``: ``text`` ends at the stop string, ``token_ids`` are what was sampled.
        """
        payload: dict[str, Any] = {
            "model": self.model, "prompt": [int(t) for t in prompt_ids],
            "max_tokens": int(max_tokens), "stop": list(stop), "n": 1, "stream": False,
            "include_stop_str_in_output": True, "skip_special_tokens": False,
            "return_token_ids": True, "temperature": sampling.temperature,
            "top_p": sampling.top_p, "top_k": sampling.top_k,
        }
        if sampling.seed is not None:
            payload["seed"] = sampling.seed
        if sampling.logprobs:
            payload["logprobs"] = 0  # the sampled token's logprob only
        data = await self._post("/v1/completions", payload)
        return _parse_completion(data, self._url("/v1/completions"), sampling.logprobs)

    async def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        if self._tokenizer is not None:
            return list(self._tokenizer.encode(text, add_special_tokens=False))
        data = await self._post("/tokenize", {"model": self.model, "prompt": text,
                                              "add_special_tokens": False})
        return _tokens_field(data, self._url("/tokenize"))

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of ``messages`` rendered with the chat template, plus the generation prompt."""
        if self._tokenizer is not None:
            out = self._tokenizer.apply_chat_template(
                [dict(m) for m in messages], add_generation_prompt=True, tokenize=True)
            ids = out["input_ids"] if hasattr(out, "keys") else out
            return [int(t) for t in ids]
        data = await self._post("/tokenize", {
            "model": self.model, "messages": [dict(m) for m in messages],
            "add_generation_prompt": True})
        return _tokens_field(data, self._url("/tokenize"))

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.aclose()

    # ------------------------------------------------------------------------------- extras

    async def chat(self, messages: Sequence[dict[str, Any]], *,
                   tools: Sequence[dict[str, Any]] | None = None, max_tokens: int = 1024,
                   sampling: SamplingParams | None = None,
                   **extra: Any) -> dict[str, Any]:
        """One ``/v1/chat/completions`` turn; returns the assistant message dict
        (plus ``finish_reason``, and ``token_ids``/``usage`` when the server reports them).

        Not token-exact: the server renders the whole conversation from text on each call
        (earlier assistant turns are re-tokenized, tool calls are parsed out of generated
        text and re-serialized by the template), so the ids a trainer would rebuild can
        differ from what was sampled. Use it for the ``openai_tools`` format and evaluation,
        not for RL rollouts. ``finish_reason`` is added to the returned dict.
        """
        sampling = sampling or SamplingParams()
        payload: dict[str, Any] = {
            "model": self.model, "messages": [dict(m) for m in messages],
            "max_tokens": max_tokens, "temperature": sampling.temperature,
            "top_p": sampling.top_p, "top_k": sampling.top_k, **extra,
        }
        if sampling.seed is not None:
            payload["seed"] = sampling.seed
        if tools:
            payload["tools"] = list(tools)
        data = await self._post("/v1/chat/completions", payload)
        try:
            choice = data["choices"][0]
            message = dict(choice["message"])
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"malformed chat response from "
                               f"{self._url('/v1/chat/completions')}: {_snippet(data)}") from exc
        message["finish_reason"] = choice.get("finish_reason")
        # Where the server reports them (vLLM with return_token_ids), keep the sampled ids and
        # the usage counts: they are the honest token counts of a non-token-exact turn.
        if choice.get("token_ids") is not None:
            message["token_ids"] = list(choice["token_ids"])
        if isinstance(data.get("usage"), dict):
            message["usage"] = data["usage"]
        return message

    # ------------------------------------------------------------------------------ HTTP

    def _url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    async def _post(self, path: str, payload: dict[str, Any]) -> Any:
        """POST with retries; returns the decoded JSON body or raises BackendError."""
        url = self._url(path)
        last = "no attempt made"
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff(attempt))
            try:
                async with self._semaphore:
                    return await self._attempt(path, url, payload)
            except _Retryable as exc:
                last = exc.detail
        raise BackendError(f"POST {url} failed after {self.max_retries + 1} attempts: {last}")

    async def _attempt(self, path: str, url: str, payload: dict[str, Any]) -> Any:
        """One request: JSON on 2xx, _Retryable on 429/5xx/transport, BackendError otherwise."""
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._client.post(path, json=payload)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise _Retryable(f"timed out after {self.timeout_s:g}s ({type(exc).__name__})") \
                from exc
        except httpx.TransportError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status}: {response.text[:_BODY_SNIPPET]}")
        if status >= 400:
            raise BackendError(f"POST {url} returned HTTP {status}: "
                               f"{response.text[:_BODY_SNIPPET]}")
        try:
            return response.json()
        except json.JSONDecodeError as exc:
            raise BackendError(f"POST {url} returned HTTP {status} with a body that is not "
                               f"JSON: {response.text[:_BODY_SNIPPET]!r}") from exc

    def _backoff(self, attempt: int) -> float:
        """Delay before retry ``attempt`` (1-based): exponential, with full-range jitter."""
        base = min(_MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)


def _load_tokenizer(tokenizer: Any) -> Any:
    """A Hugging Face tokenizer from a path, or the object given (None stays None)."""
    if tokenizer is None or not isinstance(tokenizer, str | Path):
        return tokenizer
    transformers = require("transformers", "train")
    return transformers.AutoTokenizer.from_pretrained(str(tokenizer))


def _snippet(data: Any) -> str:
    return json.dumps(data, default=str)[:_BODY_SNIPPET]


def _tokens_field(data: Any, url: str) -> list[int]:
    """The ``tokens`` list of a ``/tokenize`` response."""
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list):
        raise BackendError(f"{url} returned no 'tokens' list: {_snippet(data)}")
    return [int(t) for t in tokens]


def _finish(choice: dict[str, Any], url: str) -> tuple[FinishReason, str | None]:
    """Map vLLM's ``finish_reason``/``stop_reason`` onto stop / eos / length."""
    reason, stop_reason = choice.get("finish_reason"), choice.get("stop_reason")
    if reason == "length":
        return "length", None
    if reason == "stop":
        if isinstance(stop_reason, str):
            return "stop", stop_reason
        return "eos", None  # EOS (stop_reason None) or a stop token id (an int)
    raise BackendError(f"{url} finished a completion with finish_reason={reason!r} "
                       f"(stop_reason={stop_reason!r})")


def _parse_completion(data: Any, url: str, want_logprobs: bool) -> Generation:
    """A :class:`Generation` from a ``/v1/completions`` response with token ids."""
    try:
        choice = data["choices"][0]
        text = choice["text"]
    except (KeyError, IndexError, TypeError) as exc:
        raise BackendError(f"malformed completion response from {url}: {_snippet(data)}") \
            from exc
    token_ids = choice.get("token_ids")
    if not isinstance(token_ids, list):
        raise BackendError(NO_TOKEN_IDS_MESSAGE.format(url=url))
    finish_reason, stop_string = _finish(choice, url)
    logprobs = None
    if want_logprobs:
        raw = (choice.get("logprobs") or {}).get("token_logprobs")
        if not isinstance(raw, list) or len(raw) != len(token_ids):
            raise BackendError(f"{url} returned {len(raw) if isinstance(raw, list) else 'no'} "
                               f"logprobs for {len(token_ids)} tokens")
        logprobs = [float("-inf") if v is None else float(v) for v in raw]
    info: dict[str, Any] = {"stop_reason": choice.get("stop_reason")}
    if "prompt_token_ids" in choice:
        info["prompt_token_ids"] = choice["prompt_token_ids"]
    usage = data.get("usage") if isinstance(data, dict) else None
    if usage:
        info["usage"] = usage
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            info["cached_tokens"] = cached
    return Generation(token_ids=[int(t) for t in token_ids], text=text,
                      finish_reason=finish_reason, stop_string=stop_string,
                      logprobs=logprobs, info=info)
