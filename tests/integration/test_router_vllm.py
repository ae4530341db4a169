"""The router over two real vLLM (CPU) servers: sticky groups and episodes give engine-reported
prefix-cache hits, ``cache_salt`` isolates policy versions, a server killed mid-run loses no
request and comes back into rotation through probing after a restart.

vLLM's prefix cache works in blocks of 128 tokens on CPU, so the prompts here are ~300 token
ids (valid ids of the tiny model's vocabulary; the text they mean does not matter).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

import pytest

from agentmath.backends.base import Generation, RequestTag, SamplingParams, tagged
from agentmath.backends.openai import OpenAIBackend
from agentmath.backends.router import PrefixCacheStats, Router, RouterConfig
from agentmath.errors import RequestRejected
from tests.fixtures.vllm_server import VllmPair

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

SAMPLING = SamplingParams(temperature=1.0, seed=0, logprobs=False)
GROUPS, SAMPLES = 4, 4


def prompt(seed: int | str, n: int = 300) -> list[int]:
    """``n`` random token ids, distinct per seed, all inside the tiny model's vocabulary."""
    rng = random.Random(seed)
    return [rng.randrange(20, 520) for _ in range(n)]


def router_for(pair: VllmPair, **config: object) -> Router:
    return Router.from_urls(pair.urls, "tiny", RouterConfig(cache_salt_by_version=True,
                                                            **config),
                            timeout_s=60, max_retries=1, backoff_s=0.2)


async def turn(router: Router, tag: RequestTag, ids: Sequence[int],
               max_tokens: int = 8) -> Generation:
    with tagged(tag):
        return await router.generate(ids, stop=[], max_tokens=max_tokens, sampling=SAMPLING)


async def episode(router: Router, tag: RequestTag, ids: list[int], turns: int,
                  max_tokens: int = 8) -> list[Generation]:
    """``turns`` calls, each extending the last prompt with what was sampled and a tool reply."""
    out = []
    for _ in range(turns):
        generation = await turn(router, tag, ids, max_tokens)
        out.append(generation)
        ids = [*ids, *generation.token_ids, 30, 31, 32]
    return out


def delta(after: PrefixCacheStats, before: PrefixCacheStats) -> list[tuple[float, float]]:
    return [((a.hits or 0) - (b.hits or 0), (a.queries or 0) - (b.queries or 0))
            for a, b in zip(after.servers, before.servers, strict=True)]


async def test_sticky_groups_reach_both_servers_and_hit_their_prefix_cache(
        vllm_server_pair: VllmPair) -> None:
    router = router_for(vllm_server_pair)
    try:
        before = await router.prefix_cache_stats()
        assert all(s.error is None for s in before.servers), before
        tags = [RequestTag(f"g{g}-e{k}", f"g{g}", policy_version=1) for g in range(GROUPS)
                for k in range(SAMPLES)]
        runs = await asyncio.gather(*(episode(router, tag, prompt(int(tag.group_id[1:])), 2)
                                      for tag in tags))
        assert all(len(run) == 2 for run in runs)
        for g in range(GROUPS):  # every sample of a group (both turns) on one server
            assert len({router.home_of(f"g{g}-e{k}") for k in range(SAMPLES)}) == 1
        stats = router.stats()
        assert all(s.completed > 0 for s in stats.servers), stats
        assert stats.spills == 0 and stats.failovers == 0
        per_server = delta(await router.prefix_cache_stats(), before)
        print(f"\nprefix cache (hits, queries) per server: {per_server}; "
              f"hit rate {sum(h for h, _ in per_server) / sum(q for _, q in per_server):.3f}")
        assert all(hits > 0 for hits, _ in per_server)
    finally:
        await router.aclose()


async def test_cache_salt_isolates_versions_and_bad_requests_keep_servers_up(
        vllm_server_pair: VllmPair) -> None:
    backend = OpenAIBackend(vllm_server_pair.urls[0], "tiny", cache_salt_by_version=True)
    router = router_for(vllm_server_pair)
    try:
        ids = prompt(f"salt-{time.time_ns()}")  # fresh: nothing cached from earlier runs
        cached = []
        for version in (1, 1, 2):
            with tagged(RequestTag("salt", policy_version=version)):
                out = await backend.generate(ids, stop=[], max_tokens=2, sampling=SAMPLING)
            cached.append(out.info["cached_tokens"])
        assert cached[0] == 0 and cached[1] >= 128 and cached[2] == 0, cached
        with pytest.raises(RequestRejected, match="out of vocabulary"):
            await turn(router, RequestTag("bad"), [10**6] * 4)
        assert all(s.up and s.failovers == 0 for s in router.stats().servers)
    finally:
        await backend.aclose()
        await router.aclose()


async def test_a_killed_server_loses_no_request_and_returns_after_restart(
        vllm_server_pair: VllmPair) -> None:
    pair = vllm_server_pair
    router = router_for(pair, probe_interval_s=0.5, probe_timeout_s=5.0)
    try:
        tags = [RequestTag(f"k{g}-e{k}", f"k{g}") for g in range(8) for k in range(2)]
        runs = asyncio.gather(*(episode(router, tag, prompt(100 + int(tag.group_id[1:])), 3,
                                        max_tokens=24) for tag in tags))
        deadline = time.monotonic() + 60
        while router.stats().servers[1].in_flight == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert router.stats().servers[1].in_flight > 0
        await asyncio.to_thread(pair.kill, 1)
        results = await runs
        assert [len(run) for run in results] == [3] * len(tags)  # nothing lost
        stats = router.stats()
        assert sum(s.completed for s in stats.servers) == 3 * len(tags)  # nothing twice
        assert not stats.servers[1].up and stats.servers[1].failovers > 0
        assert pair.urls[1] in (stats.servers[1].last_error or "")
        restart_s = await asyncio.to_thread(pair.restart, 1)
        deadline = time.monotonic() + 30
        while not router.stats().servers[1].up and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        print(f"\nkill test: {stats.servers[1].failovers} failovers; restart took "
              f"{restart_s:.1f}s")
        assert router.stats().servers[1].up
        done = router.stats().servers[1].completed
        await asyncio.gather(*(turn(router, RequestTag(f"n{g}", f"n{g}"), prompt(200 + g))
                               for g in range(6)))
        assert router.stats().servers[1].completed > done  # back in rotation
    finally:
        await router.aclose()
