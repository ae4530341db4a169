"""The simulated rollout table (``benchmarks/_rollout_sim.py``) on a tiny fleet: the JSON keys
the issue keeps, the step regime, and the options that change the workload and the lockstep
placement (figures are not asserted beyond their sense)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks._rollout_sim import add_sim_arguments, run_sim, workload_of


def _ns(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    return parser.parse_args(["--servers", "2", "--groups", "8", "--batch-groups", "2",
                              "--steps", "1", "--sandbox-workers", "32", *args])


def test_the_table_keeps_its_keys_and_says_its_regime() -> None:
    result = run_sim(_ns("--rows", "+router", "--sync-placement", "pinned"))
    assert [r["name"] for r in result["rows"]] == ["sync", "+router"]
    for row in result["rows"]:
        assert row["makespan_s"] > 0 and row["speedup_vs_sync"] > 0
        assert 0.0 <= row["prefix_hit_rate"] <= 1.0
    assert result["ideal_makespan_s"] > 0 and result["sync_placement"] == "pinned"
    regime = result["regime"]
    assert regime["lockstep_s"] >= regime["longest_episode_s"] > 0
    assert regime["tail_ratio"] == pytest.approx(regime["longest_episode_s"]
                                                 / regime["work_s"])
    assert regime["servers_for_900_s_per_step"] > 0 and result["notes"]


def test_workload_options_change_only_the_shapes_named() -> None:
    workload = workload_of(_ns("--workload", "calls_shape=1", "--workload", "turn_sigma=0.5"))
    assert workload.calls_shape == 1.0 and workload.turn_tokens.sigma == 0.5
    assert workload.n_groups == 8 and workload.max_calls == 96
    with pytest.raises(SystemExit):
        workload_of(_ns("--workload", "seed=3"))


def test_interrupt_turns_cuts_running_turns_in_the_partial_rows_only() -> None:
    plain = run_sim(_ns("--rows", "+router", "--steps", "2"))
    cut = run_sim(_ns("--rows", "+router", "--steps", "2", "--interrupt-turns"))
    assert cut["interrupt_turns"] is True and plain["interrupt_turns"] is False
    rows = {r["name"]: r for r in cut["rows"]}
    assert rows["+router"]["interrupted"] > 0 and rows["sync"]["interrupted"] == 0
    assert all(r["interrupted"] == 0 for r in plain["rows"])
