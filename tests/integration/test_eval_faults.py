"""`agentmath eval` against a fault-injecting OpenAI-compatible server on 127.0.0.1.

Malformed replies and outages become failed samples (exit 3, finished samples kept), a
``--retry-errors`` run completes them exactly once, a second run on the directory is refused
naming the holder, and a changed or empty dataset is refused with a clear message.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmath.cli.main import app
from agentmath.runs.lock import RunLock
from tests.fixtures.fault_server import (  # noqa: F401
    Fault,
    FaultServer,
    fault_server_fixture,
    with_path,
)

pytestmark = pytest.mark.integration
ROWS = [{"id": f"p{i}", "problem": f"What is {i} plus {i}?", "answer": str(2 * i)}
        for i in range(1, 5)]
COMPLETIONS, TOKENIZE = "/v1/completions", "/tokenize"


def dataset(path: Path, server: FaultServer, rows: list[dict[str, Any]] = ROWS) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    server.answers.update({r["problem"]: r["answer"] for r in rows})
    return path


def run_eval_cli(server: FaultServer, data: Path, out: Path, *extra: str) -> Any:
    args = ["eval", "--dataset", str(data), "--model", "m", "--base-url", server.url,
            "--out", str(out), "--samples", "2", "--json", "--http-retries", "0",
            "--set", "sandbox.preload=[]", "--set", "sandbox.spare_workers=0", *extra]
    return CliRunner().invoke(app, args)


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def metrics_of(result: Any, code: int = 0) -> dict[str, Any]:
    """The --json metrics of a run that exited ``code`` (3: it recorded errored samples)."""
    assert result.exit_code == code, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def rewrite(path: str, value: Any) -> Fault:
    """A fault that sets a dotted ``path`` of the good reply to ``value``."""
    return Fault(mutate=with_path(path, value))


# One per sample that hits it (with --http-retries 0), and the field its error must name.
FAULTS = [
    (COMPLETIONS, rewrite("choices.0.token_ids", [None, None]), "choices[0].token_ids[0]"),
    (COMPLETIONS, rewrite("usage", "lots"), "usage"),
    (COMPLETIONS, rewrite("choices.0.logprobs", {"token_logprobs": "x"}), "token_logprobs"),
    (COMPLETIONS, rewrite("choices.0.text", None), "choices[0].text"),
    (TOKENIZE, rewrite("tokens", [1, None]), "tokens[1]"),
]


def test_malformed_replies_fail_samples_then_retry_errors_completes_them(
        fault_server: FaultServer, tmp_path: Path) -> None:
    data, out = dataset(tmp_path / "data.jsonl", fault_server), tmp_path / "run"
    # the startup check's POST /tokenize (the chat renders) takes the first /tokenize fault
    fault_server.fail(TOKENIZE, Fault())
    for path, fault, _ in FAULTS:
        fault_server.fail(path, fault)
    first = metrics_of(run_eval_cli(fault_server, data, out), 3)
    assert first["n_samples"] == 8 and first["n_errors"] == len(FAULTS)
    failed = [r for r in records(out) if r["finish_reason"] == "error"]
    assert len(failed) == len(FAULTS)
    for record in failed:
        assert record["error"].startswith("BackendError: ") and "malformed reply" in record["error"]
        assert fault_server.url in record["error"]
    for _, _, field in FAULTS:
        assert sum(field in r["error"] for r in failed) >= 1, field
    finished = [r for r in records(out) if r["finish_reason"] != "error"]
    assert len(finished) == 3 and all(r["correct"] for r in finished)

    served = fault_server.requests[COMPLETIONS]
    again = metrics_of(run_eval_cli(fault_server, data, out), 3)  # errors count as done
    assert again["n_errors"] == len(FAULTS) and fault_server.requests[COMPLETIONS] == served

    final = metrics_of(run_eval_cli(fault_server, data, out, "--retry-errors"))
    keys = Counter((r["problem_id"], r["sample_index"]) for r in records(out))
    assert len(keys) == 8 and set(keys.values()) == {1}
    assert final["n_errors"] == 0 and final["avg"]["value"] == 1.0 and final["n_samples"] == 8
    assert fault_server.requests[COMPLETIONS] == served + len(FAULTS)  # only the errors re-ran


def test_outage_errors_then_recovery(fault_server: FaultServer, tmp_path: Path) -> None:
    data, out = dataset(tmp_path / "data.jsonl", fault_server, ROWS[:2]), tmp_path / "run"
    fault_server.outage = Fault(status=503, headers={"Retry-After": "0"})
    # --max-outage 0: fail at once, as without the outage gate (tests/unit/test_outage.py
    # and tests/integration/test_outage_restart.py show the wait).
    first = metrics_of(run_eval_cli(fault_server, data, out, "--max-outage", "0"), 3)
    assert first["n_errors"] == 4
    assert all("HTTP 503" in r["error"] for r in records(out))
    fault_server.outage = None  # the server is back, but flaky: each fault is retried
    fault_server.fail(COMPLETIONS, Fault(status=429, headers={"Retry-After": "0"}))
    fault_server.fail(COMPLETIONS, Fault(raw=b"<html>502 Bad Gateway</html>"))
    fault_server.fail(TOKENIZE, Fault(drop=True))
    final = metrics_of(run_eval_cli(fault_server, data, out, "--retry-errors",
                                    "--http-retries", "3"))
    assert final["n_errors"] == 0 and final["n_samples"] == 4 and len(records(out)) == 4
    assert all(r["correct"] for r in records(out))


def test_a_second_run_is_refused_naming_the_holder(fault_server: FaultServer,
                                                   tmp_path: Path) -> None:
    data, out = dataset(tmp_path / "data.jsonl", fault_server), tmp_path / "run"
    out.mkdir()
    with RunLock(out):  # this process is "the first run"
        proc = subprocess.run(
            [sys.executable, "-m", "agentmath.cli", "eval", "--dataset", str(data), "--model",
             "m", "--base-url", fault_server.url, "--out", str(out), "--json"],
            capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    message = " ".join(proc.stderr.split())
    assert "in use by another run" in message and f"pid {os.getpid()}" in message
    assert not (out / "samples.jsonl").exists() and proc.stdout == ""
    assert fault_server.requests[COMPLETIONS] == 0


def test_a_changed_gold_answer_is_refused(fault_server: FaultServer, tmp_path: Path) -> None:
    data, out = dataset(tmp_path / "data.jsonl", fault_server), tmp_path / "run"
    assert metrics_of(run_eval_cli(fault_server, data, out))["avg"]["value"] == 1.0
    before = (out / "samples.jsonl").read_text()
    edited = [dict(r, answer="99") if r["id"] == "p3" else r for r in ROWS]
    data.write_text("".join(json.dumps(r) + "\n" for r in edited))
    result = run_eval_cli(fault_server, data, out)
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and "dataset changed" in message and "'p3'" in message
    assert (out / "samples.jsonl").read_text() == before


def test_an_empty_dataset_is_refused_naming_the_file(fault_server: FaultServer,
                                                     tmp_path: Path) -> None:
    data, out = tmp_path / "empty.jsonl", tmp_path / "run"
    data.write_text("\n")
    result = run_eval_cli(fault_server, data, out)
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and f"{data}: the dataset is empty" in message
    assert not (out / "samples.jsonl").exists()


def test_same_command_twice_then_kill_9_and_resume_exactly_once(
        fault_server: FaultServer, tmp_path: Path) -> None:
    """The issue's scenario: the same command started twice while the first runs (refused,
    naming it), then the first killed with SIGKILL mid-run and resumed: every (problem,
    sample) exactly once, metrics over all of them."""
    rows = [{"id": f"q{i}", "problem": f"What is {i} plus {i}?", "answer": str(2 * i)}
            for i in range(12)]
    data, out = dataset(tmp_path / "data.jsonl", fault_server, rows), tmp_path / "run"
    answer, served, release = fault_server.reply, Counter[str](), threading.Event()

    def model(prompt: str) -> str:  # answers 6 completions, then hangs until released
        with fault_server.lock:
            served["n"] += 1
            hang = served["n"] > 6
        if hang:
            release.wait(timeout=120)
        return answer(prompt)

    fault_server.reply = model
    command = [sys.executable, "-m", "agentmath.cli", "eval", "--dataset", str(data),
               "--model", "m", "--base-url", fault_server.url, "--out", str(out), "--json",
               "--samples", "4", "--concurrency", "2", "--set", "sandbox.preload=[]"]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        samples = out / "samples.jsonl"
        deadline = time.monotonic() + 120
        while not (samples.exists() and samples.stat().st_size) and first.poll() is None:
            assert time.monotonic() < deadline, "the first run recorded nothing"
            time.sleep(0.02)
        second = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert f"pid {first.pid} " in " ".join(second.stderr.split())
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.wait(timeout=30)
        release.set()
    assert 1 <= len(records(out)) <= 6
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    keys = Counter((r["problem_id"], r["sample_index"]) for r in records(out))
    assert len(keys) == 48 and set(keys.values()) == {1}
    metrics = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert metrics["n_samples"] == 48 and metrics["avg"]["value"] == 1.0
