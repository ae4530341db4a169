"""`agentmath solve` with a local tiny model: readable output and a JSON trajectory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentmath.agent.trajectory import Trajectory
from tests.fixtures.models import held_out_problems

pytestmark = pytest.mark.integration


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentmath.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_solve_json_is_a_trajectory(tiny_model_dir):
    problem = held_out_problems(1)[0].problem
    proc = run_cli("solve", problem, "--backend", "hf", "--model", str(tiny_model_dir),
                   "--format", "code_interpreter", "--max-model-tokens", "200", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    traj = Trajectory.from_dict(json.loads(proc.stdout))
    assert traj.meta["format"] == "code_interpreter" and traj.problem == problem
    assert traj.tool_calls and all(call.result.ok for call in traj.tool_calls)
    assert traj.finish_reason in ("answered", "eos", "token_budget", "tool_budget")


def test_solve_shows_the_trajectory_readably(tiny_model_dir):
    proc = run_cli("solve", held_out_problems(1)[0].problem, "--backend", "hf", "--model",
                   str(tiny_model_dir), "--format", "markdown", "--max-model-tokens", "200")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "model tokens:" in proc.stdout and "finish:" in proc.stdout
    assert "```python" in proc.stdout  # the model's call is shown


def test_solve_usage_errors_are_clear(tmp_path):
    proc = run_cli("solve", "1+1", "--backend", "nope", "--model", str(tmp_path))
    assert proc.returncode == 2 and "unknown backend" in proc.stderr
    proc = run_cli("solve", "1+1", "--format", "nope", "--model", str(tmp_path))
    assert proc.returncode == 2 and "nope" in proc.stderr
    proc = run_cli("solve", "1+1", "--backend", "openai", "--model", "m")
    assert proc.returncode == 2 and "base-url" in proc.stderr


def test_the_demo_model_says_what_it_knows_when_it_finds_no_answer(tiny_model_dir, tmp_path,
                                                                    monkeypatch):
    """With no --model, solve runs the demo's model; when that tiny model ends without an
    answer (here: a 5-token budget), the output says what the model knows, so that its
    rambling on another kind of problem is not taken for a bug. Not with an explicit --model."""
    import shutil

    from typer.testing import CliRunner

    from agentmath.cli.main import app

    shutil.copytree(tiny_model_dir, tmp_path / ".cache" / "agentmath" / "demo-tool-model")
    monkeypatch.setenv("HOME", str(tmp_path))
    args = ["solve", "What is the speed of light?", "--max-model-tokens", "5"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output[-2000:]
    flat = " ".join(result.stdout.split())
    assert "finish: token_budget" in flat
    assert "knows only the demo's story problems" in flat and "pass --model" in flat
    result = CliRunner().invoke(app, [*args, "--model", str(tiny_model_dir)])
    assert result.exit_code == 0 and "knows only" not in result.stdout


def test_eval_and_solve_use_the_prompt_a_model_was_trained_with(tiny_model_dir, tmp_path):
    """A model directory stored with its training prompt (agentmath.models.prompts) is run
    under it by eval and solve when no --system-prompt is given; a given one wins."""
    import shutil

    from typer.testing import CliRunner

    from agentmath.cli.main import app
    from agentmath.models.prompts import FILE, TrainedPrompts

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    TrainedPrompts({"code_interpreter": "PROMPT-OF-TRAINING"}).write(model)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"problem": held_out_problems(1)[0].problem, "answer": "1"})
                    + "\n")
    base = ["eval", "--dataset", str(data), "--backend", "hf", "--model", str(model),
            "--max-model-tokens", "8", "--max-tool-calls", "0", "--json"]
    result = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output[-2000:]
    assert f"{FILE}" in " ".join(result.stderr.split())
    used = json.loads((tmp_path / "run" / "config.json").read_text())
    assert used["loop"]["system_prompt"] == "PROMPT-OF-TRAINING"
    result = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "run2"),
                                      "--system-prompt", "MINE"])
    assert result.exit_code == 0, result.output[-2000:]
    used = json.loads((tmp_path / "run2" / "config.json").read_text())
    assert used["loop"]["system_prompt"] == "MINE"
    result = CliRunner().invoke(app, ["solve", "1+1", "--model", str(model),
                                      "--max-model-tokens", "4", "--json"])
    assert result.exit_code == 0, result.output[-2000:]
    assert json.loads(result.stdout)["messages"][0]["content"] == "PROMPT-OF-TRAINING"
