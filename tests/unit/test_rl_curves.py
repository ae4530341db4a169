"""Training curves of RL runs in `agentmath report`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentmath.cli.main import app
from agentmath.errors import DataError
from agentmath.report.curves import is_training_run, plot_training_curves
from agentmath.rl.records import read_steps
from tests.fixtures.rundirs.make_rl_run import RUN

#: a step line and a stage event as agentmath rl writes them (the stored run's)
LINES = [json.loads(line) for line in (RUN / "metrics.jsonl").read_text().splitlines()]
STAGE = next(e for e in LINES[0]["events"] if e["event"] == "stage")


def _run(path: Path, steps: int = 4) -> Path:
    path.mkdir(parents=True)
    rows = [{**LINES[1], "step": s, "reward_mean": s / 10, "accuracy": s / 8,
             "entropy": 1.0 - s / 10, "truncation_rate": 0.1,
             "events": [{**STAGE, "step": s}] if s == 3 else []}
            for s in range(1, steps + 1)]
    del rows[0]["tool_call_rate"]  # a line written before the field existed: not drawn as 0
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_curves_png_for_runs(tmp_path: Path) -> None:
    a, b = _run(tmp_path / "grpo"), _run(tmp_path / "grpo-unmasked", 3)
    assert is_training_run(a) and not is_training_run(tmp_path)
    runs = {"a": read_steps(a), "b": read_steps(b)}
    assert [r.step for r in runs["a"]] == [1, 2, 3, 4] and runs["a"][2].events[0].new == 1
    assert "tool_call_rate" not in runs["a"][0].scalars()
    assert "tool_call_rate" in runs["a"][1].scalars()
    png = plot_training_curves(runs, tmp_path)
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000


def test_bad_metrics_line_names_file_and_line(tmp_path: Path) -> None:
    run = _run(tmp_path / "r")
    with (run / "metrics.jsonl").open("a") as f:
        f.write("{not json\n")
    with pytest.raises(DataError, match=r"metrics\.jsonl:5"):
        read_steps(run)


def test_report_command_draws_training_curves(tmp_path: Path) -> None:
    run = _run(tmp_path / "grpo")
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "rep"),
                                      "--json"])
    assert result.exit_code == 0, result.output
    files = json.loads(result.output)["files"]
    assert files["plots"] == [str(tmp_path / "rep" / "training_curves.png")]


def test_every_panel_is_a_step_metric() -> None:
    """A panel whose key StepMetrics does not write would stay empty without a word."""
    import dataclasses

    from agentmath.report.curves import PANELS
    from agentmath.rl.metrics import StepMetrics

    names = {f.name for f in dataclasses.fields(StepMetrics)}
    assert {key for key, _ in PANELS} <= names and ("tool_call_rate", "samples with a tool "
                                                    "call") in PANELS
