"""The real rollout benchmark (``benchmarks/_rollout_real.py``) runs end to end on two real
vLLM-CPU servers with its smallest workload: every row delivers every group it was asked for,
with no episode error, and its measurements are well-formed (figures are not asserted)."""

from __future__ import annotations

import argparse
import math

import pytest

from agentmath.sim.servers import default_bin
from benchmarks._rollout_real import ROWS, VLLM_VENV, add_real_arguments, run_real

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]


def test_every_row_finishes_every_group(vllm_server_pair) -> None:  # noqa: ANN001
    router_bin = default_bin("vllm-router", VLLM_VENV)
    rows = [r for r in ROWS if "vllm-router" not in r or router_bin.exists()]
    parser = argparse.ArgumentParser()
    add_real_arguments(parser)
    args = ["--real-group-size", "2", "--real-batch", "2", "--real-iterations", "1",
            "--real-groups", "16", "--real-scale", "0.25", "--real-segment-tokens", "128",
            "--real-warmup", "0", "--poll-s", "0.1",
            "--calibration-batches", "1", "--real-rows", *rows]
    for url in vllm_server_pair.urls:
        args += ["--server-url", url]
    result = run_real(parser.parse_args(args))

    assert [r["name"] for r in result["rows"]] == rows
    for row in result["rows"]:
        name = row["name"]
        assert row["groups"] == row["complete_groups"] == 2, (name, row["iterations"])
        assert row["samples"] == 4 and row["error_count"] == 0, (name, row["errors"])
        assert set(row["finish_reasons"]) <= {"answered", "token_budget"}, name
        assert 0.0 <= row["prefix_hit_rate"] <= 1.0, name
        assert 0.0 <= row["idle_fraction"] <= 1.0 and row["busy_samples"] > 0, name
        assert row["imbalance"] >= 0 and row["generation_tokens"] > 0, name
        assert row["makespan_s"] > 0 and math.isfinite(row["speedup_vs_sync"]), name
    router_row = next(r for r in result["rows"] if r["name"] == "+router")
    assert router_row["router"]["policy"] == "prefix_aware"
    calibration = result["calibration"]
    assert calibration["server"]["block_size"] > 0
    assert [m["n_decode"] for m in calibration["measurements"]][:2] == [1, 1]
    assert calibration["fitted"]["a"] >= 0 and calibration["workload"]["group_size"] == 2


def test_partial_rows_with_running_turns_cut(vllm_server_pair) -> None:  # noqa: ANN001
    """``--interrupt-turns``: the partial rows cut the turns running at each iteration's end
    on the real servers (the stream closed, the ids kept) and still deliver every group."""
    parser = argparse.ArgumentParser()
    add_real_arguments(parser)
    args = ["--real-group-size", "2", "--real-batch", "2", "--real-iterations", "2",
            "--real-groups", "16", "--real-scale", "0.25", "--real-segment-tokens", "512",
            "--real-warmup", "1", "--poll-s", "0.1", "--calibration-batches", "1",
            "--real-rows", "+partial", "+router"]
    for url in vllm_server_pair.urls:
        args += ["--server-url", url]
    ns = parser.parse_args(args)
    ns.interrupt_turns = True  # benchmarks/rollout.py's option (its simulation group's)
    result = run_real(ns)

    assert result["calibration"]["engine"]["interrupt_turns"] is True
    cut = 0
    for row in result["rows"]:
        assert row["groups"] == row["complete_groups"] == 4, (row["name"], row["iterations"])
        assert row["error_count"] == 0, (row["name"], row["errors"])
        cut += sum(it["interrupted"] for it in row["iterations"])
    assert cut > 0
