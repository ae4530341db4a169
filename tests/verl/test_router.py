"""agentmath's router as verl's load-balancer plug-in (``rollout.router_config_path``).

Loaded the way verl loads it (its own YAML loader and class resolver on
configs/verl/router.yaml), then driven through verl's ``RequestLoadBalancer`` protocol:
siblings and episodes stick, load spills, servers come and go.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
from verl.workers.rollout.router import (
    RequestLoadBalancer,
    _load_router_yaml,
    _resolve_router_class,
)

from agentmath.errors import ConfigError
from agentmath.verl.router import NO_SERVER, AgentMathRouter

ROOT = Path(__file__).resolve().parents[2]
YAML = ROOT / "configs" / "verl" / "router.yaml"


def handles(*ids: str) -> dict[str, Any]:
    return {sid: f"handle-of-{sid}" for sid in ids}


def from_yaml(servers: dict[str, Any], **over: Any) -> AgentMathRouter:
    """The plug-in exactly as verl builds it: cls(servers, the YAML as a dict)."""
    config = _load_router_yaml(str(YAML))
    cls = _resolve_router_class(config["router_class"])
    return cls(servers, {**config, **over})


def prompt(group: int, length: int = 100) -> list[int]:
    return [group + 1000] + list(range(length - 1))


def test_verl_loads_the_plugin_and_it_has_the_whole_protocol() -> None:
    router = from_yaml(handles("a", "b"))
    assert isinstance(router, AgentMathRouter)
    members = [n for n, _ in inspect.getmembers(RequestLoadBalancer, inspect.isfunction)
               if not n.startswith("_")]
    assert members and all(callable(getattr(router, n, None)) for n in members)
    assert router.require_acquire_fields() == ["prompt_ids"]
    assert router.require_release_fields() == ["request_id"]
    server, handle = router.acquire_server("r0", prompt_ids=prompt(0))
    assert handle == f"handle-of-{server}"


def test_siblings_share_a_server_and_new_groups_go_to_the_least_loaded() -> None:
    router = from_yaml(handles("a", "b", "c"))
    first = [router.acquire_server(f"g0-s{i}", prompt_ids=prompt(0))[0] for i in range(4)]
    assert len(set(first)) == 1  # the group's siblings share one prefix cache
    second = router.acquire_server("g1-s0", prompt_ids=prompt(1))[0]
    third = router.acquire_server("g2-s0", prompt_ids=prompt(2))[0]
    assert len({first[0], second, third}) == 3  # new groups spread by load
    # an episode's later turns (longer, different prompt) return to its server
    longer = prompt(0) + [7] * 50
    assert router.acquire_server("g0-s2", prompt_ids=longer)[0] == first[0]
    status = router.get_status()
    assert status["total_inflight"] == 7 == router.get_total_inflight()
    assert status["servers"][first[0]] == 5


def test_a_saturated_group_spills_to_the_least_loaded_server() -> None:
    kept = from_yaml(handles("a", "b"))  # the recipe's slack: a small group stays together
    assert {kept.acquire_server(f"s{i}", prompt_ids=prompt(0))[0] for i in range(6)} == {"a"}
    router = from_yaml(handles("a", "b"), spill_slack=0, spill_factor=1.5)
    homes = [router.acquire_server(f"s{i}", prompt_ids=prompt(0))[0] for i in range(6)]
    # the group's server a takes a sibling while (its load + 1) <= 1.5 x (b's load + 1)
    assert homes == ["a", "b", "a", "a", "b", "a"]
    status = router.get_status()
    assert status["servers"] == {"a": 4, "b": 2}
    assert status["router"]["spills"] == {"a": 2, "b": 0}


def test_weight_counts_prompt_length() -> None:
    router = from_yaml(handles("a", "b"), l_base=100, spill_slack=1000)
    server, _ = router.acquire_server("long", prompt_ids=prompt(0, length=1000))
    assert router.get_status()["router"]["load"][server] == 1000 // 100 + 1
    router.release_server(server, request_id="long")
    assert router.get_status()["router"]["load"][server] == 0
    assert router.get_total_inflight() == 0
    router.release_server(server, request_id="unknown")  # ignored
    assert router.get_total_inflight() == 0


def test_remove_and_add_servers() -> None:
    router = from_yaml(handles("a", "b"))
    home, _ = router.acquire_server("ep", prompt_ids=prompt(0))
    other = "b" if home == "a" else "a"
    router.remove_servers([home])
    assert router.get_all_servers() == [other]
    assert router.acquire_server("ep", prompt_ids=prompt(0) + [1])[0] == other  # moved
    router.release_server(home, request_id="ep")  # in flight on the removed server: fine
    assert router.get_total_inflight() == 1
    router.add_servers(handles("c"))
    assert router.acquire_server("fresh", prompt_ids=prompt(5))[0] == "c"  # least loaded
    assert all(router.acquire_server(f"x{i}", prompt_ids=prompt(10 + i))[0] != home
               for i in range(10))
    router.add_servers({"c": "new-handle"})  # a known id gets its new handle only
    assert router.get_all_servers() == [other, "c"]
    assert router.acquire_server("fresh", prompt_ids=prompt(5)) == ("c", "new-handle")


def test_empty_pool_raises_what_verl_expects_until_servers_come() -> None:
    router = from_yaml({})
    with pytest.raises(RuntimeError, match=NO_SERVER):
        router.acquire_server("r", prompt_ids=prompt(0))
    router.add_servers(handles("a"))
    assert router.acquire_server("r", prompt_ids=prompt(0))[0] == "a"
    router.remove_servers(["a"])
    with pytest.raises(RuntimeError, match=NO_SERVER):
        router.acquire_server("r2", prompt_ids=prompt(0))


def test_clear_sticky_cache_drops_homes() -> None:
    router = from_yaml(handles("a", "b"))
    home, _ = router.acquire_server("g0-s0", prompt_ids=prompt(0))
    router.release_server(home, request_id="g0-s0")
    result = router.clear_sticky_cache()
    assert result["cleared_entries"] == 2  # the episode and its group
    assert result["server_loads"] == {"a": 0, "b": 0}
    router.acquire_server("busy", prompt_ids=prompt(9))  # lands on the first of equals: a
    sibling, _ = router.acquire_server("g0-s1", prompt_ids=prompt(0))
    assert sibling == "b"  # no home any more: by load


def test_baseline_policy_and_bad_config() -> None:
    router = from_yaml(handles("a", "b", "c"), policy="round_robin")
    picks = [router.acquire_server(f"g0-s{i}", prompt_ids=prompt(0))[0] for i in range(6)]
    assert picks == ["a", "b", "c", "a", "b", "c"]
    with pytest.raises(ConfigError, match="spill_factr"):
        from_yaml(handles("a"), spill_factr=2.0)


def test_verls_ray_factory_runs_the_plugin_as_an_actor() -> None:
    """The deployment path: verl's get_router_handle wraps the class in ray.remote and the
    client calls it by RPC (a new local one-CPU Ray instance, never one already running)."""
    ray = pytest.importorskip("ray")
    from verl.workers.rollout.router import get_router_handle

    @ray.remote(num_cpus=0)
    class Server:
        def __init__(self, name: str) -> None:
            self.name = name

        def ping(self) -> str:
            return self.name

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
             object_store_memory=100 * 1024 * 1024)
    try:
        servers = {sid: Server.remote(sid) for sid in ("s0", "s1")}
        balancer = get_router_handle(servers, router_config_path=str(YAML))
        assert ray.get(balancer.require_acquire_fields.remote()) == ["prompt_ids"]
        picks = []
        for i in range(3):
            sid, handle = ray.get(balancer.acquire_server.remote(
                request_id=f"g0-s{i}", prompt_ids=prompt(0)))
            picks.append((sid, ray.get(handle.ping.remote())))
        assert len(set(picks)) == 1 and picks[0][0] == picks[0][1]  # siblings, real handles
        other, _ = ray.get(balancer.acquire_server.remote(request_id="g1-s0",
                                                          prompt_ids=prompt(1)))
        assert other != picks[0][0]
        balancer.release_server.remote(server_id=other, request_id="g1-s0")
        assert ray.get(balancer.get_total_inflight.remote()) == 3
    finally:
        ray.shutdown()
