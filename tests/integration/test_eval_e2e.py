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

from tests.fixtures.models import held_out_problems

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def eval_cmd(server: str, out: Path, *extra: str, dataset: tuple[str, ...] = (
        "--dataset", "gsm8k")) -> list[str]:
    return [sys.executable, "-m", "agentmath.cli", "eval", *dataset, "--limit",
            "6", "--samples", "3", "--backend", "openai", "--base-url", server, "--model",
            "tiny", "--format", "code_interpreter", "--concurrency", "4", "--temperature",
            "1.0", "--max-model-tokens", "200", "--out", str(out), "--json", *extra]


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


def held_out_dataset(path: Path) -> tuple[str, ...]:
    """The test model's held-out problems as a custom JSONL with its own field names."""
    rows = [{"qid": p.id, "question": p.problem, "target": p.answer}
            for p in held_out_problems(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ("--dataset", str(path), "--problem-field", "question", "--answer-field", "target",
            "--id-field", "qid")


def tool_segments(record: dict) -> list[dict]:
    return [s for s in record["trajectory"]["segments"] if s["source"] == "tool"]


@pytest.mark.parametrize("fmt", ["markdown", "openai_tools"])
def test_eval_greedy_runs_real_tool_calls(vllm_server, tmp_path, fmt):
    """Every sample of the test model calls the tool; every call's code ran in the sandbox
    and its output is what the model read next; the tool metrics count exactly that."""
    out = tmp_path / "run"
    data = held_out_dataset(tmp_path / "held_out.jsonl")
    proc = subprocess.run(eval_cmd(vllm_server, out, "--temperature", "0", "--samples", "1",
                                   "--format", fmt, dataset=data),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])
    records = lines(out / "samples.jsonl")
    assert len(records) == 6
    results = []
    for record in records:
        tools = tool_segments(record)
        assert record["tool_calls"] == len(tools) >= 1, record["trajectory"]
        for seg in tools:
            result = seg["result"]
            # what the sandbox printed, or the error the model wrote, is what it read next
            assert (result["error"] or result["stdout"].strip()) in seg["text"], seg
            results.append(result)
    ran = [r for r in results if r["error"] is None]
    assert len(ran) >= len(results) / 2, results  # most of the model's code really runs
    assert metrics["tools"]["calls_per_sample"] == pytest.approx(len(results) / 6)
    assert metrics["tools"]["error_rate"] == pytest.approx(1 - len(ran) / len(results))


def test_eval_resumes_after_kill_9_exactly_once(vllm_server, tmp_path):
    out = tmp_path / "run"
    samples = out / "samples.jsonl"
    data = held_out_dataset(tmp_path / "held_out.jsonl")
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


def _tool_texts(path: Path) -> dict[str, list[str]]:
    return {r["problem_id"]: [s["text"] for s in tool_segments(r)] for r in lines(path)}


def test_eval_with_sandbox_url_matches_local(vllm_server, tmp_path):
    """`eval --sandbox-url`: the model's code runs on a sandbox service (its cell counter
    grows by the number of tool calls) and, greedy, every tool output the model read is the
    one the in-process sandbox gives."""
    from tests.integration.test_sandbox_remote import TOKEN, _session_cells
    from tests.integration.test_sandbox_service import serve

    data = held_out_dataset(tmp_path / "held_out.jsonl")
    greedy = ("--temperature", "0", "--samples", "1", "--format", "markdown")
    local = subprocess.run(eval_cmd(vllm_server, tmp_path / "local", *greedy, dataset=data),
                           capture_output=True, text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    (tmp_path / "svc").mkdir()
    with serve(tmp_path / "svc") as (url, _, _):
        before = _session_cells(url)
        remote = subprocess.run(
            eval_cmd(vllm_server, tmp_path / "remote", *greedy, "--sandbox-url", url,
                     "--sandbox-token-file", str(token_file), dataset=data),
            capture_output=True, text=True, timeout=600)
        assert remote.returncode == 0, remote.stderr[-3000:]
        ran = _session_cells(url) - before
    records = lines(tmp_path / "remote" / "samples.jsonl")
    calls = sum(r["tool_calls"] for r in records)
    assert len(records) == 6 and calls >= 6 and ran == calls
    assert _tool_texts(tmp_path / "remote" / "samples.jsonl") == \
        _tool_texts(tmp_path / "local" / "samples.jsonl")
