"""A token-exact backend over an OpenAI-compatible HTTP server (vLLM, SGLang-style servers).

``generate`` sends the prompt as a list of token ids to ``/v1/completions`` and records the
token ids the server *sampled* (vLLM returns them with ``return_token_ids``). Nothing is ever
re-tokenized from text: a server that does not return token ids is rejected with a
:class:`~agentmath.errors.BackendError` rather than silently approximated.

Its HTTP client is httpx's API on aiohttp's connection pool (:mod:`agentmath._transport`: at
hundreds of requests in flight httpx's own pool cost ~11 ms of client CPU a request, this one
~0.3 ms); ``transport`` replaces it (tests).

Tokenization (``tokenize``, ``render_prompt``) goes through the server's ``/tokenize`` endpoint,
so the chat template and tokenizer are the ones the server actually uses, or through a local
Hugging Face tokenizer when one is given. Nothing is cached: a model swapped behind the URL is
seen by the next call.

Every field of a reply that is used is validated first (:mod:`agentmath.backends._replies`): a
body of the wrong shape is a :class:`~agentmath.errors.BackendError` naming the URL and the
field, never a ``TypeError`` in the agent loop.

Retries: 408, 429, 5xx, connection errors and malformed replies are retried, up to
``max_retries`` times, with exponential backoff and jitter; a ``Retry-After`` header on a 429
or 503 (delta-seconds or an HTTP date) is honoured, capped at ``max_retry_after_s``. Other 4xx
responses fail at once: as :class:`~agentmath.errors.RequestRejected` when the request
itself is at fault (any 4xx but 401/403/404, which mean a misconfigured server or model name),
so that a router does not take a healthy server out of rotation for a bad prompt. Each attempt
holds one slot of a semaphore bounding the number of requests in flight; the backoff sleep does
not.

Timeouts: an attempt that gets no answer within ``timeout_s`` is retried only
``timeout_retries`` times (default 0): the same request most likely takes as long again, and
a hung server (it accepts the connection, or answers ``/health``, but never finishes a
generation) would cost ``max_retries + 1`` timeouts per request. It then fails with a
:class:`~agentmath.errors.ServerTimeout` naming the URL and the timeout (a router fails it
over), or, with an outage gate, waits as on an unreachable server. Until a completion answers
again, the health probes (``healthy``, the gate's) ask for a one-token completion too.

Outages: ``max_outage_s`` > 0 puts an :class:`~agentmath.backends.outage.OutageGate` in front of
the server. Connection failures, timeouts and 502/503/504 in a row say the server is gone:
requests then stop being sent and wait while ``GET /health`` is probed with backoff (any answer
below 500 counts; after a timeout, a one-token completion must answer too), and resume with a
fresh retry budget when it answers, or fail as before once the outage has lasted
``max_outage_s``. Off (0) by default here; eval and RL configs turn it on.

Reconnecting (:class:`~agentmath.backends.base.Reconnecting`): after a connection to the server
was refused (its process gone), the next request first waits for ``/health`` to answer and runs
the hooks given to :meth:`on_reconnect` (RL: the current weights loaded into the server, which
has restarted with its start weights), then goes out. A dropped connection alone does not count
(a keep-alive race looks the same; :mod:`agentmath._keepalive`): a killed server refuses the
retry that follows, a vLLM restart taking tens of seconds.

Prefix-cache isolation across weight updates: with ``cache_salt_by_version`` each completion
inside a :func:`~agentmath.backends.base.tagged` block carries vLLM's ``cache_salt`` =
``v{policy_version}``, so KV computed under older weights is never reused (vLLM 0.32 accepts it
with a prompt of token ids; an empty salt is a 400). ``healthy`` (``GET /health``) and
``prefix_cache_counters`` (``GET /metrics``) serve the router's probing and hit-rate report.

Extra request fields (``extra_body``): server-specific fields of ``/v1/completions`` that the
protocol has no word for (vLLM's ``min_tokens``, ``ignore_eos``, ``priority``...), either fixed
or computed per request from the body built so far; they are applied last, so they may also
override a built field.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from agentmath._lazy import require
from agentmath.backends import _probes, _replies, _stream
from agentmath.backends._http import RetryingPoster
from agentmath.backends._probes import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES
from agentmath.backends._replies import (
    NO_TOKEN_IDS_MESSAGE,
    prometheus_sum,
    retry_after_s,
)
from agentmath.backends.base import (
    Generation,
    SamplingParams,
    chat_prompt_ids,
    current_tag,
    nothing_sampled,
)
from agentmath.backends.outage import OutageGate

__all__ = ["NO_TOKEN_IDS_MESSAGE", "PREFIX_CACHE_HITS", "PREFIX_CACHE_QUERIES", "ExtraBody",
           "OpenAIBackend", "prometheus_sum", "retry_after_s", "server_root"]

#: Extra ``/v1/completions`` fields: a mapping, or a function of the body built so far.
ExtraBody = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]]
_PROBE_TIMEOUT_S = 5.0
_PROBE_SLACK_S = 1.0  # the gate's probe bound beyond its two requests' own


def server_root(url: str) -> str:
    """A server's root URL: no trailing ``/`` or ``/v1`` (how the backend, a router's labels
    and the weight sync name a server)."""
    return url.rstrip("/").removesuffix("/v1")


class OpenAIBackend(RetryingPoster):
    """Token-exact generation against an OpenAI-compatible server that returns token ids.

    ``base_url`` is the server root (``http://host:port``; a trailing ``/v1`` is accepted).
    ``tokenizer`` (a path or a loaded Hugging Face tokenizer) makes ``tokenize`` and
    ``render_prompt`` local instead of going through ``/tokenize``. ``timeout_s`` bounds one
    request, ``max_retries`` the retries after a first failed attempt, ``max_retry_after_s``
    the wait a server's ``Retry-After`` may ask for. ``cache_salt_by_version`` salts vLLM's
    prefix cache with the current request tag's policy version. ``extra_body`` adds fields to
    every completion request: a mapping, or a function called with the request body (the
    current :data:`~agentmath.backends.base.current_tag` is readable in it) returning the fields
    to add, e.g. ``lambda body: {"min_tokens": body["max_tokens"], "ignore_eos": True}`` to make
    vLLM write exactly ``max_tokens`` tokens. ``max_outage_s`` (0: off) is how long requests
    wait for an unreachable server to answer again before they fail (module docstring);
    ``timeout_retries`` how many times an attempt that timed out is sent again (within
    ``max_retries``). ``transport`` and ``backoff_s`` (first retry delay) exist for tests.
    """

    name: str = "openai"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_concurrency: int = 64, timeout_s: float = 120,
                 max_retries: int = 4, tokenizer: Any = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 backoff_s: float = 0.5, max_retry_after_s: float = 60.0,
                 cache_salt_by_version: bool = False,
                 extra_body: ExtraBody | None = None, max_outage_s: float = 0.0,
                 timeout_retries: int = 0) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if max_retries < 0 or timeout_retries < 0:
            raise ValueError("max_retries and timeout_retries must be >= 0")
        if not timeout_s > 0:
            raise ValueError("timeout_s must be > 0")
        self.base_url = server_root(base_url)
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.timeout_retries = timeout_retries
        self._stalled = False  # a request timed out, and no completion has answered since
        self._lost = False  # a request found the server unreachable (reconnect hooks pending)
        self._on_reconnect = []
        self._reconnecting = asyncio.Lock()
        self.backoff_s = backoff_s
        self.max_retry_after_s = float(max_retry_after_s)
        self.cache_salt_by_version = cache_salt_by_version
        self.extra_body = extra_body
        self._semaphore = asyncio.Semaphore(max_concurrency)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if transport is None:
            # imported here: aiohttp costs ~0.1 s to import (agentmath._transport: why it)
            from agentmath._transport import pooled_transport

            transport = pooled_transport(max_concurrency)
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, transport=transport,
            timeout=httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0)))
        self._tokenizer = _load_tokenizer(tokenizer)
        # The gate's bound on one probe covers both of its requests (``_reachable``: /health,
        # then maybe a one-token completion, each bounded by ``_probe_s``), so that a hung
        # engine's probe ends with its own reason, not cut short by the gate's timeout.
        self.outage = OutageGate(self.base_url, self._reachable, max_outage_s=max_outage_s,
                                 probe_timeout_s=2 * self._probe_s + _PROBE_SLACK_S)

    # ----------------------------------------------------------------------------- protocol

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """Continue ``prompt_ids`` (sent verbatim as ids) and return the sampled ids.

        Stop strings are kept in ``text`` (``include_stop_str_in_output``). The last sampled
        token may run past the stop string, so ``decode(token_ids)`` can be longer than
        ``text``: ``text`` ends at the stop string, ``token_ids`` are what was sampled.
        """
        payload = self._completion_body(prompt_ids, stop, max_tokens, sampling)
        url = self._url("/v1/completions")
        return await self._post("/v1/completions", payload, lambda data: _replies.completion(
            data, url, sampling.logprobs, int(max_tokens)))

    async def generate_interruptible(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                                     max_tokens: int, sampling: SamplingParams,
                                     interrupt: asyncio.Event) -> Generation:
        """As :meth:`generate`, streamed: once ``interrupt`` is set the stream is closed (vLLM
        aborts the request) and the ids sampled so far come back, ``finish_reason`` "length",
        ``interrupted`` True, their text decoded again from the ids (a stream's text
        lags its ids where it might begin a stop string). Retried as ``generate`` is."""
        if interrupt.is_set():
            return nothing_sampled(sampling, interrupted=True)
        payload = {**self._completion_body(prompt_ids, stop, max_tokens, sampling),
                   "stream": True, "stream_options": {"include_usage": True}}
        url = self._url("/v1/completions")
        gen, cut = await self._post("/v1/completions", payload, lambda data: (
            _replies.completion(data, url, sampling.logprobs, int(max_tokens)),
            bool(data.get(_stream.INTERRUPTED))), interrupt=interrupt)
        if cut:
            gen.interrupted = True
            gen.text = await self.detokenize(gen.token_ids) if gen.token_ids else ""
        return gen

    async def detokenize(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (special tokens kept), by the local tokenizer or the server's
        ``/detokenize``."""
        if self._tokenizer is not None:
            return str(self._tokenizer.decode(list(ids), skip_special_tokens=False))
        url = self._url("/detokenize")
        return await self._post("/detokenize", {"model": self.model, "tokens": list(ids)},
                                lambda data: _replies.text_field(
                                    _replies.expect_object(data, url, "the response body")
                                    .get("prompt"), url, "prompt"))

    def _completion_body(self, prompt_ids: Sequence[int], stop: Sequence[str], max_tokens: int,
                         sampling: SamplingParams) -> dict[str, Any]:
        """The JSON body of a completion request for these ids and settings."""
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
        tag = current_tag.get()
        if self.cache_salt_by_version and tag is not None:
            payload["cache_salt"] = f"v{tag.policy_version}"
        if self.extra_body is not None:
            extra = self.extra_body(payload) if callable(self.extra_body) else self.extra_body
            payload.update(extra)
        return payload

    async def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        if self._tokenizer is not None:
            return list(self._tokenizer.encode(text, add_special_tokens=False))
        url = self._url("/tokenize")
        return await self._post("/tokenize", {"model": self.model, "prompt": text,
                                              "add_special_tokens": False},
                                lambda data: _replies.tokens(data, url, bool(text)))

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of ``messages`` rendered with the chat template, plus the generation prompt."""
        if self._tokenizer is not None:
            return chat_prompt_ids(self._tokenizer, messages)
        url = self._url("/tokenize")
        return await self._post("/tokenize", {
            "model": self.model, "messages": [dict(m) for m in messages],
            "add_generation_prompt": True}, lambda data: _replies.tokens(data, url, True))

    async def aclose(self) -> None:
        """Stop probing and close the HTTP connection pool."""
        self.outage.close()
        await self._client.aclose()

    # ------------------------------------------------------------------------------- extras

    def use_model(self, name: str) -> None:
        """Send ``name`` as the model of every request from now on (a LoRA adapter's)."""
        self.model = name

    async def healthy(self) -> bool:
        """Whether ``GET /health`` answers 2xx within a few seconds and, after a request timed
        out, a one-token completion answers too (a hung engine behind a live front end is not
        healthy). Never raises."""
        status, _ = await _probes.health(self._client, self._probe_s, self._note_refused)
        if status is None or not 200 <= status < 300:
            return False
        return (await self._engine_alive())[0]

    async def _reachable(self) -> tuple[bool, str]:
        """The outage gate's probe: whether ``GET /health`` gets any answer below 500 (a
        server without that endpoint answers 404, and is there) and, after a timeout, a
        one-token completion answers too; and why not."""
        status, detail = await _probes.health(self._client, self._probe_s, self._note_refused)
        if status is None or status >= 500:
            return False, detail
        return await self._engine_alive()

    async def _engine_alive(self) -> tuple[bool, str]:
        """Whether the engine answers: asked (a one-token completion) only after a timeout."""
        if not self._stalled:
            return True, "answers /health"
        ok, detail = await _probes.completes(self._client, self.model, self._probe_s)
        if ok:
            self._stalled = False
        return ok, detail

    @property
    def _probe_s(self) -> float:
        return min(self.timeout_s, _PROBE_TIMEOUT_S)

    async def prefix_cache_counters(self) -> tuple[float, float]:
        """``(hits, queries)``: the server's prefix-cache counters in tokens since it started,
        read from its Prometheus ``/metrics`` (summed over engines)."""
        return await _probes.prefix_cache_counters(self._client, self._url("/metrics"),
                                                   self._probe_s)

    async def chat(self, messages: Sequence[dict[str, Any]], *,
                   tools: Sequence[dict[str, Any]] | None = None, max_tokens: int = 1024,
                   sampling: SamplingParams | None = None,
                   **extra: Any) -> dict[str, Any]:
        """One ``/v1/chat/completions`` turn; returns the assistant message dict (plus
        ``finish_reason``, and ``token_ids``/``prompt_token_ids``/``usage`` when the server
        reports them: vLLM does with ``return_token_ids``).

        The server renders the whole conversation from text on each call (earlier assistant
        turns are re-tokenized, tool calls are parsed out of generated text and re-serialized
        by the template, a reasoning model's template may drop earlier reasoning), so a
        turn's prompt need not extend the ids sampled before; the chat driver checks it with
        the reported ids (:func:`agentmath.agent.drivers.record_prompt`).
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
        url = self._url("/v1/chat/completions")
        # Where the server reports them (vLLM with return_token_ids), the sampled ids and the
        # usage counts are kept: they are the honest token counts of a non-token-exact turn.
        return await self._post("/v1/chat/completions", payload,
                                lambda data: _replies.chat_message(data, url))

def _load_tokenizer(tokenizer: Any) -> Any:
    """A Hugging Face tokenizer from a path, or the object given (None stays None)."""
    if tokenizer is None or not isinstance(tokenizer, str | Path):
        return tokenizer
    transformers = require("transformers", "train")
    return transformers.AutoTokenizer.from_pretrained(str(tokenizer))
