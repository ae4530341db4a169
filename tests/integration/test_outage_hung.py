"""A model server that hangs during ``run_eval`` (tests/fixtures/hung_server.py: it takes the
completions and never answers them, while ``/health`` still answers) and then answers again:
with the outage gate (``max_outage_s``) no sample is an error and the wait is logged once;
with it off (0), the samples in flight fail after one ``http_timeout_s`` each, and their error
records name the server and the timeout."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from agentmath.backends import build_backend
from agentmath.eval.config import EvalConfig
from agentmath.eval.runner import backend_settings, run_eval
from tests.fixtures.hung_server import HungServer, hung_servers
from tests.integration.test_outage_restart import ROWS, records

pytestmark = pytest.mark.integration
HUNG_S = 3.0
TIMEOUT_S = 1.0


async def hang_for_a_while(server: HungServer, out: Path) -> None:
    """Once a few samples are recorded, hang every completion for HUNG_S."""
    while len(records(out)) < 4:
        await asyncio.sleep(0.02)
    server.hang = "generation"
    await asyncio.sleep(HUNG_S)
    server.hang = "none"


def run_with_a_hang(tmp_path: Path, name: str, max_outage_s: float) -> list[dict[str, Any]]:
    data, out = tmp_path / "data.jsonl", tmp_path / name
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    with hung_servers(1, {r["problem"]: r["answer"] for r in ROWS}) as (server,):
        config = EvalConfig.model_validate({
            "dataset": str(data), "model": "m", "base_url": server.url, "samples": 2,
            "concurrency": 4, "http_retries": 2, "http_timeout_s": TIMEOUT_S,
            "max_outage_s": max_outage_s, "sandbox": {"preload": [], "spare_workers": 0}})

        async def main() -> None:
            backend = build_backend("openai", backend_settings(config))
            try:
                await asyncio.gather(run_eval(config, out, backend),
                                     hang_for_a_while(server, out))
            finally:
                await backend.aclose()

        asyncio.run(main())
        assert server.hung["/v1/completions"] >= 1
    return records(out)


def test_a_hung_server_costs_no_sample_with_the_gate(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentmath.backends.outage")
    rows = run_with_a_hang(tmp_path, "gated", max_outage_s=60)
    assert len(rows) == 20 and [r for r in rows if r["finish_reason"] == "error"] == []
    assert all(r["correct"] for r in rows)
    messages = [r.getMessage() for r in caplog.records if r.name == "agentmath.backends.outage"]
    held = [m for m in messages if "is unreachable" in m and "holding its requests" in m]
    resumed = [m for m in messages if "answers again after" in m]
    assert len(held) == 1 and len(resumed) == 1, messages
    assert "timed out after 1 s" in held[0]
    waited = float(resumed[0].split("answers again after ")[1].split(" s")[0])
    assert HUNG_S - TIMEOUT_S - 1 <= waited <= HUNG_S + 4
    print(f"\nhung, gated: 0 errors of {len(rows)}; {resumed[0]}")


def test_without_the_gate_a_hung_server_fails_samples_saying_why(tmp_path: Path) -> None:
    rows = run_with_a_hang(tmp_path, "ungated", max_outage_s=0)
    errors = [r for r in rows if r["finish_reason"] == "error"]
    assert len(rows) == 20 and errors, "without the gate the hang should cost samples"
    assert all("ServerTimeout" in r["error"] and "http://127.0.0.1:" in r["error"]
               and "timed out after 1 s" in r["error"] for r in errors), errors[0]["error"]
    print(f"\nhung, ungated: {len(errors)} errors of {len(rows)}: {errors[0]['error']}")


def test_rl_waits_out_a_hung_server(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``agentmath rl`` (openai generator, the stand-in in ``tools`` mode, http_timeout_s 1 s):
    once step 1 is logged and an episode's request is in flight, the server process is
    frozen (SIGSTOP: connections still reach its socket, nothing answers, /health neither)
    for FROZEN_S, then thawed. The requests time out, the gate holds them and probes, and
    when the server answers they go on: every episode of every step right, no tool error,
    the wait logged once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pytest.importorskip("torch")
    from tests.fixtures.outage_server import free_port, start_process
    from tests.integration.test_outage_restart import completions_seen, posts

    frozen_s = 15.0  # longer than the retries of a timed-out request once spanned (~12 s)
    tasks = [json.loads(line) for line in
             (tiny_model_dir.parent / "test.jsonl").read_text().splitlines()[:8]]
    answers, data = tmp_path / "answers.json", tmp_path / "train.jsonl"
    answers.write_text(json.dumps({t["problem"]: t["answer"] for t in tasks}))
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    port, out, cfg, log = free_port(), tmp_path / "rl", tmp_path / "rl.toml", tmp_path / "p.log"
    cfg.write_text(
        f'model = "{tiny_model_dir}"\nsteps = 3\ngroup_size = 2\nprompts_per_step = 2\n'
        f'tensorboard = false\n[data]\ndataset = "{data}"\n[loop]\nmax_model_tokens = 256\n'
        f'max_tool_calls = 4\n[sandbox]\npreload = []\nspare_workers = 0\n'
        f'[generator]\nbackend = "openai"\nbase_urls = ["http://127.0.0.1:{port}"]\n'
        f'served_name = "m"\nmax_outage_s = 60\nhttp_timeout_s = 1.0\n')
    server = start_process(port, answers, 0.4, post_log=log, tools=True)
    run = subprocess.Popen([sys.executable, "-m", "agentmath.cli", "rl", "--config", str(cfg),
                            "--out", str(out), "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        metrics, deadline = out / "metrics.jsonl", time.monotonic() + 300
        while not (metrics.exists() and metrics.read_text().strip()):
            assert run.poll() is None and time.monotonic() < deadline, run.stderr
            time.sleep(0.02)
        since = len(posts(log))
        while not completions_seen(posts(log, since)):
            assert run.poll() is None and time.monotonic() < deadline, run.stderr
            time.sleep(0.01)
        os.kill(server.pid, signal.SIGSTOP)
        time.sleep(frozen_s)
        os.kill(server.pid, signal.SIGCONT)
        _, stderr = run.communicate(timeout=300)
    finally:
        run.kill()
        server.kill()
        server.wait()
    assert run.returncode == 0, stderr[-3000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["accuracy"] == 1.0 and r["tool_error_rate"] == 0.0 for r in rows), rows
    held = [line for line in stderr.splitlines() if "is unreachable" in line]
    resumed = [line for line in stderr.splitlines() if "answers again after" in line]
    assert len(held) == 1 and len(resumed) == 1, stderr[-3000:]
    assert "timed out after 1 s" in held[0]
    waited = float(resumed[0].split("answers again after ")[1].split(" s")[0])
    assert frozen_s - 2.5 <= waited <= frozen_s + 6
    print(f"\nrl, hung server: 3 steps, accuracy 1.0 in each; {resumed[0].split('] ')[-1]}")
