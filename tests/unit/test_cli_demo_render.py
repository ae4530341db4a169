"""`agentmath demo`'s summary: a typed record whose JSON form (summary.json, ``--json``) keeps
the keys it always had; the table prints the models, the headroom and the stage transitions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmath.eval.results import RunMetrics
from agentmath.recipes.summary import DemoSummary, Headroom, ModelRow
from tests.fixtures.rundirs.make_eval_run import RUN


def _row(name: str, acc: float, stages: bool, sampled: float = 0.25,
         validation: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model": name, "accuracy": acc, "accuracy_ci95": [acc, acc],
        "sampled_accuracy": sampled, "mean_model_tokens": 120.0,
        "tool_calls_per_sample": 2.5, "failed_tool_calls_per_sample": 0.0, "n": 300}
    if stages:
        row["stage_transitions"] = [{"event": "stage", "step": 1, "old": 0, "new": 1,
                                     "rate": 0.199, "budgets": {
                                         "max_total_tokens": 4096, "max_model_tokens": 320,
                                         "max_tool_calls": 6, "segment_tokens": None}}]
    if validation is not None:
        row["validation_accuracy"] = validation
    return row


def _headroom(pass_at_8: float) -> dict[str, Any]:
    return {"split": "validation", "greedy_pass@1": 0.0, "k": 8, "temperature": 1.0,
            "pass@8": pass_at_8, "sampled_pass@1": 0.2, "sampled_tool_calls_per_sample": 1.5,
            "problems": 100}


SUMMARY: dict[str, Any] = {
    "models": [_row("text-only", 0.0, False, 0.0), _row("tool", 0.0, False, 0.199, 0.01),
               _row("tool + grpo", 0.9, True, 0.871, 0.93)],
    "sampling": {"samples": 8, "temperature": 1.0, "problems": 100, "split": "test"},
    "headroom": _headroom(0.77),
    "conversion": {"kept": 442, "dropped": {}, "seconds": 3.5, "text": 1058},
    "config": {"seed": 0, "steps": 800},
    "report": {"rows": [{"run": "run-tool", "avg": 0.0}], "markdown": "r/report.md",
               "csv": "r/report.csv", "plots": ["r/accuracy.png"],
               "viewer": "runs/demo/report/viewer.html"},
    "tool_model": "runs/demo/model-tool/final", "tool_model_is": "tool + grpo",
    "seconds": 600.0,
    "starts": [{"attempt": 1, "sft_seed": 0, "used": True, "headroom": _headroom(0.77)}]}


def test_the_json_form_round_trips_with_its_keys_in_order() -> None:
    summary = DemoSummary.from_dict(json.loads(json.dumps(SUMMARY)))
    again = summary.to_dict()
    assert json.dumps(again) == json.dumps(SUMMARY)  # the same keys, values and order
    assert summary.models[2].stage_transitions[0].budgets.max_tool_calls == 6
    assert summary.models[0].stage_transitions is None  # not a GRPO row: no key


def test_rows_and_headroom_of_a_run_keep_the_old_figures() -> None:
    metrics = RunMetrics.from_dict(json.loads((RUN / "metrics.json").read_text()))
    avg, tools = metrics.avg, metrics.tools
    assert avg is not None
    old = {"model": "tool", "accuracy": avg.value,  # what the recipe wrote before the record
           "accuracy_ci95": list(avg.ci95 or (avg.value, avg.value)),
           "mean_model_tokens": metrics.tokens.model_mean,
           "tool_calls_per_sample": tools.calls_per_sample,
           "failed_tool_calls_per_sample":
               (tools.calls_per_sample or 0.0) * (tools.error_rate or 0.0),
           "n": metrics.n_samples}
    assert ModelRow.of("tool", metrics, None).to_dict() == {
        **old, "sampled_accuracy": None}
    assert ModelRow.of("tool", metrics, metrics).sampled_accuracy == avg.value
    k = metrics.k
    head = Headroom.measure(k, 1.0, metrics, metrics).to_dict()
    assert head == {"split": "validation", "greedy_pass@1": avg.value, "k": k,
                    "temperature": 1.0,
                    f"pass@{k}": metrics.pass_at[str(k)], "sampled_pass@1": avg.value,
                    "sampled_tool_calls_per_sample": tools.calls_per_sample,
                    "problems": metrics.n_problems}


def test_a_saved_summary_reads_back(tmp_path: Path) -> None:
    summary = DemoSummary.from_dict(SUMMARY)
    path = summary.write(tmp_path)
    assert path.name == "summary.json" and DemoSummary.read(tmp_path) == summary
    from agentmath.errors import DataError

    (tmp_path / "summary.json").write_text(json.dumps({"models": []}))
    with pytest.raises(DataError, match="summary.json"):
        DemoSummary.read(tmp_path)


def test_a_summary_written_before_starts_could_be_regrown_reads_back() -> None:
    older = {k: v for k, v in SUMMARY.items() if k != "starts"}
    assert DemoSummary.from_dict(older).starts == []


def test_a_summary_written_before_the_validation_split_reads_back_as_what_it_was() -> None:
    """Before the validation split the headroom was measured on the test problems, and the
    rows had no sampled accuracy: an older file reads back saying so."""
    older = json.loads(json.dumps(SUMMARY))
    del older["sampling"]
    del older["headroom"]["split"]
    for row in older["models"]:
        del row["sampled_accuracy"]
        row.pop("validation_accuracy", None)
    summary = DemoSummary.from_dict(older)
    assert summary.headroom.split == "test" and summary.sampling is None
    assert all(row.sampled_accuracy is None for row in summary.models)


def test_render_lists_the_starts_when_the_first_was_grown_again(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    from agentmath.cli.demo import _render

    regrown = {**SUMMARY, "starts": [
        {"attempt": 1, "sft_seed": 3, "used": False, "headroom": _headroom(0.0)},
        {"attempt": 2, "sft_seed": 12345, "used": True, "headroom": _headroom(0.77)},
        {"attempt": 3, "sft_seed": 678, "used": False, "headroom": _headroom(0.9)}]}
    _render(DemoSummary.from_dict(regrown))
    out = capsys.readouterr().out
    assert "start 1 (SFT seed 3): pass@8 0.0%\n" in out
    assert "start 2 (SFT seed 12345): pass@8 77.0% <- GRPO ran from this one" in out
    assert "start 3 (SFT seed 678): pass@8 90.0%\n" in out


def test_render_prints_headroom_and_stage_transitions(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    from agentmath.cli.demo import _render

    _render(DemoSummary.from_dict(SUMMARY))
    out = capsys.readouterr().out
    assert "90.0%" in out and "greedy pass@1 0.0%, pass@8 77.0%" in out
    assert "(100 validation problems)" in out
    # every row's sampled accuracy beside its greedy one, under how it was sampled
    assert "sampled accuracy (8 at T=1 on 100)" in out
    cells = [[c.strip() for c in line.split("│")[1:-1]]
             for line in out.splitlines() if "│ tool + grpo" in line]
    assert cells[0][:3] == ["tool + grpo", "90.0%", "87.1%"]
    assert "tool + grpo, the default for `agentmath solve`; chosen by greedy accuracy on " \
        "the validation problems: tool 1.0%, tool + grpo 93.0%" in out
    assert "tool + grpo: budget stage 0 -> 1 at step 1 (truncation rate 19.9%" in out
    assert "442 verified tool trajectories" in out and "1058 text" in out
    assert "runs/demo/report/viewer.html" in out
    assert "start 1" not in out  # one start: nothing was grown again


def test_json_prints_the_summary_as_saved(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import agentmath.recipes.demo as recipe
    from agentmath.cli.main import app

    monkeypatch.setattr(recipe, "run_demo",
                        lambda cfg, out, save, stage: DemoSummary.from_dict(SUMMARY))
    result = CliRunner().invoke(app, ["demo", "--json", "--no-save-model",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == SUMMARY


def test_a_model_size_the_demo_does_not_know_is_a_usage_error(tmp_path: Path) -> None:
    """`--model-size` names one of the tiny sizes; anything else stops before any work with
    exit 2 and a message naming the setting and the sizes there are."""
    from agentmath.cli.main import app
    from agentmath.recipes.demo import DemoConfig

    assert DemoConfig().model_size == "nano" and DemoConfig(model_size="micro").steps == 1400
    result = CliRunner().invoke(app, ["demo", "--model-size", "huge", "--out",
                                      str(tmp_path / "demo")])
    assert result.exit_code == 2
    assert "model_size" in result.output and "'micro'" in result.output
    assert not (tmp_path / "demo").exists()


def test_start_attempts_out_of_bounds_is_a_usage_error(tmp_path: Path) -> None:
    from agentmath.cli.main import app

    for bad in ("0", "9"):
        result = CliRunner().invoke(app, ["demo", "--start-attempts", bad, "--out",
                                          str(tmp_path / "demo")])
        assert result.exit_code == 2, result.output
        assert "start" in result.output and not (tmp_path / "demo").exists()


@pytest.mark.parametrize("args, message", [
    (["--set", "copy_steps=200000"], "copy_steps: Input should be less than or equal to 100000"),
    (["--model-size", "huge"], "model_size: Value error, unknown model size 'huge'"),
])
def test_bad_demo_settings_are_one_line_per_field(tmp_path: Path, args: list[str],
                                                  message: str) -> None:
    from agentmath.cli.main import app

    result = CliRunner().invoke(app, ["demo", *args, "--no-save-model", "--out",
                                      str(tmp_path / "demo")])
    assert result.exit_code == 2 and f"invalid demo settings: {message}" in result.output
    assert "errors.pydantic.dev" not in result.output and not (tmp_path / "demo").exists()
