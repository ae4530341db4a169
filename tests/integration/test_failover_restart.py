"""One of two model servers killed with SIGKILL during ``agentmath rl`` and started again on
the same port: not an outage (the other server answers) but a failover, and the restarted
server runs the weights it was started from. The client's reconnect hook
(``Reconnecting.on_reconnect``, wired to the weight sync's restore) must load the current
weights into it before it serves anything again: in the restarted server's log, the reload
and the prefix-cache reset come before its first completion, and no sample is lost.

The servers are the stand-ins of :mod:`tests.fixtures.outage_server` (processes of their own,
the HTTP paths of a vLLM server, vLLM's weight-sync routes accepted)."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import pytest

from tests.fixtures.outage_server import WEIGHT_LOAD, StandIn, free_port
from tests.fixtures.restart import run_through_a_restart
from tests.integration.test_outage_restart import (
    DELAY_S,
    completions_seen,
    posts,
    rl_run_files,
)

pytestmark = pytest.mark.integration
DOWN_S = 3.0  # a quick restart: the client's own retries (4, ~0.5 to 4 s apart) reach it


def test_rl_reloads_the_weights_into_a_server_restarted_in_a_failover(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    ports, out = [free_port(), free_port()], tmp_path / "rl"
    answers, cfg = rl_run_files(tiny_model_dir, tmp_path, ports, steps=4, prompts=4)
    before, after = tmp_path / "b-before.log", tmp_path / "b-after.log"
    metrics = out / "metrics.jsonl"
    mark: list[int] = []

    def b_serving_in_step_2() -> bool:
        if not mark:
            if not (metrics.exists() and metrics.read_text().strip()):
                return False
            mark.append(len(posts(before)))
        return bool(completions_seen(posts(before, mark[0])))

    with StandIn(ports[0], answers, DELAY_S, tools=True), \
            StandIn(ports[1], answers, DELAY_S, post_log=before, tools=True) as b:
        got = run_through_a_restart(
            [sys.executable, "-m", "agentmath.cli", "rl", "--config", str(cfg), "--out",
             str(out), "--json"],
            when=b_serving_in_step_2, kill=b.kill,
            start=partial(b.start, post_log=after, tools=True), down_s=DOWN_S,
            log_dir=tmp_path)
    assert got.returncode == 0, got.stderr[-3000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["accuracy"] == 1.0 and r["tool_error_rate"] == 0.0 for r in rows), \
        [(r["accuracy"], r["tool_error_rate"]) for r in rows]  # no sample lost
    restarted = posts(after)
    first = next(i for i, line in enumerate(restarted) if line.startswith("/v1/completions"))
    assert restarted[:3] == WEIGHT_LOAD, restarted[:6]
    assert first >= 3  # it served again, and only after the weights were loaded
    print(f"\nfailover: B restarted after {DOWN_S:g} s; its first POSTs {restarted[:first + 1]}")
