"""The cheap requests an :class:`~agentmath.backends.openai.OpenAIBackend` sends to learn
whether its server is alive, and its prefix-cache counters: no retries, each bounded by a
timeout, none raising on a dead server (but :func:`prefix_cache_counters`, which reports).

Why a second probe besides ``GET /health``: a server can be up but hung (its HTTP front end
answers ``/health`` while its engine never finishes a generation). A backend whose requests
timed out asks :func:`completes` too, so that a router does not put a hung server back in
rotation and an outage gate does not take a hung server for one that is back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from agentmath.backends._replies import prometheus_sum
from agentmath.errors import BackendError

__all__ = ["PREFIX_CACHE_HITS", "PREFIX_CACHE_QUERIES", "completes", "health",
           "prefix_cache_counters"]

_SNIPPET = 500
#: vLLM's prefix-cache counters (tokens looked up / found in the cache since the server started).
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"


async def health(client: httpx.AsyncClient, timeout_s: float,
                 on_refused: Callable[[], None] | None = None) -> tuple[int | None, str]:
    """``GET /health``: its status (None: no answer within ``timeout_s``) and a short why;
    ``on_refused`` is called when the connection was refused (nothing listens: the server
    process is gone, and the one that answers later has restarted)."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/health")
    except TimeoutError:
        return None, f"GET /health: no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        if on_refused is not None and isinstance(exc, httpx.ConnectError):
            on_refused()
        return None, f"GET /health: {type(exc).__name__}: {exc}"
    return response.status_code, f"GET /health: HTTP {response.status_code}"


async def completes(client: httpx.AsyncClient, model: str, timeout_s: float) -> tuple[bool, str]:
    """Whether a one-token completion (prompt: token id 0) gets an answer below 500 within
    ``timeout_s``: the server's engine is alive (a 4xx, e.g. an adapter not loaded yet after
    a restart, still says so). Never raises."""
    body = {"model": model, "prompt": [0], "max_tokens": 1, "temperature": 0.0}
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post("/v1/completions", json=body)
    except TimeoutError:
        return False, (f"answers /health, but a 1-token completion got no answer within "
                       f"{timeout_s:g} s (hung)")
    except httpx.HTTPError as exc:
        return False, f"a 1-token completion failed: {type(exc).__name__}: {exc}"
    if response.status_code >= 500:
        return False, f"a 1-token completion got HTTP {response.status_code}"
    return True, f"a 1-token completion got HTTP {response.status_code}"


async def prefix_cache_counters(client: httpx.AsyncClient, url: str,
                                timeout_s: float) -> tuple[float, float]:
    """``(hits, queries)`` from the Prometheus ``/metrics`` at ``url`` (summed over engines);
    BackendError when it cannot be read or has no such counters."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/metrics")
    except (TimeoutError, httpx.HTTPError) as exc:
        raise BackendError(f"GET {url} failed: {type(exc).__name__}: {exc}") from exc
    if not 200 <= response.status_code < 300:
        raise BackendError(f"GET {url} returned HTTP {response.status_code}: "
                           f"{response.text[:_SNIPPET]}")
    counters = []
    for name in (PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES):
        value = prometheus_sum(response.text, name)
        if value is None:
            raise BackendError(f"GET {url} has no {name} counter (not a vLLM server, or "
                               f"prefix caching is off)")
        counters.append(value)
    return counters[0], counters[1]
