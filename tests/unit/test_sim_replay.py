"""The simulator replaying a recorded real run (``benchmarks/_rollout_sim.replay``): the stored
trace is ``OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python benchmarks/rollout.py
--vllm-servers 1 --real-rows sync +async +partial --json`` run on this 2-core machine
2026-11-27 14:34 (the client and the sandbox on core 1, the server's compute threads on core 0
and the rest of it on either core; its calibration with logprobs). The trace before it was of a
server that admitted one request at a time (its front end pinned with the client)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from benchmarks._rollout_sim import replay

TRACE = Path(__file__).parents[1] / "fixtures" / "rundirs" / "rollout_real_1server.json"
#: The same command with the servers niced (``--server-nice 10``, the default since) and the
#: calibration measuring the front end's contention, 2026-11-27 17:04.
CONTENTION_TRACE = TRACE.with_name("rollout_real_1server_contention.json")


def test_the_replay_of_the_stored_run_gives_its_recorded_figures() -> None:
    """Simulated over measured makespan per row, as docs/benchmarks.md records them: every row
    too fast (0.50, 0.67, 0.49 with the servers' front ends taking requests one at a time;
    0.45, 0.64, 0.42 before), none within 25%."""
    real = json.loads(TRACE.read_text())
    check = replay(real)
    assert [r["name"] for r in check["rows"]] == ["sync", "+async", "+partial"]
    assert check["tool_overhead_s"] == real["calibration"]["tool_overhead_s"]["median"]
    assert [r["sim_vs_real"] for r in check["rows"]] == pytest.approx([0.50, 0.67, 0.49],
                                                                      abs=0.02)
    assert check["within_25_percent"] is False


def test_the_replays_front_end_takes_requests_one_at_a_time_at_the_measured_cost() -> None:
    """The calibration's cost of one more request in a burst is each server's front-end cost
    (``admission_s``), a queue: without it every row is faster; the run's request latency is
    no longer added to each request in parallel."""
    real = json.loads(TRACE.read_text())
    check = replay(real)
    assert check["cost_model"]["admission_s"] == real["calibration"]["request_overhead_s"] > 0
    bare = copy.deepcopy(real)
    bare["calibration"]["request_overhead_s"] = 0.0
    without = replay(bare)
    assert without["cost_model"]["admission_s"] == 0.0
    for a, b in zip(check["rows"], without["rows"], strict=True):
        assert a["sim_makespan_s"] > b["sim_makespan_s"]


def test_the_measured_tool_overhead_slows_every_row_and_is_not_what_is_missing() -> None:
    """The host's measured share of each tool call is added to every simulated call: without
    it every row is faster still. In this run it is small (0.03-0.04 s a call in the rows
    without barriers), and the replay is too fast with it or without: what the simulator lacks
    is elsewhere (the 2-core host's contention, docs/benchmarks.md)."""
    real = json.loads(TRACE.read_text())
    bare = copy.deepcopy(real)
    del bare["calibration"]["tool_overhead_s"]
    del bare["calibration"]["tool_overhead_by_row"]
    with_it, without = replay(real)["rows"], replay(bare)["rows"]
    for a, b in zip(with_it, without, strict=True):
        assert a["sim_makespan_s"] > b["sim_makespan_s"]
        assert b["tool_overhead_s"] == 0.0
    assert all(r["sim_vs_real"] < 0.75 for r in with_it + without)


def test_each_row_without_barriers_takes_its_own_measured_share_of_a_call() -> None:
    """A run that measured each row's share of a tool call (``tool_overhead_by_row``, runs
    since 2026-11-26 evening) replays +async and +partial with their own; sync, whose own
    share holds its barrier waits, keeps +async's."""
    real = json.loads(TRACE.read_text())
    shared = real["calibration"]["tool_overhead_s"]["median"]
    rows = copy.deepcopy(real)
    rows["calibration"]["tool_overhead_by_row"] = {
        "+async": {"median": shared}, "+partial": {"median": shared + 0.3}}
    plain, own = replay(real)["rows"], replay(rows)["rows"]
    assert [r["tool_overhead_s"] for r in own] == pytest.approx([shared, shared, shared + 0.3])
    assert own[0]["sim_makespan_s"] == pytest.approx(plain[0]["sim_makespan_s"])
    assert own[2]["sim_makespan_s"] > plain[2]["sim_makespan_s"]


def test_the_replay_of_a_run_with_measured_contention() -> None:
    """A run whose calibration measured how much the front end slows the steps (0.67 then)
    replays with it, slower than without it, and still too fast: 0.67, 0.57, 0.67, as
    docs/benchmarks.md records."""
    real = json.loads(CONTENTION_TRACE.read_text())
    assert real["calibration"]["contention"] > 0
    check = replay(real)
    assert check["cost_model"]["contention"] == real["calibration"]["contention"]
    assert [r["sim_vs_real"] for r in check["rows"]] == pytest.approx([0.67, 0.57, 0.67],
                                                                      abs=0.02)
    bare = copy.deepcopy(real)
    del bare["calibration"]["contention"]  # as in runs before it was measured
    for a, b in zip(check["rows"], replay(bare)["rows"], strict=True):
        assert a["sim_makespan_s"] > b["sim_makespan_s"]
