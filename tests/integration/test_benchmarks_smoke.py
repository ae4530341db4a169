"""The benchmark scripts still run (smoke runs with --quick; figures are not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("script,expect", [
    ("sandbox.py", "round trip, trivial"),
    ("agent_loop.py", "loop overhead per turn"),
    ("eval_overhead.py", "harness overhead per sample"),
])
def test_benchmark_runs_and_prints_its_table(script: str, expect: str,
                                             request: pytest.FixtureRequest) -> None:
    extra = []
    if script == "eval_overhead.py":  # the test model (cached), not one the script grows
        extra = ["--model", str(request.getfixturevalue("tiny_model_dir").parent)]
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    env.update({k: os.environ[k] for k in ("HOME", "AGENTMATH_TEST_CACHE") if k in os.environ})
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick", *extra],
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert expect in proc.stdout
