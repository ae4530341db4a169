"""`agentmath eval --ray` on a local multi-node Ray cluster (ray.cluster_utils.Cluster: a head
and two worker nodes of 1 CPU each, dashboard off) against a real vLLM server: the same samples
as a local run (same seeds), a worker node lost mid-run (its episodes run again elsewhere, none
lost or duplicated, the results unchanged), and a resume after kill -9 of the driver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.ray_cluster import local_cluster, lose_node
from tests.fixtures.vllm_server import VllmServer
from tests.integration.test_eval_e2e import eval_cmd, held_out_dataset, lines

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.ray]

@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with local_cluster(3) as c:
        yield c


def outputs(path: Path) -> dict[tuple[str, int], list[tuple[str, str]]]:
    """Every sample's segments (source, text) by (problem, sample index)."""
    return {(r["problem_id"], r["sample_index"]):
            [(s["source"], s["text"]) for s in r["trajectory"]["segments"]]
            for r in lines(path / "samples.jsonl")}


@pytest.fixture(scope="module")
def local_run(vllm_server: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple]:
    """The reference: the same evaluation in one process (sampled, temperature 1)."""
    tmp = tmp_path_factory.mktemp("local")
    data = held_out_dataset(tmp / "held_out.jsonl")
    proc = subprocess.run(eval_cmd(vllm_server, tmp / "run", dataset=data),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "run", data


def test_ray_eval_gives_the_local_samples(cluster: Any, vllm_server: str,
                                          local_run: tuple[Path, tuple], tmp_path: Path) -> None:
    reference, data = local_run
    out = tmp_path / "ray"
    proc = subprocess.run(eval_cmd(vllm_server, out, "--ray", cluster.address, dataset=data),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout)  # the whole of stdout: one JSON document
    assert metrics["n_samples"] == 18 and metrics["n_errors"] == 0
    got = outputs(out)
    assert len(got) == 18 and got == outputs(reference)
    assert sum(src == "tool" for segs in got.values() for src, _ in segs) > 0
    nodes = {r["trajectory"]["ray_node"] for r in lines(out / "samples.jsonl")}
    assert nodes <= {n.node_id for n in cluster.list_all_nodes()}, nodes
    config = json.loads((out / "config.json").read_text())
    assert config["ray"]["address"] == cluster.address


def _alive(proc: subprocess.Popen[Any]) -> None:
    """Fail at once (with its output) when the evaluation ended before the test acted."""
    if proc.poll() is not None:
        out, err = proc.communicate()
        raise AssertionError(f"the evaluation ended early (exit {proc.returncode}): "
                             f"{(err or '')[-3000:]}")


def _wait_for_samples(proc: subprocess.Popen[Any], path: Path, n: int,
                      timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        _alive(proc)
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} samples in {path} after {timeout} s")


def _wait_for_requests(proc: subprocess.Popen[Any], server: VllmServer, n: int,
                       stderr: Path, timeout: float = 300) -> None:
    """Wait until the server's front end has taken in ``n`` requests (its engine may be
    frozen: they are then all in flight); fail at once, with the run's stderr, if it ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.added() >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the evaluation ended early (exit {proc.returncode}): "
                                 f"{stderr.read_text(errors='replace')[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"the server took in {server.added()} of {n} requests in {timeout} s")


def test_kill_9_of_the_driver_then_resume(cluster: Any, vllm_server_handle: VllmServer,
                                          local_run: tuple[Path, tuple], tmp_path: Path) -> None:
    """The driver killed (SIGKILL, its process group) once 3 samples are recorded, with the
    server's engine frozen from then on so that the run cannot finish before the kill; the
    same command again completes the run: every sample once, the local run's samples."""
    reference, data = local_run
    server, out = vllm_server_handle, tmp_path / "ray"
    cmd = eval_cmd(server.url, out, "--ray", cluster.address, dataset=data)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        _wait_for_samples(proc, out / "samples.jsonl", 3)
        server.freeze()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        server.thaw()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    partial = len(lines(out / "samples.jsonl"))
    assert 3 <= partial < 18, partial
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    keys = Counter((r["problem_id"], r["sample_index"]) for r in lines(out / "samples.jsonl"))
    assert len(keys) == 18 and set(keys.values()) == {1}
    assert outputs(out) == outputs(reference)


def test_worker_node_lost_mid_run(cluster: Any, vllm_server_handle: VllmServer,
                                  local_run: tuple[Path, tuple], tmp_path: Path) -> None:
    """A worker node removed while it certainly runs episodes: the shared server's engine is
    frozen before the run, so every episode placed waits on its first request; once the front
    end has taken in as many requests as the run's concurrency (6), every worker is full (3
    workers, one per 1-CPU node, 2 episodes each), a worker node is removed and the engine
    thawed. (Waiting for a sample from a worker node and removing it then raced the run: on a
    fast machine it ended between two polls, or the node had nothing left to run.) Last in
    this module: it removes a node from the shared cluster."""
    reference, data = local_run
    server, out = vllm_server_handle, tmp_path / "ray"
    concurrency = 6
    before = server.added()
    server.freeze()
    with open(tmp_path / "stdout.txt", "w") as so, open(tmp_path / "stderr.txt", "w") as se:
        proc = subprocess.Popen(
            eval_cmd(server.url, out, "--ray", cluster.address, "--concurrency",
                     str(concurrency), "--http-timeout", "600", dataset=data),
            stdout=so, stderr=se, text=True)
    try:
        try:
            _wait_for_requests(proc, server, before + concurrency, tmp_path / "stderr.txt")
            victim = next(n for n in cluster.list_all_nodes() if n is not cluster.head_node)
            lose_node(cluster, victim)
        finally:
            server.thaw()
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout, stderr = ((tmp_path / f).read_text() for f in ("stdout.txt", "stderr.txt"))
    assert proc.returncode == 0, stderr[-3000:]
    assert "lost its worker" in stderr  # an episode was running there and was placed again
    assert json.loads(stdout)["n_samples"] == 18  # Ray's news of the lost node is not on stdout
    records = lines(out / "samples.jsonl")
    keys = Counter((r["problem_id"], r["sample_index"]) for r in records)
    assert len(keys) == 18 and set(keys.values()) == {1}
    assert not any(r.get("error") for r in records)
    assert outputs(out) == outputs(reference)  # re-run from scratch, same seed: same sample
