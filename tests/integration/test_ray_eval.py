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

from tests.fixtures.ray_cluster import local_cluster
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


def _busy_worker_node(proc: subprocess.Popen[Any], cluster: Any, path: Path,
                      timeout: float = 300) -> Any:
    """A worker node (not the head) whose rollout worker has finished a sample: it is started
    and, with episodes still queued, the driver has given it more (least load first), so
    removing it loses episodes in flight. (Removing a node whose worker is still starting
    would test only a failed start.)"""
    workers = {n.node_id: n for n in cluster.list_all_nodes() if n is not cluster.head_node}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line) if line.endswith("}") else {}
                node = record.get("trajectory", {}).get("ray_node")
                if node in workers:
                    return workers[node]
        _alive(proc)
        time.sleep(0.05)
    raise AssertionError(f"no sample from a worker node in {path} after {timeout} s")


def test_kill_9_of_the_driver_then_resume(cluster: Any, vllm_server: str,
                                          local_run: tuple[Path, tuple], tmp_path: Path) -> None:
    reference, data = local_run
    out = tmp_path / "ray"
    cmd = eval_cmd(vllm_server, out, "--ray", cluster.address, dataset=data)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    _wait_for_samples(proc, out / "samples.jsonl", 3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = len(lines(out / "samples.jsonl"))
    assert 3 <= partial < 18, partial
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    keys = Counter((r["problem_id"], r["sample_index"]) for r in lines(out / "samples.jsonl"))
    assert len(keys) == 18 and set(keys.values()) == {1}
    assert outputs(out) == outputs(reference)


def test_worker_node_lost_mid_run(cluster: Any, vllm_server: str,
                                  local_run: tuple[Path, tuple], tmp_path: Path) -> None:
    """Last in this module: it removes a node from the shared cluster."""
    reference, data = local_run
    out = tmp_path / "ray"
    proc = subprocess.Popen(eval_cmd(vllm_server, out, "--ray", cluster.address,
                                     "--concurrency", "6", dataset=data),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = _busy_worker_node(proc, cluster, out / "samples.jsonl")
    cluster.remove_node(victim, allow_graceful=False)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert "lost its worker" in stderr  # an episode was running there and was placed again
    assert json.loads(stdout)["n_samples"] == 18  # Ray's news of the lost node is not on stdout
    records = lines(out / "samples.jsonl")
    keys = Counter((r["problem_id"], r["sample_index"]) for r in records)
    assert len(keys) == 18 and set(keys.values()) == {1}
    assert not any(r.get("error") for r in records)
    assert outputs(out) == outputs(reference)  # re-run from scratch, same seed: same sample
