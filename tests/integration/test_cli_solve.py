"""`agentmath solve` with a local tiny model: readable output and a JSON trajectory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentmath.trajectory import Trajectory

pytestmark = pytest.mark.integration


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentmath.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_solve_json_is_a_trajectory(tiny_model_dir):
    proc = run_cli("solve", "What is 123 * 45?", "--backend", "hf", "--model",
                   str(tiny_model_dir), "--format", "code_interpreter", "--system-prompt",
                   "You are a helpful math assistant.", "--max-model-tokens", "120", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    traj = Trajectory.from_dict(json.loads(proc.stdout))
    assert traj.model_tokens > 0 and traj.finish_reason in (
        "answered", "eos", "token_budget", "tool_budget")
    assert traj.meta["format"] == "code_interpreter"


def test_solve_shows_the_trajectory_readably(tiny_model_dir):
    proc = run_cli("solve", "What is 123 * 45?", "--backend", "hf", "--model",
                   str(tiny_model_dir), "--format", "markdown", "--system-prompt",
                   "You are a helpful math assistant.", "--max-model-tokens", "120")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "model tokens:" in proc.stdout and "finish:" in proc.stdout


def test_solve_usage_errors_are_clear(tmp_path):
    proc = run_cli("solve", "1+1", "--backend", "nope", "--model", str(tmp_path))
    assert proc.returncode == 2 and "unknown backend" in proc.stderr
    proc = run_cli("solve", "1+1", "--format", "nope", "--model", str(tmp_path))
    assert proc.returncode == 2 and "nope" in proc.stderr
    proc = run_cli("solve", "1+1", "--backend", "openai", "--model", "m")
    assert proc.returncode == 2 and "base-url" in proc.stderr
