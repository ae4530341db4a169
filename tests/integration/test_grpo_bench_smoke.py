"""``benchmarks/grpo.py --quick`` runs end to end with minimal sizes: a nano model grown on the
text/tool mixture in the native protocol, its headroom, the headline runs (agentmath's GRPO
without dynamic sampling and TRL's GRPOTrainer with its tool loop) and the extra row (agentmath
with dynamic sampling), each over two learning rates for two steps with a model saved after
each, every saved model evaluated both ways (agentmath's chatml_tools loop, the chat loop with
TRL's parser), the prompts and samples each run consumed (from its own records), the goal
summary on the headline rows with the extra row beside it, and the plot; ``--json`` prints one
well-formed object with every key, and the printed report has the new columns and the labelled
extra row (accuracies are not asserted)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVAL_KEYS = {"accuracy", "ci95", "n", "tool_calls_per_sample", "tool_error_rate",
             "model_tokens_mean"}
RUN_KEYS = {"arm", "trainer", "label", "headline", "dynamic_sampling", "lr", "name", "mode",
            "steps", "step_s", "consumed", "wall_s_per_step", "samples_per_s", "setup_s",
            "cpu_s", "load_before", "load_after", "reward_mean", "tool_calls_mean",
            "truncation_rate", "final_dir", "points", "final"}
EXTRA_LABEL = "agentmath + dynamic sampling (extra: more prompts and samples per step)"


def _check_eval(ev: dict, n: int) -> None:
    assert EVAL_KEYS <= set(ev)
    assert ev["n"] == n and 0.0 <= ev["accuracy"] <= 1.0
    assert ev["ci95"][0] <= ev["accuracy"] <= ev["ci95"][1]


def _check_consumed(run: dict, c: dict) -> None:
    """The prompts and samples a run consumed: a record per step, totals their sums; the
    headline rows take exactly prompts x G a step on both sides, the extra row at least that
    many prompts' worth and at most max_sampling_rounds times as many, G samples a prompt."""
    con = run["consumed"]
    steps = con["per_step"]
    assert [s["step"] for s in steps] == [1, 2]
    assert con["prompts"] == sum(s["prompts"] for s in steps)
    assert con["samples"] == sum(s["samples"] for s in steps)
    assert con["prompts_per_step"]["min"] == min(s["prompts"] for s in steps)
    assert con["samples_per_step"]["max"] == max(s["samples"] for s in steps)
    assert con["samples_per_step"]["mean"] == pytest.approx(con["samples"] / 2)
    for s in steps:
        assert s["samples"] == s["prompts"] * c["group_size"]
        if run["headline"]:
            assert s["prompts"] == c["prompts"]
        else:
            assert c["prompts"] <= s["prompts"] <= c["prompts"] * c["max_sampling_rounds"]
    assert run["samples_per_s"] == pytest.approx(con["samples"] / sum(run["step_s"]))


def test_grpo_benchmark_quick_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "grpo.py"), "--quick", "--json",
           "--out", str(tmp_path)]
    # one torch thread, as the docs run it (--threads 1): two threads on a shared 2-vCPU runner
    # make the nano model's steps several times slower, not faster
    # and this checkout's package first, whatever the environment's install points at
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(ROOT),
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)

    assert {"config", "model", "start", "headroom", "runs", "goal", "versions",
            "torch_threads", "trl_tool_mode", "trl_checks", "run_dir", "eval_s", "plot",
            "wall_s", "notes"} <= set(data)
    c = data["config"]
    assert (c["steps"], c["group_size"], c["prompts"], c["lrs"]) == (2, 2, 1, [1e-4, 3e-4])
    assert c["dynamic_sampling_row"] is True and c["max_sampling_rounds"] == 3
    # one protocol for both trainers: native records; agentmath samples them as chatml_tools
    # under the system message the template writes for the records' prompt and tools
    assert data["model"]["text_share"] == 0.7 and data["model"]["formats"] == ["native"]
    assert "<tools>" in c["system_prompt"] and '"name": "python"' in c["system_prompt"]
    conversion = data["model"]["conversion"]
    assert sum(f["text"] for f in conversion.values()) > 0  # the mixture has text records

    # the start: greedy in both protocols and the headroom (pass@k at the RL temperature)
    k = c["headroom_k"]
    for protocol in ("text", "native"):
        _check_eval(data["start"]["greedy"][protocol], 2)
        _check_eval(data["start"]["sampled"][protocol], 2 * k)
        h = data["headroom"][protocol]
        assert {"greedy_pass@1", f"pass@{k}", "sampled_pass@1", "problems"} <= set(h)
        assert h["greedy_pass@1"] <= 1.0 and h["sampled_pass@1"] <= h[f"pass@{k}"] + 1e-9

    # the sweep: each lr for each arm, alternating, a point after each step; the headline
    # (agentmath without dynamic sampling, TRL) and the labelled extra row
    assert [(r["arm"], r["lr"]) for r in data["runs"]] == [
        ("agentmath", 1e-4), ("trl", 1e-4), ("agentmath+ds", 1e-4),
        ("agentmath", 3e-4), ("trl", 3e-4), ("agentmath+ds", 3e-4)]
    for run in data["runs"]:
        assert RUN_KEYS <= set(run)
        assert run["headline"] is (run["arm"] != "agentmath+ds")
        assert run["dynamic_sampling"] is (run["arm"] == "agentmath+ds")
        assert run["trainer"] == ("trl" if run["arm"] == "trl" else "agentmath")
        assert run["label"] == {"agentmath": "agentmath", "trl": "TRL",
                                "agentmath+ds": EXTRA_LABEL}[run["arm"]]
        _check_consumed(run, c)
        assert run["steps"] == 2 and len(run["step_s"]) == 2
        assert run["wall_s_per_step"] > 0 and math.isfinite(run["samples_per_s"])
        assert [p["step"] for p in run["points"]] == [1, 2]
        walls = [p["wall_s"] for p in run["points"]]
        assert 0 < walls[0] < walls[1]
        for point in run["points"]:
            assert {"step", "dir", "wall_s", "step_s_sum", "eval"} <= set(point)
            assert Path(point["dir"], "config.json").exists()
            for protocol in ("text", "native"):
                _check_eval(point["eval"][protocol], 2)
        assert run["final"] == run["points"][-1]["eval"]
    assert data["runs"][0]["mode"] == "async"
    assert data["trl_tool_mode"] == "environment_factory"
    assert data["trl_checks"]["schema_identical"] is True
    assert data["trl_checks"]["text_answer_ends_episode"] is True

    g = data["goal"]
    assert {"protocol", "headline", "trl_best", "agentmath", "agentmath_best_final",
            "fastest_ratio", "met", "met_by_one_run", "extra"} <= set(g)
    assert g["headline"] == ["agentmath", "trl"]
    assert g["protocol"] == {"agentmath": "text", "trl": "native"}
    assert set(g["trl_best"]["final_accuracy_by_lr"]) == {"0.0001", "0.0003"}
    assert [r["lr"] for r in g["agentmath"]] == [1e-4, 3e-4]
    for r in g["agentmath"]:
        assert {"final_accuracy", "final_wall_s", "reaches_at_step", "reaches_at_s",
                "ratio"} <= set(r)
    assert isinstance(g["met"], bool) and isinstance(g["met_by_one_run"], bool)
    # the verdict reads the headline agentmath rows only; the extra row is beside it
    headline = {r["lr"]: r for r in data["runs"] if r["arm"] == "agentmath"}
    for r in g["agentmath"]:
        final = headline[r["lr"]]["final"][g["protocol"]["agentmath"]]["accuracy"]
        assert r["final_accuracy"] == final
    assert g["agentmath_best_final"] == max(r["final_accuracy"] for r in g["agentmath"])
    assert g["extra"]["label"] == EXTRA_LABEL
    assert [r["lr"] for r in g["extra"]["runs"]] == [1e-4, 3e-4]
    extra = {r["lr"]: r for r in data["runs"] if r["arm"] == "agentmath+ds"}
    for r in g["extra"]["runs"]:
        assert r["final_accuracy"] == extra[r["lr"]]["final"][g["protocol"]["agentmath"]][
            "accuracy"]
    assert Path(data["plot"]).stat().st_size > 0 and data["notes"]
    assert Path(data["run_dir"], "result.json").exists()
    written = [json.loads(line) for line in
               Path(data["run_dir"], "runs.jsonl").read_text().splitlines()]
    assert [(r["arm"], r["lr"], r["consumed"]) for r in written] == [
        (r["arm"], r["lr"], r["consumed"]) for r in data["runs"]]

    # the printed report: the labelled extra row and the consumption columns
    from _grpo_report import print_report

    capsys.readouterr()
    print_report(data)
    text = capsys.readouterr().out
    assert EXTRA_LABEL in text and "headline" in text and "extra" in text
    for column in ("prompts/step", "samples/step"):
        assert column in text
    for run in data["runs"]:
        assert run["name"] in text
    assert any("not in the verdict" in n for n in data["notes"])
