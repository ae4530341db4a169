"""Tests of ``agentmath.report``: run loading, comparison tables, plots, the HTML viewer, CLI."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from agentmath.agent.trajectory import Segment, Trajectory
from agentmath.cli.main import app
from agentmath.errors import DataError
from agentmath.report import (
    comparison_rows,
    load_run,
    make_plots,
    render_csv,
    render_markdown,
    render_rich_table,
    write_viewer,
)
from agentmath.report.viewer import cap_text, render_viewer_html
from agentmath.sandbox.result import ExecResult

EVIL = "</script><b>x</b>"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _trajectory(problem: str, kind: str, answer: str) -> Trajectory:
    """A realistic episode: prompt, model code, tool result (ok/error/timeout), final answer."""
    code = {"ok": "x = 2**10\nprint(x + 1)  # the answer", "error": "print(1/0)",
            "timeout": "while True:\n    pass"}[kind]
    result = {"ok": ExecResult(stdout="1025\n", duration_ms=3.5),
              "error": ExecResult(error="ZeroDivisionError: division by zero (line 1)",
                                  error_type="ZeroDivisionError", error_line=1, duration_ms=1.0),
              "timeout": ExecResult(timed_out=True, state_lost=True, duration_ms=10000.0)}[kind]
    thinking = f"Let me compute. {EVIL} & <i>html</i>\n```python\n{code}\n```\n"
    return Trajectory(
        problem=problem,
        segments=[
            Segment("prompt", f"System: use python.\nUser: {problem}\n", [1, 2, 3, 4]),
            Segment("model", thinking, list(range(20)), finish_reason="stop"),
            Segment("tool", "```output\n...\n```\n", [5, 6, 7], code=code, result=result),
            Segment("model", f"So the answer is \\boxed{{{answer}}}.", list(range(8)),
                    finish_reason="eos"),
        ],
        finish_reason="answered", answer=answer, duration_ms=1234.5)


PROBLEMS = [("test/algebra/1.json", "What is 2+1?", "3", 1, "Algebra"),
            ("test/number_theory/7.json", "Compute 2^10 + 1.", "1025", 3, "Number Theory"),
            ("test/geometry/2.json", "Find the area of a unit square.", "1", 5, "Geometry")]
KINDS = ["ok", "error", "timeout"]


def _sample(pid: str, text: str, gold: str, level: int, subject: str, index: int,
            correct: bool, kind: str) -> dict[str, Any]:
    answer = gold if correct else "42"
    traj = _trajectory(text, kind, answer)
    return {"problem_id": pid, "sample_index": index, "gold": gold, "extracted": answer,
            "correct": correct, "model_tokens": traj.model_tokens,
            "tool_tokens": traj.tool_tokens, "prompt_tokens": traj.prompt_length,
            "total_tokens": traj.total_tokens, "tool_calls": len(traj.tool_calls),
            "tool_errors": traj.num_tool_errors, "tool_timeouts": int(kind == "timeout"),
            "output_truncations": 0, "finish_reason": traj.finish_reason,
            "duration_ms": traj.duration_ms, "problem": text,
            "problem_meta": {"level": level, "subject": subject},
            "trajectory": traj.to_dict()}


def _stat(value: float) -> dict[str, Any]:
    return {"value": value, "stderr": 0.05, "ci95": [max(0.0, value - 0.1), min(1.0, value + 0.1)]}


def write_run(root: Path, name: str, avg: float, *, by_level: bool = True) -> Path:
    """A run directory with config.json, metrics.json and 3 problems x 2 samples."""
    run = root / name
    run.mkdir(parents=True)
    config = {"name": name, "model": f"org/{name}-model", "backend": "openai",
              "format": "markdown", "dataset": "math500", "samples": 2,
              "sampling": {"temperature": 0.7}, "seed": 0, "versions": {"agentmath": "0.1.0"}}
    lines = []
    for p, (pid, text, gold, level, subject) in enumerate(PROBLEMS):
        for i in range(2):
            lines.append(_sample(pid, text, gold, level, subject, i, (p + i) % 2 == 0,
                                 KINDS[(p + i) % 3]))
    metrics: dict[str, Any] = {
        "n_problems": 3, "n_samples": 6, "k": 2, "avg": _stat(avg), "maj": _stat(avg + 0.05),
        "pass": {"1": avg, "2": min(1.0, avg + 0.2)},
        "tokens": {"model_mean": 28.0 + 100 * avg, "model_median": 28.0, "total_mean": 35.0,
                   "total_median": 35.0, "tool_mean": 3.0},
        "tools": {"calls_per_sample": 1.0, "error_rate": 1 / 3, "timeout_rate": 1 / 3,
                  "truncation_rate": 0.0},
        "finish_reasons": {"answered": 6}, "duration_ms_mean": 1234.5}
    if by_level:
        metrics["by_level"] = {str(lv): {"n_problems": 1, "avg": _stat(avg / lv),
                                         "maj": _stat(avg / lv)} for lv in (1, 3, 5)}
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (run / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    (run / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in lines),
                                       encoding="utf-8")
    return run


@pytest.fixture
def run_dirs(tmp_path: Path) -> list[Path]:
    # the second run has no by_level: its per-level accuracy comes from the samples
    return [write_run(tmp_path, "base", 0.5), write_run(tmp_path, "tir|v2", 0.75,
                                                        by_level=False)]


def test_load_run_and_rows(run_dirs: list[Path]) -> None:
    runs = [load_run(p) for p in run_dirs]
    assert [r.name for r in runs] == ["base", "tir|v2"]
    assert len(runs[0].samples()) == 6 and runs[0].samples()[0].problem_id.startswith("test/")
    rows = comparison_rows(runs)
    assert rows[1]["avg"] == 0.75 and rows[1]["pass@2"] == pytest.approx(0.95)
    assert rows[0]["model"] == "org/base-model" and rows[0]["k"] == 2
    assert rows[0]["avg_ci95_lo"] == pytest.approx(0.4) and list(rows[0]) == list(rows[1])


def test_markdown_parses_back(run_dirs: list[Path]) -> None:
    text = render_markdown(comparison_rows([load_run(p) for p in run_dirs]))
    lines = text.strip().splitlines()
    assert len(lines) == 4 and set(lines[1].replace("|", "")) == {"-"}
    split = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    header = split[0]
    assert "avg %" in header and "pass@2 %" in header
    table = [dict(zip(header, row, strict=True)) for row in split[2:]]
    assert table[0]["run"] == "base" and table[1]["run"] == "tir\\|v2"
    assert table[0]["avg %"] == "50.0" and table[1]["maj %"] == "80.0"
    assert table[1]["tool_calls_per_sample"] == "1.00"


def test_csv_parses_back(run_dirs: list[Path]) -> None:
    runs = [load_run(p) for p in run_dirs]
    parsed = list(csv.DictReader(io.StringIO(render_csv(comparison_rows(runs)))))
    assert [row["run"] for row in parsed] == ["base", "tir|v2"]
    assert float(parsed[1]["avg"]) == 0.75 and float(parsed[0]["maj"]) == pytest.approx(0.55)
    assert float(parsed[0]["tool_error_rate"]) == pytest.approx(1 / 3)


def test_rich_table(run_dirs: list[Path]) -> None:
    console = Console(record=True, width=400)
    console.print(render_rich_table(comparison_rows([load_run(p) for p in run_dirs])))
    text = console.export_text()
    assert "tir|v2" in text and "75.0" in text and "avg %" in text


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 5000, (path, len(data))


def test_plots(run_dirs: list[Path], tmp_path: Path) -> None:
    paths = make_plots([load_run(p) for p in run_dirs], tmp_path / "out")
    assert [p.name for p in paths] == ["accuracy_vs_tokens.png", "accuracy_by_level.png",
                                       "tool_calls_hist.png"]
    for path in paths:
        _assert_png(path)


def test_plots_without_levels(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "nolevels", 0.5, by_level=False)
    records = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for record in records:
        record["problem_meta"] = {}
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    paths = make_plots([load_run(run_dir)], tmp_path / "out")
    assert [p.name for p in paths] == ["accuracy_vs_tokens.png", "tool_calls_hist.png"]


def _embedded(html_text: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="viewer-data">(.*?)</script>',
                      html_text, re.S)
    assert match is not None
    return json.loads(match.group(1))


def test_viewer_is_self_contained_and_escaped(run_dirs: list[Path], tmp_path: Path) -> None:
    path = write_viewer([load_run(p) for p in run_dirs], tmp_path / "out")
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"https?:|//cdn|\bsrc\s*=|<link\b|@import", text)
    assert text.count("</script>") == 2 and "<b>x</b>" not in text and "<i>html" not in text
    data = _embedded(text)
    assert [r["name"] for r in data["runs"]] == ["base", "tir|v2"]
    problem = data["runs"][0]["problems"][1]
    assert problem["problem"] == "Compute 2^10 + 1." and problem["gold"] == "1025"
    segments = [s for p in data["runs"][0]["problems"] for smp in p["samples"]
                for s in smp["segments"]]
    assert any(EVIL in (s["text"] or "") for s in segments)
    results = [s["result"] for s in segments if s["source"] == "tool"]
    assert any(r["timed_out"] for r in results) and any(r["error"] for r in results)
    assert "token_ids" not in json.dumps(data)


def test_viewer_caps_long_text(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "long", 0.5)
    records = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    records[0]["trajectory"]["segments"][1]["text"] = "y" * 100_000
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    data = _embedded(render_viewer_html([load_run(run_dir)], max_chars=1000))
    seg = data["runs"][0]["problems"][0]["samples"][0]["segments"][1]
    assert seg["text_cut"] == 100_000 and len(seg["text"]) < 1100 and "omitted" in seg["text"]
    assert cap_text("abc", 10) == ("abc", 0)


@pytest.mark.parametrize("broken, fragment", [
    ("missing_metrics", "metrics.json: missing"),
    ("bad_config", "config.json: not valid JSON"),
    ("no_avg", "metrics.json: missing key 'avg.value'"),
    ("list_metrics", "metrics.json: expected a JSON object"),
])
def test_malformed_run_names_the_file(tmp_path: Path, broken: str, fragment: str) -> None:
    run_dir = write_run(tmp_path, "bad", 0.5)
    if broken == "missing_metrics":
        (run_dir / "metrics.json").unlink()
    elif broken == "bad_config":
        (run_dir / "config.json").write_text("{not json")
    elif broken == "no_avg":
        metrics = json.loads((run_dir / "metrics.json").read_text())
        del metrics["avg"]["value"]
        (run_dir / "metrics.json").write_text(json.dumps(metrics))
    else:
        (run_dir / "metrics.json").write_text("[]")
    with pytest.raises(DataError, match=re.escape(fragment)) as info:
        load_run(run_dir)
    assert str(run_dir) in str(info.value)


def test_malformed_samples_name_file_and_line(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "bad", 0.5)
    with (run_dir / "samples.jsonl").open("a") as handle:
        handle.write("\n{broken\n")
    run = load_run(run_dir)
    with pytest.raises(DataError, match=r"samples\.jsonl:8: invalid JSON"):
        run.samples()
    with pytest.raises(DataError, match="not a run directory"):
        load_run(tmp_path / "nope")


def test_cli_report(run_dirs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "report"
    runner = CliRunner()
    result = runner.invoke(app, ["report", *map(str, run_dirs), "--out", str(out),
                                 "--style", "markdown"])
    assert result.exit_code == 0, result.output
    assert "| base |" in result.stdout and f"wrote {out / 'viewer.html'}" in result.stdout
    for name in ("comparison.md", "comparison.csv", "accuracy_vs_tokens.png",
                 "accuracy_by_level.png", "tool_calls_hist.png", "viewer.html"):
        assert (out / name).is_file(), name
    result = runner.invoke(app, ["report", *map(str, run_dirs), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["rows"][1]["run"] == "tir|v2" and payload["files"]["viewer"].endswith(".html")


def test_cli_report_errors(run_dirs: list[Path], tmp_path: Path) -> None:
    (run_dirs[1] / "config.json").unlink()
    result = CliRunner().invoke(app, ["report", *map(str, run_dirs), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "config.json" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["report", str(run_dirs[0]), "--style", "html"])
    assert result.exit_code == 2


def test_report_imports_are_light() -> None:
    code = ("import sys, agentmath.cli.report, agentmath.report; "
            "print(sorted(m for m in ('matplotlib', 'agentmath.sandbox') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
