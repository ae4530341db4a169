"""`agentmath demo`'s table: the models, the headroom and the stage transitions are printed."""

from __future__ import annotations

import pytest


def _row(name: str, acc: float, stages: bool) -> dict:
    row = {"model": name, "accuracy": acc, "accuracy_ci95": [acc, acc], "mean_model_tokens": 120.0,
           "tool_calls_per_sample": 2.5, "failed_tool_calls_per_sample": 0.0, "n": 300}
    if stages:
        row["stage_transitions"] = [{"event": "stage", "step": 1, "old": 0, "new": 1,
                                     "rate": 0.199, "budgets": {"max_tool_calls": 6}}]
    return row


def test_render_prints_headroom_and_stage_transitions(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    from agentmath.cli.demo import _render

    summary = {"models": [_row("text-only", 0.0, False), _row("tool", 0.0, False),
                          _row("tool + grpo", 0.9, True)],
               "headroom": {"greedy_pass@1": 0.0, "k": 8, "pass@8": 0.77, "temperature": 1.0,
                            "problems": 100},
               "conversion": {"kept": 442, "dropped": {}, "text": 1058}, "seconds": 600.0,
               "report": {"viewer": "runs/demo/report/viewer.html"},
               "tool_model": "runs/demo/model-tool/final"}
    _render(summary)
    out = capsys.readouterr().out
    assert "90.0%" in out and "greedy pass@1 0.0%, pass@8 77.0%" in out
    assert "tool + grpo: budget stage 0 -> 1 at step 1 (truncation rate 19.9%" in out
    assert "442 verified tool trajectories" in out and "1058 text" in out
