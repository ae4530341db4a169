"""Partial rollout on a local 3-node Ray cluster (ray.cluster_utils.Cluster: a head and two
worker nodes of 1 CPU each, dashboard off), against the local engine's PartialRollout.

The model is the stand-in of :mod:`tests.fixtures.script_server` (samples a function of the
seed, cut turns continued exactly, cells that build on each other), served in this process;
each worker has its own client of it and its own sandbox pool on its node. Episodes are cut
into segments of a few tokens and parked on their workers between iterations, under a
staleness bound of one version; between two iterations, a worker node holding parked
episodes is removed. Their segments fail there and continue on the other workers from what
they had done (context re-prefilled, cells replayed in a new session): every sample is the
local engine's, none lost or twice, and none spans more policy versions than the bound.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentmath.backends.base import SamplingParams
from agentmath.backends.registry import BackendSettings, build_backend
from agentmath.config import LoopConfig, RayConfig, RolloutConfig, SandboxConfig
from agentmath.formats import get_format
from agentmath.rollout.partial import PartialRollout
from agentmath.rollout.records import GroupRequest
from agentmath.rollout.scheduler import RolloutEngine
from agentmath.sandbox.factory import open_sandbox
from agentmath.seeding import derive_seed
from agentmath.tasks import Task
from tests.fixtures.fault_server import _QuietServer
from tests.fixtures.logs import why_not_captured
from tests.fixtures.outage_server import _with_health
from tests.fixtures.ray_cluster import local_cluster, lose_node
from tests.fixtures.script_server import ScriptServer

PARTIAL_LOG = "agentmath.distributed.partial"  # where "lost its worker" is logged

pytestmark = [pytest.mark.integration, pytest.mark.ray]

SANDBOX = SandboxConfig(preload=(), spare_workers=0, max_sessions=32)
LOOP = LoopConfig(max_model_tokens=1024, max_total_tokens=8192, max_tool_calls=4)
ROLLOUT = RolloutConfig(segment_tokens=64, max_staleness=3, stale="regenerate",
                        max_in_flight=6)
GROUPS, SAMPLES, BATCH = 6, 2, 2


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    """The stand-in, with ``/health`` and vLLM's weight-sync routes (for ``agentmath rl``)."""
    state = ScriptServer(delay_s=0.02)
    server = _QuietServer(("127.0.0.1", 0), _with_health(state, None))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def requests() -> list[GroupRequest]:
    return [GroupRequest(Task(f"p{i}", f"Problem {i}: follow the plan.", "0"), SAMPLES)
            for i in range(GROUPS)]


def seeds(request: GroupRequest, index: int) -> SamplingParams:
    """One seed per sample (regenerated samples too: what a sample is cannot depend on when
    it was drawn, which under partial rollout depends on timing, locally as on Ray)."""
    return SamplingParams(temperature=1.0, seed=derive_seed(3, request.group_id, index),
                          logprobs=True)


async def iterate(iterations: Any, engine: Any, between: Any = None) -> list[Any]:
    results = []
    for version in range(60):
        engine.set_policy_version(version)
        result = await iterations.iteration(BATCH)
        results.append(result)
        if between is not None:
            between(version)
        if result.exhausted:
            return results
    raise AssertionError("the requests never ran out")


def samples(results: list[Any]) -> dict[tuple[str, int], tuple[list[int], SamplingParams]]:
    out = {}
    for r in results:
        for g in r.groups:
            for s in g.samples:
                assert (s.group_id, s.index) not in out, "a sample handed out twice"
                out[s.group_id, s.index] = (s.trajectory.token_ids, s.trajectory.sampling)
    return out


async def local_run(url: str) -> list[Any]:
    backend = build_backend("openai", BackendSettings("m", url))
    try:
        async with open_sandbox(SANDBOX, None, None) as pool:
            engine = RolloutEngine(backend, pool, get_format("code_interpreter"), loop=LOOP,
                                   config=ROLLOUT, sampling=seeds)
            return await iterate(PartialRollout(engine, requests()), engine)
    finally:
        await backend.aclose()


async def ray_run(url: str, cluster: Any) -> tuple[list[Any], dict[str, Any]]:
    """The same iterations on the cluster; after the first iteration that leaves episodes
    parked on a worker node (not the head), that node is removed."""
    from agentmath.distributed.engine import RayRolloutEngine
    from agentmath.distributed.iterations import RayIterations
    from agentmath.distributed.worker import WorkerSpec

    spec = WorkerSpec("openai", BackendSettings("m", url), loop=LOOP, sandbox=SANDBOX)
    engine = RayRolloutEngine(spec, RayConfig(address=cluster.address, workers=3), seeds,
                              max_in_flight=ROLLOUT.max_in_flight)
    removed: dict[str, Any] = {}
    try:
        await engine.start()
        await asyncio.gather(*(slot.ready for slot in engine.slots))  # one on each node
        engine.set_budgets(LOOP, ROLLOUT)
        iterations = RayIterations(engine, requests())
        heads = {cluster.head_node.node_id}
        nodes = {n.node_id: n for n in cluster.list_all_nodes()}

        def remove_a_node_with_parked_episodes(version: int) -> None:
            if removed:
                return
            parked = [e for e in iterations._segments._parked if e.home is not None]
            for episode in parked:
                node = episode.home.ready.result()["node_id"]
                if node not in heads:
                    here = [e for e in parked if e.home is episode.home]
                    removed.update(node=node, version=version, episodes=len(here),
                                   cells=sum(len(e.progress.cells) for e in here if e.progress),
                                   # (group, sample) -> (cells run there before the
                                   # loss, regenerations of the sample by then)
                                   moved={(e.owner.request.group_id, e.index): (
                                       len(e.progress.cells) if e.progress else 0,
                                       e.owner.restarts.get(e.index, 0)) for e in here})
                    lose_node(cluster, nodes[node])
                    return

        results = await iterate(iterations, engine, remove_a_node_with_parked_episodes)
        await iterations.aclose()
        return results, removed
    finally:
        await engine.close()


def test_partial_rollout_on_ray_survives_a_node_removed_while_episodes_are_parked(
        model_url: str, caplog: pytest.LogCaptureFixture) -> None:
    reference = asyncio.run(local_run(model_url))
    with local_cluster(3) as cluster, caplog.at_level(logging.INFO, "agentmath.distributed"):
        results, removed = asyncio.run(ray_run(model_url, cluster))
    assert removed, "no worker node held parked episodes after any iteration"
    assert "lost its worker" in caplog.text, why_not_captured(caplog, PARTIAL_LOG)
    assert "continues on another worker" in caplog.text
    got = samples(results)
    assert len(got) == GROUPS * SAMPLES and got == samples(reference)
    trajectories = [s.trajectory for r in results for g in r.groups for s in g.samples]
    assert all(t.finish_reason in ("answered", "eos") for t in trajectories)
    assert all("lost my place" not in t.completion_text for t in trajectories)
    assert all("Error" not in t.completion_text for t in trajectories)  # no NameError
    assert max(t.advances for t in trajectories) > 2
    # an episode moved off the lost node with cells behind it replays them in a new session
    # elsewhere, lazily: when, and only if, it runs another cell there (unless it went stale
    # meanwhile and was regenerated from scratch: a new episode, nothing to replay)
    for r in results:
        for s in (s for g in r.groups for s in g.samples):
            cells_before, restarts = removed["moved"].get((s.group_id, s.index), (0, 0))
            if cells_before and s.restarts == restarts and len(s.trajectory.tool_calls) > (
                    cells_before):
                assert s.trajectory.session_replays > 0, (s.group_id, s.index, cells_before)
    for t in trajectories:  # the staleness bound (1): no sample spans more than 2 versions
        versions = t.policy_versions
        assert versions[-1] - versions[0] <= ROLLOUT.max_staleness
    stats = [r.stats for r in results]
    assert sum(s.parked for s in stats) > 0 and sum(s.resumed for s in stats) > 0
    survivors = {s.trajectory.ray_node for r in results[removed["version"] + 1:]
                 for g in r.groups for s in g.samples}
    assert removed["node"] not in survivors
    print(f"\nremoved node after iteration {removed['version']} holding "
          f"{removed['episodes']} parked episodes ({removed['cells']} cells); "
          f"{len(results)} iterations, regenerated {sum(s.regenerated for s in stats)}, "
          f"replays {sum(t.session_replays for t in trajectories)}")


@pytest.mark.timeout(900)  # the trainer's start (torch, the tiny model) is slow on 2 cores
def test_rl_on_ray_with_segment_budgets_loses_a_node_between_steps(
        model_url: str, tiny_model_dir: Any, tmp_path: Any,
        caplog: pytest.LogCaptureFixture, all_workers_ready: None) -> None:
    """``train_rl`` with its rollouts on the cluster and partial rollout on (the stand-in as the
    generator's server): episodes park on the workers across steps and a worker node is
    removed after step 1; the run finishes every step, the episodes parked there continue
    elsewhere, and samples carry the versions of more than one step. (The segment budget lets
    the shortest scripts finish in one segment: with every episode longer than a segment, an
    iteration over an endless prompt stream would park episodes until the sandboxes run out of
    sessions, in one process as on Ray.) Every worker is ready before step 1
    (``all_workers_ready``), so the removed one is one that step 2 places on."""
    pytest.importorskip("torch")
    from agentmath.rl.config import RLConfig
    from agentmath.rl.records import read_steps
    from agentmath.rl.trainer import train_rl

    data = tmp_path / "train.jsonl"
    data.write_text("".join(f'{{"id": "q{i}", "problem": "Problem {i}.", "answer": "1"}}\n'
                            for i in range(12)))
    cfg = RLConfig.model_validate({
        "model": str(tiny_model_dir), "data": {"dataset": str(data)}, "steps": 3,
        "group_size": 2, "prompts_per_step": 2, "dynamic_sampling": False,
        "rewards": [{"name": "tool_error", "weight": 1.0}],
        "loop": {"max_model_tokens": 400, "max_tool_calls": 4, "max_total_tokens": 4096},
        "rollout": {"segment_tokens": 96, "max_staleness": 2, "max_in_flight": 6,
                    "max_parked_sessions": 24},
        "sandbox": {"preload": [], "spare_workers": 0},
        "generator": {"backend": "openai", "base_urls": [model_url], "served_name": "m"},
        "tensorboard": False, "checkpoint_every": 0})
    with local_cluster(3) as cluster, caplog.at_level(logging.INFO, "agentmath.distributed"):
        workers = [n for n in cluster.list_all_nodes() if n is not cluster.head_node]

        def lose_a_node(metrics: Any) -> None:
            if metrics.step == 1:
                lose_node(cluster, workers[0])

        on_ray = cfg.model_copy(update={"ray": RayConfig(address=cluster.address, workers=3)})
        result = train_rl(on_ray, tmp_path / "ray", progress=False, on_step=lose_a_node)
    rows = read_steps(result.metrics)
    assert result.steps == 3 and [r.step for r in rows] == [1, 2, 3]
    assert sum(r.parked for r in rows) > 0, rows
    assert any(len(r.extra.sample_versions) > 1 for r in rows), rows
    # segments placed on the removed node failed
    assert "lost its worker" in caplog.text, why_not_captured(caplog, PARTIAL_LOG)
    print("\n" + "; ".join(f"step {r.step}: versions {r.extra.sample_versions}, "
                           f"parked {r.parked}" for r in rows))
