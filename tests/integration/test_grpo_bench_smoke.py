"""``benchmarks/grpo.py`` runs end to end with minimal sizes: agentmath's GRPO and TRL's
GRPOTrainer (with its tool loop) each train a step on a freshly grown nano model, both final
models are evaluated in both protocols, and ``--json`` prints one well-formed object (figures
are not asserted)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_grpo_benchmark_json_shape(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "grpo.py"), "--json",
           "--out", str(tmp_path), "--steps", "1", "--group-size", "2", "--prompts", "1",
           "--max-completion", "48", "--max-tool-calls", "1", "--eval-problems", "2",
           "--model-size", "nano", "--sft-steps", "4", "--sft-problems", "16"]
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(ROOT),
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)

    assert [r["system"].split(" (")[0] for r in data["rows"]] == [
        "agentmath rl", "agentmath rl", "TRL GRPOTrainer"]
    for row in data["rows"]:
        assert row["steps"] == 1 and row["group_size"] == 2 and row["prompts_per_step"] == 1
        assert row["wall_s_per_step"] > 0 and math.isfinite(row["samples_per_s"])
        assert len(row["step_s"]) == 1
        assert Path(row["final_dir"], "config.json").exists()
        for protocol in ("text", "native"):
            ev = row["eval"][protocol]
            assert ev["n"] == 2 and 0.0 <= ev["accuracy"] <= 1.0
            assert ev["ci95"][0] <= ev["accuracy"] <= ev["ci95"][1]
    assert data["rows"][-1]["trl_checks"]["schema_identical"] is True
    assert data["trl_tool_mode"] == "environment_factory"
    assert set(data["start"]) == {"text", "native"}
    assert data["rows"][-1]["speedup"] == pytest.approx(1.0)
    assert data["goal"]["speedup"] == pytest.approx(data["rows"][0]["speedup"])
    assert isinstance(data["goal"]["met"], bool) and data["notes"]
