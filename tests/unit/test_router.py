"""Router policy, failover and probing against in-process fake servers (no network), plus the
OpenAIBackend additions the router relies on (RequestRejected, cache_salt, /health, /metrics)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from agentmath.backends.base import (
    Backend,
    Generation,
    RequestTag,
    SamplingParams,
    current_tag,
    tagged,
)
from agentmath.backends.openai import OpenAIBackend, prometheus_sum
from agentmath.backends.router import Router, RouterConfig
from agentmath.errors import BackendError, ConfigError, RequestRejected

SAMPLING = SamplingParams(temperature=0.0)


class FakeServer:
    """A Backend that records calls; ``gate`` holds generate calls in flight, ``fail`` makes
    every call raise, ``alive`` is what ``healthy()`` answers."""

    name = "fake"

    def __init__(self, url: str, *, with_health: bool = True,
                 with_counters: bool = True) -> None:
        self.base_url = url
        self.calls: list[tuple[RequestTag | None, list[int]]] = []
        self.completed: list[list[int]] = []
        self.gate: asyncio.Event | None = None
        self.fail: BackendError | None = None
        self.alive = True
        self.closed = False
        self.counters: tuple[float, float] | None = None
        if with_health:
            self.healthy = self._healthy
        if with_counters:  # the optional capabilities, present or not (isinstance checks)
            self.prefix_cache_counters = self._prefix_cache_counters

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        self.calls.append((current_tag.get(), list(prompt_ids)))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.completed.append(list(prompt_ids))
        return Generation(token_ids=[7, 8], text="ok", finish_reason="stop")

    async def tokenize(self, text: str) -> list[int]:
        if self.fail is not None:
            raise self.fail
        return [ord(c) for c in text]

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return await self.tokenize("".join(m["content"] for m in messages))

    async def _healthy(self) -> bool:
        return self.alive

    async def _prefix_cache_counters(self) -> tuple[float, float]:
        if self.counters is None:
            raise BackendError(f"{self.base_url}/metrics: no counters")
        return self.counters

    async def aclose(self) -> None:
        self.closed = True


def servers(n: int, **kwargs: Any) -> list[FakeServer]:
    return [FakeServer(f"http://s{i}.test:8000", **kwargs) for i in range(n)]


async def call(router: Router, tag: RequestTag | None, prompt: Sequence[int] = (1, 2, 3)
               ) -> Generation:
    with tagged(tag):
        return await router.generate(prompt, stop=[], max_tokens=4, sampling=SAMPLING)


def start(router: Router, tag: RequestTag | None, prompt: Sequence[int] = (1, 2, 3)
          ) -> asyncio.Task[Generation]:
    """Dispatch a call now (routing happens before the task's first await)."""
    return asyncio.get_running_loop().create_task(call(router, tag, prompt))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def where(fakes: list[FakeServer], episode: str) -> list[int]:
    """Indices of the servers that received each call of ``episode``, in call order per server."""
    return [i for i, f in enumerate(fakes) for tag, _ in f.calls
            if tag is not None and tag.episode_id == episode]


def gate_all(fakes: list[FakeServer]) -> asyncio.Event:
    gate = asyncio.Event()
    for fake in fakes:
        fake.gate = gate
    return gate


async def test_router_is_a_backend_and_weighs_by_context_length() -> None:
    fakes = servers(2)
    router = Router(fakes, RouterConfig(l_base=100, w_base=2))
    assert isinstance(router, Backend) and router.name == "router"
    assert [router.weight(n) for n in (0, 99, 100, 250)] == [2, 2, 3, 4]
    gate = gate_all(fakes)
    task = start(router, None, [0] * 250)
    await settle()
    busy = [s for s in router.stats().servers if s.in_flight]
    assert len(busy) == 1 and busy[0].load == 4
    gate.set()
    await task
    stats = router.stats()
    assert all(s.load == 0 and s.in_flight == 0 for s in stats.servers)
    assert sum(s.tokens for s in stats.servers) == 252
    assert stats.imbalance == pytest.approx(2.0)  # all 252 tokens on one of two servers
    await router.aclose()
    assert all(f.closed for f in fakes)


async def test_group_sticks_to_one_server_and_groups_spread() -> None:
    fakes = servers(4)
    router = Router(fakes)
    gate = gate_all(fakes)
    tasks = [start(router, RequestTag(f"g{g}-e{k}", f"g{g}")) for k in range(8)
             for g in range(4)]
    await settle()
    for g in range(4):
        homes = {i for k in range(8) for i in where(fakes, f"g{g}-e{k}")}
        assert homes == {g}  # first samples spread by load, then every sibling follows
    gate.set()
    assert len(await asyncio.gather(*tasks)) == 32
    assert router.stats().spills == 0
    await router.aclose()


async def test_episode_stays_on_its_server_across_turns() -> None:
    fakes = servers(3)
    router = Router(fakes)
    for turn in range(4):
        await call(router, RequestTag("solo"), [1] * (10 + turn))
        await call(router, RequestTag("other", "gx"))
    assert len(set(where(fakes, "solo"))) == 1 and len(where(fakes, "solo")) == 4
    assert router.home_of("solo") == fakes[where(fakes, "solo")[0]].base_url
    assert router.home_of("never") is None
    assert len(set(where(fakes, "other"))) == 1
    router.forget(episode_id="solo", group_id="gx")
    assert router.stats().sticky_episodes == 1 and router.stats().sticky_groups == 0
    await router.aclose()


async def test_spill_when_the_sticky_server_is_saturated_and_the_new_home_sticks() -> None:
    fakes = servers(2)
    router = Router(fakes, RouterConfig(max_in_flight_per_server=2))
    gate = gate_all(fakes)
    first = [start(router, RequestTag(f"e{k}", "g")) for k in range(2)]
    await settle()
    home = where(fakes, "e0")[0]
    assert where(fakes, "e1") == [home]
    spilled = start(router, RequestTag("e2", "g"))  # the group's server holds 2 in flight
    await settle()
    assert where(fakes, "e2") == [1 - home]
    gate.set()
    await asyncio.gather(*first, spilled)
    await call(router, RequestTag("e2", "g"))  # its next turn goes where its KV now is
    await call(router, RequestTag("e3", "g"))  # a new sibling still goes to the group's server
    assert where(fakes, "e2") == [1 - home, 1 - home]
    assert where(fakes, "e3") == [home]
    stats = router.stats()
    assert stats.servers[home].spills == 1 and stats.spills == 1
    await router.aclose()


async def test_spill_on_load_counts_context_length() -> None:
    fakes = servers(2)
    router = Router(fakes, RouterConfig(l_base=10, spill_factor=1.0, spill_slack=5))
    gate = gate_all(fakes)
    long = start(router, RequestTag("e0", "g"), [0] * 40)  # weight 5 on the group's server
    await settle()
    home = where(fakes, "e0")[0]
    near = start(router, RequestTag("e1", "g"))  # 5 + 1 <= 1.0 * (0 + 1) + 5: stays
    await settle()
    assert where(fakes, "e1") == [home]
    far = start(router, RequestTag("e2", "g"))  # 6 + 1 > 1 + 5: spills
    await settle()
    assert where(fakes, "e2") == [1 - home]
    gate.set()
    await asyncio.gather(long, near, far)
    await router.aclose()


async def test_a_server_failing_mid_run_loses_and_duplicates_nothing() -> None:
    fakes = servers(3)
    router = Router(fakes, RouterConfig(probe_interval_s=0.01))
    gate = gate_all(fakes)
    tasks = [start(router, RequestTag(f"g{g}-e{k}", f"g{g}"), [g, k]) for k in range(4)
             for g in range(6)]
    await settle()
    victim = fakes[1]
    in_flight_there = len(victim.calls)
    assert in_flight_there > 0
    victim.fail = BackendError(f"POST {victim.base_url}/v1/completions failed: refused")
    victim.alive = False
    gate.set()
    results = await asyncio.gather(*tasks)
    assert len(results) == 24
    done = sorted(p for f in fakes for p in f.completed)
    assert done == sorted([g, k] for k in range(4) for g in range(6))  # each exactly once
    stats = router.stats()
    assert not stats.servers[1].up and stats.servers[1].failovers == in_flight_there
    assert "refused" in (stats.servers[1].last_error or "")
    before = [len(f.calls) for f in fakes]
    for k in range(4):  # later turns avoid the down server; the moved episodes stay together
        await call(router, RequestTag(f"g1-e{k}", "g1"))
    assert len(victim.calls) == in_flight_there
    assert sum(len(f.calls) > n for f, n in zip(fakes, before, strict=True)) == 1
    victim.fail, victim.alive = None, True  # it recovers: the probe brings it back
    for _ in range(200):
        if router.stats().servers[1].up:
            break
        await asyncio.sleep(0.01)
    assert router.stats().servers[1].up
    gate = gate_all(fakes)  # new groups in flight at once: by load, some land on it again
    tasks = [start(router, RequestTag(f"new{i}", f"n{i}")) for i in range(6)]
    await settle()
    gate.set()
    await asyncio.gather(*tasks)
    assert len(victim.completed) == 2
    await router.aclose()


async def test_probe_falls_back_to_tokenize_without_healthy() -> None:
    fakes = servers(2, with_health=False)
    router = Router(fakes, RouterConfig(probe_interval_s=0.01))
    fakes[0].fail = BackendError("boom")
    assert await router.tokenize("ab") == [97, 98]  # failed over to the other server
    assert not router.stats().servers[0].up
    fakes[0].fail = None
    for _ in range(200):
        if router.stats().servers[0].up:
            break
        await asyncio.sleep(0.01)
    assert router.stats().servers[0].up
    assert await router.render_prompt([{"role": "user", "content": "a"}]) == [97]
    await router.aclose()


async def test_all_servers_down_names_each_server_and_its_error() -> None:
    fakes = servers(3)
    router = Router(fakes, RouterConfig(probe_interval_s=60))
    for i, fake in enumerate(fakes):
        fake.fail = BackendError(f"error number {i}")
    with pytest.raises(BackendError) as info:
        await call(router, RequestTag("e", "g"))
    for i, fake in enumerate(fakes):
        assert fake.base_url in str(info.value) and f"error number {i}" in str(info.value)
    with pytest.raises(BackendError, match="no server can take"):
        await router.tokenize("x")
    await router.aclose()
    with pytest.raises(BackendError, match="closed"):
        await call(router, None)


async def test_a_rejected_request_does_not_fail_over() -> None:
    fakes = servers(2)
    router = Router(fakes)
    fakes[0].fail = RequestRejected("HTTP 400: prompt too long")
    fakes[1].fail = RequestRejected("HTTP 400: prompt too long")
    with pytest.raises(RequestRejected) as info:
        await call(router, RequestTag("e"))
    assert "http://s0.test:8000" in str(info.value)  # the router names the server
    assert sum(len(f.calls) for f in fakes) == 1
    stats = router.stats()
    assert all(s.up and s.failovers == 0 for s in stats.servers)
    await router.aclose()


async def test_sticky_maps_are_bounded_and_a_new_version_drops_group_homes() -> None:
    router = Router(servers(2), RouterConfig(max_sticky_entries=2))
    for k in range(5):
        await call(router, RequestTag(f"e{k}", f"g{k}", policy_version=0))
    stats = router.stats()
    assert (stats.sticky_episodes, stats.sticky_groups) == (2, 2)
    router.set_policy_version(3)
    assert router.stats().sticky_groups == 0 and router.stats().sticky_episodes == 2
    await call(router, RequestTag("late", "g9", policy_version=2))
    assert router.stats().stale_requests == 1 and router.stats().policy_version == 3
    with pytest.raises(ValueError, match="older"):
        router.set_policy_version(2)
    await router.aclose()


async def test_prefix_cache_stats_come_from_the_servers() -> None:
    fakes = servers(2) + [FakeServer("http://s2.test:8000", with_counters=False)]
    fakes[0].counters = (30.0, 100.0)
    fakes[1].counters = (10.0, 100.0)
    router = Router(fakes)
    stats = await router.prefix_cache_stats()
    assert stats.hits == 40 and stats.queries == 200 and stats.hit_rate == pytest.approx(0.2)
    assert stats.servers[0].hit_rate == pytest.approx(0.3)
    assert stats.servers[2].error and stats.servers[2].hits is None
    fakes[1].counters = None
    stats = await router.prefix_cache_stats()
    assert "no counters" in (stats.servers[1].error or "") and stats.hit_rate == 0.3
    await router.aclose()


@pytest.mark.parametrize("urls, fragment", [
    ([], "non-empty"),
    ("http://a:1", "non-empty"),
    (["http://a:1", "http://A:1/v1/"], "listed twice"),
    (["http://a:1", "not a url"], "'not a url'"),
    (["http://a:99999"], "'http://a:99999'"),
    (["ftp://a:1"], "'ftp://a:1'"),
    ([None], "None"),
])
def test_from_urls_rejects_bad_lists(urls: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        Router.from_urls(urls, "tiny")
    assert fragment in str(info.value)


def test_empty_router_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        Router([])


async def test_from_urls_builds_salting_openai_backends() -> None:
    router = Router.from_urls(["http://a.test:8000", "http://b.test:8000/v1"], "tiny",
                              RouterConfig(cache_salt_by_version=True), max_retries=0)
    labels = [s.server for s in router.stats().servers]
    assert labels == ["http://a.test:8000", "http://b.test:8000"]
    assert all(s.backend.cache_salt_by_version for s in router._servers)
    await router.aclose()


# ---------------------------------------------------------------- OpenAIBackend additions

def completion_body() -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": "ab", "finish_reason": "stop", "token_ids": [5, 6],
                         "stop_reason": None}]}


async def test_openai_backend_sends_cache_salt_only_when_asked() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=completion_body())

    for salted in (True, False):
        backend = OpenAIBackend("http://v.test", "tiny", transport=httpx.MockTransport(handler),
                                cache_salt_by_version=salted)
        sampling = SamplingParams(logprobs=False)
        with tagged(RequestTag("e", "g", policy_version=4)):
            await backend.generate([1], stop=[], max_tokens=4, sampling=sampling)
        await backend.generate([1], stop=[], max_tokens=4, sampling=sampling)  # untagged
        await backend.aclose()
    assert [b.get("cache_salt") for b in bodies] == ["v4", None, None, None]


@pytest.mark.parametrize("status, rejected", [(400, True), (413, True), (422, True),
                                              (404, False), (401, False)])
async def test_openai_backend_request_rejected_for_the_requests_own_4xx(
        status: int, rejected: bool) -> None:
    backend = OpenAIBackend("http://v.test", "tiny", max_retries=0, transport=httpx.MockTransport(
        lambda request: httpx.Response(status, text="nope")))
    with pytest.raises(BackendError) as info:
        await backend.generate([1], stop=[], max_tokens=4, sampling=SAMPLING)
    assert isinstance(info.value, RequestRejected) is rejected
    assert "http://v.test/v1/completions" in str(info.value)
    await backend.aclose()


METRICS = """# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 256.0
vllm:prefix_cache_hits_total{engine="1",model_name="tiny"} 128.0
vllm:prefix_cache_hits_created{engine="0",model_name="tiny"} 1.7e+09
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1000.0
vllm:prefix_cache_queries_total_x 5
"""


async def test_openai_backend_health_and_prefix_counters() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200)
        return httpx.Response(200, text=METRICS)

    backend = OpenAIBackend("http://v.test", "tiny", transport=httpx.MockTransport(handler))
    assert await backend.healthy()
    assert await backend.prefix_cache_counters() == (384.0, 1000.0)
    await backend.aclose()
    assert prometheus_sum(METRICS, "vllm:missing_total") is None
    assert prometheus_sum("plain_total 3\nplain_total 4.5 1700000000\n", "plain_total") == 7.5

    def down(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            raise httpx.ConnectError("refused")
        return httpx.Response(200, text="other_metric 1\n")

    backend = OpenAIBackend("http://v.test", "tiny", transport=httpx.MockTransport(down))
    assert not await backend.healthy()
    with pytest.raises(BackendError, match=r"http://v\.test/metrics has no vllm:prefix_cache"):
        await backend.prefix_cache_counters()
    await backend.aclose()


# ---------------------------------------------------------------- baseline policies

async def test_round_robin_ignores_tags_keeps_no_homes_and_skips_down_servers() -> None:
    fakes = servers(3)
    router = Router(fakes, RouterConfig(policy="round_robin", probe_interval_s=60))
    for turn in range(6):  # one episode of one group: a sticky router would keep it on one
        await call(router, RequestTag("e0", "g0"), [1] * (10 + turn))
    turns = [sorted(len(prompt) - 10 for _, prompt in f.calls) for f in fakes]
    assert turns == [[0, 3], [1, 4], [2, 5]]  # the servers in turn, whatever the tag
    stats = router.stats()
    assert stats.policy == "round_robin" and stats.sticky_episodes == stats.sticky_groups == 0
    assert router.home_of("e0") is None and stats.spills == 0
    fakes[1].fail = BackendError("refused")  # fails over to the next in turn, then skipped
    for k in range(4):
        await call(router, RequestTag(f"x{k}", "g1"))
    assert not router.stats().servers[1].up
    assert [len(f.completed) for f in fakes] == [4, 2, 4]
    assert router.stats().servers[1].failovers == 1
    await router.aclose()


async def test_least_loaded_follows_in_flight_weight_not_homes() -> None:
    fakes = servers(2)
    router = Router(fakes, RouterConfig(policy="least_loaded", l_base=10))
    gate = gate_all(fakes)
    long = start(router, RequestTag("e0", "g"), [0] * 40)  # weight 5 on one server
    await settle()
    first = where(fakes, "e0")[0]
    siblings = [start(router, RequestTag(f"e{k}", "g")) for k in range(1, 5)]
    await settle()  # weights 1 each: all four go to the other server (load 4 < 5)
    assert {i for k in range(1, 5) for i in where(fakes, f"e{k}")} == {1 - first}
    sixth = start(router, RequestTag("e5", "g"))  # 5 vs 4: the other one again, then tie
    await settle()
    assert where(fakes, "e5") == [1 - first]
    gate.set()
    await asyncio.gather(long, sixth, *siblings)
    stats = router.stats()
    assert stats.policy == "least_loaded" and stats.sticky_episodes == 0
    assert all(s.load == 0 for s in stats.servers)
    for _ in range(4):  # idle servers tie: the tie-break rotates, so the turns alternate
        await call(router, RequestTag("e0", "g"))
    per_server = [sum(1 for tag, _ in f.calls if tag and tag.episode_id == "e0") for f in fakes]
    assert sorted(per_server) == [2, 3]  # 1 long call + 4 turns split 2/2
    await router.aclose()


def test_router_config_rejects_an_unknown_policy() -> None:
    with pytest.raises(ValueError, match="policy"):
        RouterConfig(policy="consistent_hash")  # type: ignore[arg-type]


async def test_openai_backend_extra_body_fixed_or_per_request() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=completion_body())

    def exact(body: dict[str, Any]) -> dict[str, Any]:
        tag = current_tag.get()
        return {"min_tokens": body["max_tokens"], "ignore_eos": True, "stop": [],
                "cache_salt": f"row-{tag.policy_version if tag else 'none'}"}

    sampling = SamplingParams(logprobs=False)
    for extra in ({"priority": 3}, exact):
        backend = OpenAIBackend("http://v.test", "tiny", transport=httpx.MockTransport(handler),
                                extra_body=extra)
        with tagged(RequestTag("e", "g", policy_version=2)):
            await backend.generate([1], stop=["\n</code>"], max_tokens=9, sampling=sampling)
        await backend.aclose()
    assert bodies[0]["priority"] == 3 and bodies[0]["stop"] == ["\n</code>"]
    assert (bodies[1]["min_tokens"], bodies[1]["ignore_eos"]) == (9, True)
    assert bodies[1]["stop"] == [] and bodies[1]["cache_salt"] == "row-2"  # applied last


async def test_round_robin_turn_is_not_taken_by_tokenize_calls() -> None:
    fakes = servers(2)
    router = Router(fakes, RouterConfig(policy="round_robin"))
    for turn in range(6):  # an agent turn: generate, then tokenize the tool output
        await call(router, RequestTag("e0", "g0"), [1] * (10 + turn))
        await router.tokenize("out")
    assert [len(f.calls) for f in fakes] == [3, 3]
    await router.aclose()
