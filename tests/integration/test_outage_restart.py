"""A model server killed with SIGKILL during ``run_eval`` and started again on the same port a
few seconds later: with the outage gate (``max_outage_s``) no sample is an error and the wait is
logged; with it off (0), the same kill loses the samples in flight.

The server is the stand-in of :mod:`tests.fixtures.outage_server` (a process of its own, the
same HTTP client path as a vLLM server: ``/tokenize``, ``/v1/completions``, ``/health``)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentmath.backends import build_backend
from agentmath.config import EvalConfig
from agentmath.eval.runner import backend_settings, run_eval
from tests.fixtures.outage_server import free_port, start_process

pytestmark = pytest.mark.integration
ROWS = [{"id": f"p{i}", "problem": f"What is {i} plus {i}?", "answer": str(2 * i)}
        for i in range(1, 11)]
DOWN_S = 4.0  # between the kill and the restart
DELAY_S = 0.4  # per completion, so that requests are in flight when the server dies
RL_DOWN_S = 10.0  # longer than RL's retries (4, backoff ~0.5 to 4 s) ride out on their own


def records(out: Path) -> list[dict[str, Any]]:
    path = out / "samples.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def kill_and_restart(procs: list[subprocess.Popen[bytes]], out: Path, port: int,
                           answers: Path, timings: dict[str, float]) -> None:
    """Once a few samples are recorded, SIGKILL the server; start it again DOWN_S later."""
    while len(records(out)) < 4:
        await asyncio.sleep(0.02)
    os.kill(procs[-1].pid, signal.SIGKILL)
    procs[-1].wait()
    timings["killed"] = time.monotonic()
    await asyncio.sleep(DOWN_S)
    procs.append(await asyncio.to_thread(start_process, port, answers, DELAY_S))
    timings["restarted"] = time.monotonic()


def run_with_a_restart(tmp_path: Path, name: str, max_outage_s: float
                       ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    data, answers = tmp_path / "data.jsonl", tmp_path / "answers.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    answers.write_text(json.dumps({r["problem"]: r["answer"] for r in ROWS}))
    port, out = free_port(), tmp_path / name
    procs = [start_process(port, answers, DELAY_S)]
    config = EvalConfig.model_validate({
        "dataset": str(data), "model": "m", "base_url": f"http://127.0.0.1:{port}",
        "samples": 2, "concurrency": 4, "http_retries": 2, "max_outage_s": max_outage_s,
        "sandbox": {"preload": [], "spare_workers": 0}})
    timings: dict[str, float] = {}

    async def main() -> None:
        backend = build_backend("openai", backend_settings(config))
        try:
            await asyncio.gather(run_eval(config, out, backend),
                                 kill_and_restart(procs, out, port, answers, timings))
        finally:
            await backend.aclose()

    try:
        asyncio.run(main())
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return records(out), timings


def test_a_killed_and_restarted_server_costs_no_sample(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentmath.backends.outage")
    started = time.monotonic()
    rows, timings = run_with_a_restart(tmp_path, "gated", max_outage_s=60)
    assert len(rows) == 20 and [r for r in rows if r["finish_reason"] == "error"] == []
    assert all(r["correct"] for r in rows)
    assert timings["restarted"] - timings["killed"] >= DOWN_S
    messages = [r.getMessage() for r in caplog.records if r.name == "agentmath.backends.outage"]
    held = [m for m in messages if "is unreachable" in m and "holding its requests" in m]
    resumed = [m for m in messages if "answers again after" in m]
    assert len(held) == 1 and len(resumed) == 1, messages
    waited = float(resumed[0].split("answers again after ")[1].split(" s")[0])
    assert DOWN_S - 1 <= waited <= DOWN_S + 6
    print(f"\ngated: 0 errors of {len(rows)}; {resumed[0]} "
          f"(run {time.monotonic() - started:.1f} s)")

    caplog.clear()
    rows, _ = run_with_a_restart(tmp_path, "ungated", max_outage_s=0)
    errors = [r for r in rows if r["finish_reason"] == "error"]
    assert len(rows) == 20 and errors, "without the gate the kill should cost samples"
    assert all("Connect" in r["error"] or "Remote" in r["error"] or "Read" in r["error"]
               for r in errors)
    assert not [r for r in caplog.records if r.name == "agentmath.backends.outage"]
    print(f"ungated: {len(errors)} errors of {len(rows)}")


def test_rl_with_the_openai_generator_waits_out_a_restart(tiny_model_dir: Path,
                                                         tmp_path: Path) -> None:
    """``agentmath rl`` (local engine, openai generator, the stand-in as its server): the server
    is killed once step 1 is logged and started again RL_DOWN_S later; every step's episodes
    are all correct (an errored episode would be wrong), the wait is in the run's log, and the
    restarted server is given the current weights before the held requests go on.
    (With max_outage_s = 0 the same kill made errored episodes: step 2's accuracy fell.)"""
    pytest.importorskip("torch")
    tasks = [json.loads(line) for line in
             (tiny_model_dir.parent / "test.jsonl").read_text().splitlines()[:8]]
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({t["problem"]: t["answer"] for t in tasks}))
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    port, out = free_port(), tmp_path / "rl"
    cfg = tmp_path / "rl.toml"
    cfg.write_text(
        f'model = "{tiny_model_dir}"\nsteps = 3\ngroup_size = 2\nprompts_per_step = 2\n'
        f'tensorboard = false\n[data]\ndataset = "{data}"\n[loop]\nmax_model_tokens = 64\n'
        f'[generator]\nbackend = "openai"\nbase_urls = ["http://127.0.0.1:{port}"]\n'
        f'served_name = "m"\nmax_outage_s = 60\n')
    procs = [start_process(port, answers, DELAY_S)]
    run = subprocess.Popen([sys.executable, "-m", "agentmath.cli", "rl", "--config", str(cfg),
                            "--out", str(out), "--json"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        metrics = out / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while not (metrics.exists() and metrics.read_text().strip()):
            assert run.poll() is None and time.monotonic() < deadline, run.stderr
            time.sleep(0.02)
        os.kill(procs[-1].pid, signal.SIGKILL)
        procs[-1].wait()
        time.sleep(RL_DOWN_S)
        procs.append(start_process(port, answers, DELAY_S, post_log=tmp_path / "posts.log"))
        stdout, stderr = run.communicate(timeout=240)
    finally:
        run.kill()
        for proc in procs:
            proc.kill()
            proc.wait()
    assert run.returncode == 0, stderr[-3000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # Every episode is correct (no reward variance: dynamic sampling drops every group).
    assert all(r["accuracy"] == 1.0 and r["groups_dropped"] >= 2 for r in rows), [
        (r["accuracy"], r["groups_dropped"]) for r in rows]
    held = [line for line in stderr.splitlines() if "is unreachable" in line]
    resumed = [line for line in stderr.splitlines() if "answers again after" in line]
    assert len(held) == 1 and len(resumed) == 1, stderr[-3000:]
    # The restarted server got the current weights (policy-v0) back before any held request.
    posts = (tmp_path / "posts.log").read_text().splitlines()
    assert posts[:2] == ["/collective_rpc", "/reset_prefix_cache"], posts[:6]
    print(f"\nrl: 3 steps, accuracy 1.0 in each; {resumed[0]}; then {posts[:3]}")


@pytest.mark.ray
def test_eval_on_ray_waits_out_a_restart(tmp_path: Path) -> None:
    """``agentmath eval --ray``: each worker's client has the bound (WorkerSpec); the same
    kill and restart costs no sample, and the wait is in the worker's log."""
    from tests.fixtures.ray_cluster import local_cluster

    data, answers = tmp_path / "data.jsonl", tmp_path / "answers.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    answers.write_text(json.dumps({r["problem"]: r["answer"] for r in ROWS}))
    port, out = free_port(), tmp_path / "ray"
    with local_cluster(2) as cluster:
        procs = [start_process(port, answers, DELAY_S)]
        run = subprocess.Popen(
            [sys.executable, "-m", "agentmath.cli", "eval", "--dataset", str(data), "--model",
             "m", "--base-url", f"http://127.0.0.1:{port}", "--out", str(out), "--json",
             "--samples", "2", "--concurrency", "4", "--http-retries", "2", "--ray",
             cluster.address, "--ray-workers", "1", "--set", "sandbox.preload=[]",
             "--set", "sandbox.spare_workers=0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 180
            while len(records(out)) < 4:
                assert run.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            os.kill(procs[-1].pid, signal.SIGKILL)
            procs[-1].wait()
            time.sleep(DOWN_S)
            procs.append(start_process(port, answers, DELAY_S))
            stdout, stderr = run.communicate(timeout=180)
        finally:
            run.kill()
            for proc in procs:
                proc.kill()
                proc.wait()
        # Workers' logs stay in Ray's session directory (log_to_driver is off).
        logs = Path(cluster.head_node.get_logs_dir_path())
        resumed = [line for path in logs.rglob("worker-*") if path.is_file()
                   for line in path.read_text(errors="replace").splitlines()
                   if "answers again after" in line]
    assert run.returncode == 0, stderr[-3000:]
    rows = records(out)
    assert len(rows) == 20 and [r for r in rows if r["finish_reason"] == "error"] == []
    assert json.loads(stdout)["n_errors"] == 0
    assert len(resumed) == 1, resumed
    print(f"\nray: 0 errors of {len(rows)}; {resumed[0]}")
