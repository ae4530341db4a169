"""`agentmath eval` end to end: a real dataset slice, a real vLLM server, a tiny model;
metrics computed; resumption after kill -9 ends with every (problem, sample) exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def eval_cmd(server: str, out: Path, *extra: str, dataset: tuple[str, ...] = (
        "--dataset", "gsm8k")) -> list[str]:
    return [sys.executable, "-m", "agentmath.cli", "eval", *dataset, "--limit",
            "6", "--samples", "3", "--backend", "openai", "--base-url", server, "--model",
            "tiny", "--format", "code_interpreter", "--concurrency", "4", "--temperature",
            "1.0", "--max-model-tokens", "96", "--system-prompt",
            "You are a helpful math assistant.", "--out", str(out), "--json", *extra]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_eval_runs_and_computes_metrics(vllm_server, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(eval_cmd(vllm_server, out), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])
    records = lines(out / "samples.jsonl")
    assert len(records) == 18
    assert Counter((r["problem_id"], r["sample_index"]) for r in records).most_common(1)[0][1] == 1
    assert metrics["n_samples"] == 18 and metrics["n_problems"] == 6 and metrics["k"] == 3
    assert 0.0 <= metrics["avg"]["value"] <= 1.0 and "3" in metrics["pass"]
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["n_samples"] == 18
    config = json.loads((out / "config.json").read_text())
    assert config["dataset"] == "gsm8k" and config["versions"]["agentmath"]
    first = records[0]
    assert first["trajectory"]["segments"][0]["source"] == "prompt"
    assert {"model_tokens", "tool_calls", "finish_reason", "extracted", "correct"} <= set(first)

    # A resumed run with a different sampling config is refused, naming the field.
    again = subprocess.run(eval_cmd(vllm_server, out, "--temperature", "0.2"),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "temperature" in again.stderr


def arithmetic_dataset(path: Path) -> tuple[str, ...]:
    """A custom JSONL with its own field names, in the style the tiny model was trained on."""
    rows = [{"qid": f"q{i}", "question": f"What is {100 + i} * {7 + i}?",
             "target": str((100 + i) * (7 + i))} for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ("--dataset", str(path), "--problem-field", "question", "--answer-field", "target",
            "--id-field", "qid")


def test_eval_resumes_after_kill_9_exactly_once(vllm_server, tmp_path):
    out = tmp_path / "run"
    samples = out / "samples.jsonl"
    data = arithmetic_dataset(tmp_path / "arith.jsonl")
    proc = subprocess.Popen(eval_cmd(vllm_server, out, dataset=data),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if samples.exists() and len(samples.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the eval and its sandbox zygote, mid-run
    proc.wait()
    partial = len(lines(samples))
    assert 3 <= partial < 18, partial
    done = subprocess.run(eval_cmd(vllm_server, out, dataset=data),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = lines(samples)
    keys = Counter((r["problem_id"], r["sample_index"]) for r in records)
    assert len(keys) == 18 and set(keys.values()) == {1}
    assert sum(r["tool_calls"] for r in records) > 0  # the tiny model really called tools
    metrics = json.loads(done.stdout.strip().splitlines()[-1])
    assert metrics["n_samples"] == 18
