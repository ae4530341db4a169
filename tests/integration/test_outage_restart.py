"""A model server killed with SIGKILL during ``run_eval`` and started again on the same port a
few seconds later: with the outage gate (``max_outage_s``) no sample is an error and the wait is
logged; with it off (0), the same kill loses the samples in flight.

The server is the stand-in of :mod:`tests.fixtures.outage_server` (a process of its own, the
same HTTP client path as a vLLM server: ``/tokenize``, ``/v1/completions``, ``/health``)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agentmath.backends import build_backend
from agentmath.eval.config import EvalConfig
from agentmath.eval.runner import backend_settings, run_eval
from tests.fixtures.outage_server import WEIGHT_LOAD, StandIn, free_port
from tests.fixtures.restart import records, run_through_a_restart

pytestmark = pytest.mark.integration
ROWS = [{"id": f"p{i}", "problem": f"What is {i} plus {i}?", "answer": str(2 * i)}
        for i in range(1, 11)]
DOWN_S = 4.0  # between the kill and the restart
DELAY_S = 0.4  # per completion, so that requests are in flight when the server dies
RL_DOWN_S = 10.0  # longer than RL's retries (4, backoff ~0.5 to 4 s) ride out on their own


async def kill_and_restart(server: StandIn, out: Path, timings: dict[str, float]) -> None:
    """Once a few samples are recorded, SIGKILL the server; start it again DOWN_S later."""
    while len(records(out)) < 4:
        await asyncio.sleep(0.02)
    server.kill()
    timings["killed"] = time.monotonic()
    await asyncio.sleep(DOWN_S)
    await asyncio.to_thread(server.start)
    timings["restarted"] = time.monotonic()


def run_with_a_restart(tmp_path: Path, name: str, max_outage_s: float
                       ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    data, answers = tmp_path / "data.jsonl", tmp_path / "answers.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    answers.write_text(json.dumps({r["problem"]: r["answer"] for r in ROWS}))
    port, out = free_port(), tmp_path / name
    config = EvalConfig.model_validate({
        "dataset": str(data), "model": "m", "base_url": f"http://127.0.0.1:{port}",
        "samples": 2, "concurrency": 4, "http_retries": 2, "max_outage_s": max_outage_s,
        "sandbox": {"preload": [], "spare_workers": 0}})
    timings: dict[str, float] = {}

    async def main(server: StandIn) -> None:
        backend = build_backend("openai", backend_settings(config))
        try:
            await asyncio.gather(run_eval(config, out, backend),
                                 kill_and_restart(server, out, timings))
        finally:
            await backend.aclose()

    with StandIn(port, answers, DELAY_S) as server:
        asyncio.run(main(server))
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


@dataclass
class RLRestart:
    """What one ``agentmath rl`` run through a kill and restart of its server gave."""

    returncode: int
    rows: list[dict[str, Any]]  # metrics.jsonl
    stderr: str
    killed_turn: int  # tool outputs in the context of the request in flight at the kill
    after: list[str]  # the restarted server's POSTs, in order


def completions_seen(lines: list[str]) -> list[int]:
    """The tool outputs in the context of each completion request in a server's POST log."""
    return [int(line.split()[1]) for line in lines if line.startswith("/v1/completions ")]


def posts(log: Path, since: int = 0) -> list[str]:
    return log.read_text().splitlines()[since:] if log.exists() else []


def rl_run_files(tiny_model_dir: Path, tmp_path: Path, ports: list[int], *, steps: int,
                 prompts: int) -> tuple[Path, Path]:
    """(the stand-ins' answers file, the ``agentmath rl`` config): the test model's first 8
    problems as the data, the openai generator at the stand-ins on ``ports``, waiting up to
    60 s for an outage, ``steps`` steps of ``prompts`` x 2 episodes."""
    tasks = [json.loads(line) for line in
             (tiny_model_dir.parent / "test.jsonl").read_text().splitlines()[:8]]
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({t["problem"]: t["answer"] for t in tasks}))
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    urls = ", ".join(f'"http://127.0.0.1:{p}"' for p in ports)
    cfg = tmp_path / "rl.toml"
    cfg.write_text(
        f'model = "{tiny_model_dir}"\nsteps = {steps}\ngroup_size = 2\n'
        f'prompts_per_step = {prompts}\ntensorboard = false\n[data]\ndataset = "{data}"\n'
        f'[loop]\nmax_model_tokens = 256\nmax_tool_calls = 4\n[sandbox]\npreload = []\n'
        f'spare_workers = 0\n[generator]\nbackend = "openai"\nbase_urls = [{urls}]\n'
        f'served_name = "m"\nmax_outage_s = 60\n')
    return answers, cfg


def rl_with_a_restart(tiny_model_dir: Path, tmp_path: Path,
                      ray_args: list[str] | None = None) -> RLRestart:
    """``agentmath rl`` (openai generator, the stand-in in ``tools`` mode as its server, 3
    steps): once step 1 is logged and an episode's request after one of its cells is in
    flight, the server is killed; RL_DOWN_S later it is started again on the same port."""
    pytest.importorskip("torch")
    port, out = free_port(), tmp_path / "rl"
    answers, cfg = rl_run_files(tiny_model_dir, tmp_path, [port], steps=3, prompts=2)
    before, after = tmp_path / "posts-before.log", tmp_path / "posts-after.log"
    metrics = out / "metrics.jsonl"
    mark: list[int] = []  # the POSTs before step 2's episodes

    def in_flight_after_a_cell() -> bool:
        if not mark:
            if not (metrics.exists() and metrics.read_text().strip()):
                return False
            mark.append(len(posts(before)))
        return bool([k for k in completions_seen(posts(before, mark[0])) if k in (1, 2)])

    with StandIn(port, answers, DELAY_S, post_log=before, tools=True) as server:
        got = run_through_a_restart(
            [sys.executable, "-m", "agentmath.cli", "rl", "--config", str(cfg), "--out",
             str(out), "--json", *(ray_args or [])],
            when=in_flight_after_a_cell, kill=server.kill,  # that request is in flight
            start=partial(server.start, post_log=after, tools=True), down_s=RL_DOWN_S,
            log_dir=tmp_path)
    killed_turn = completions_seen(posts(before))[-1]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return RLRestart(got.returncode, rows, got.stderr, killed_turn, posts(after))


def check_rl_restart(got: RLRestart, outage_log: list[str]) -> None:
    """Every step ran every episode to a right answer through its three cells, none an
    error; the wait is logged once; the restarted server got the current weights back before
    any held request, then the request in flight at the kill (after a cell) came again, and
    the cell it wrote read the variable set before the outage."""
    assert got.returncode == 0, got.stderr[-3000:]
    assert [r["step"] for r in got.rows] == [1, 2, 3]
    # An errored episode is wrong; a cell that lost the session's variable is a tool error
    # (NameError) and a wrong answer. No reward variance: dynamic sampling drops every group.
    assert all(r["accuracy"] == 1.0 and r["tool_error_rate"] == 0.0
               and r["tool_calls_mean"] == 3.0 and r["groups_dropped"] >= 2
               for r in got.rows), [(r["accuracy"], r["tool_error_rate"], r["tool_calls_mean"])
                                    for r in got.rows]
    held = [line for line in outage_log if "is unreachable" in line]
    resumed = [line for line in outage_log if "answers again after" in line]
    assert len(held) == 1 and len(resumed) == 1, outage_log
    waited = float(resumed[0].split("answers again after ")[1].split(" s")[0])
    assert RL_DOWN_S <= waited <= RL_DOWN_S + 10
    assert got.after[:3] == WEIGHT_LOAD, got.after[:6]
    assert got.killed_turn in (1, 2)  # a cell had run in that episode's session
    first = completions_seen(got.after)[:4]  # the held requests (4 episodes in flight)
    assert got.killed_turn in first, (got.killed_turn, first)


def test_rl_with_the_openai_generator_waits_out_a_restart(tiny_model_dir: Path,
                                                         tmp_path: Path) -> None:
    """``agentmath rl``, local engine: the kill-and-restart costs no sample (every episode of
    every step is right), the wait is in the run's log, the restarted server gets the
    current weights before the held requests go on, and the episodes in flight keep their
    sandbox sessions: a cell after the outage reads what a cell before it set.
    (With max_outage_s = 0 the same kill made errored episodes: step 2's accuracy fell.)"""
    got = rl_with_a_restart(tiny_model_dir, tmp_path)
    check_rl_restart(got, got.stderr.splitlines())
    resumed = [line for line in got.stderr.splitlines() if "answers again after" in line]
    print(f"\nrl: 3 steps, accuracy 1.0 in each; {resumed[0]}; then {got.after[:3]}")


@pytest.mark.ray
def test_rl_on_ray_waits_out_a_restart(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``agentmath rl --ray``: the worker's client holds its requests (WorkerSpec carries the
    bound), the worker loads the trainer's current version into the restarted server before
    they go on (WorkerSpec.restore_weights), and the run is as the local one: no sample
    lost, the sessions kept, the wait in the worker's log."""
    from tests.fixtures.ray_cluster import local_cluster

    with local_cluster(2) as cluster:
        got = rl_with_a_restart(tiny_model_dir, tmp_path,
                                ["--ray", cluster.address, "--ray-workers", "1"])
        # Workers' logs stay in Ray's session directory (log_to_driver is off).
        logs = Path(cluster.head_node.get_logs_dir_path())
        outage_log = [line for path in logs.rglob("worker-*") if path.is_file()
                      for line in path.read_text(errors="replace").splitlines()
                      if "is unreachable" in line or "answers again after" in line]
    check_rl_restart(got, outage_log)
    resumed = [line for line in outage_log if "answers again after" in line]
    print(f"\nrl --ray: 3 steps, accuracy 1.0 in each; {resumed[0]}; then {got.after[:3]}")


@pytest.mark.ray
def test_eval_on_ray_waits_out_a_restart(tmp_path: Path) -> None:
    """``agentmath eval --ray``: each worker's client has the bound (WorkerSpec); the same
    kill and restart costs no sample, and the wait is in the worker's log."""
    from tests.fixtures.ray_cluster import local_cluster

    data, answers = tmp_path / "data.jsonl", tmp_path / "answers.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    answers.write_text(json.dumps({r["problem"]: r["answer"] for r in ROWS}))
    port, out = free_port(), tmp_path / "ray"
    with local_cluster(2) as cluster, StandIn(port, answers, DELAY_S) as server:
        got = run_through_a_restart(
            [sys.executable, "-m", "agentmath.cli", "eval", "--dataset", str(data), "--model",
             "m", "--base-url", f"http://127.0.0.1:{port}", "--out", str(out), "--json",
             "--samples", "2", "--concurrency", "4", "--http-retries", "2", "--ray",
             cluster.address, "--ray-workers", "1", "--set", "sandbox.preload=[]",
             "--set", "sandbox.spare_workers=0"],
            when=lambda: len(records(out)) >= 4, kill=server.kill, start=server.start,
            down_s=DOWN_S, timeout_s=180, log_dir=tmp_path)
        # Workers' logs stay in Ray's session directory (log_to_driver is off).
        logs = Path(cluster.head_node.get_logs_dir_path())
        resumed = [line for path in logs.rglob("worker-*") if path.is_file()
                   for line in path.read_text(errors="replace").splitlines()
                   if "answers again after" in line]
    assert got.returncode == 0, got.stderr[-3000:]
    rows = records(out)
    assert len(rows) == 20 and [r for r in rows if r["finish_reason"] == "error"] == []
    assert json.loads(got.stdout)["n_errors"] == 0
    assert len(resumed) == 1, resumed
    print(f"\nray: 0 errors of {len(rows)}; {resumed[0]}")
