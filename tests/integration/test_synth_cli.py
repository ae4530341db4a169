"""``agentmath synth`` as a user runs it: against a teacher server over HTTP, killed with
SIGKILL mid-run and resumed (nothing lost, nothing duplicated), with malformed input rows
(a clear error naming file, line and field), and with --json all the way down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.teacher import CASES, TeacherServer, teacher_server, write_cases

pytestmark = pytest.mark.integration
__all__ = ["teacher_server"]
AGENTMATH = [sys.executable, "-m", "agentmath.cli"]


def _synth(inp: Path, out: Path, url: str, *extra: str) -> list[str]:
    return [*AGENTMATH, "synth", str(inp), "--out", str(out), "--teacher-model", "teacher",
            "--teacher-url", url, "--set", "sandbox.spare_workers=1", *extra]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_json_funnel_and_records(tmp_path: Path, teacher_server: TeacherServer) -> None:
    inp = tmp_path / "cot.jsonl"
    write_cases(inp)
    out = tmp_path / "run"
    proc = subprocess.run(_synth(inp, out, teacher_server.url, "--json"), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    kept = [c.id for c in CASES if c.stage is None]
    assert report["total"] == len(CASES) and report["kept"] == len(kept)
    assert report["ran"] == len(CASES) and report["resumed"] == 0
    left = {r["stage"]: r["reasons"] for r in report["stages"] if r["left"]}
    for case in CASES:
        if case.stage is not None:
            assert left[case.stage][case.reason] >= 1
    examples = [e for r in report["stages"] for e in r["examples"]]
    assert {e["id"] for e in examples} == {c.id for c in CASES if c.stage is not None}
    assert [r["id"] for r in _lines(out / "sft.jsonl")] == kept
    assert json.loads((out / "funnel.json").read_text()) == {
        k: v for k, v in report.items() if k not in ("records", "resumed", "ran")}
    again = subprocess.run(_synth(inp, out, teacher_server.url, "--json"),
                           capture_output=True, text=True, timeout=240)
    assert json.loads(again.stdout)["resumed"] == len(CASES)  # nothing ran twice
    assert teacher_server.requests == len(CASES)


def test_resume_after_kill_9(tmp_path: Path) -> None:
    server = TeacherServer(delay=0.15)
    try:
        inp = tmp_path / "cot.jsonl"
        ids = write_cases(inp, copies=6)
        out = tmp_path / "run"
        cmd = _synth(inp, out, server.url, "--concurrency", "4", "--json")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        log = out / "outcomes.jsonl"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and len(log.read_text().splitlines()) >= 10:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its sandbox, mid-run
        proc.wait(timeout=30)
        before = {line.split('"id": ')[1].split(",")[0] for line in log.read_text().splitlines()
                  if line.endswith("}")}
        assert 10 <= len(before) < len(ids)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        outcomes = _lines(log)
        assert sorted(o["id"] for o in outcomes) == sorted(ids)  # each exactly once
        assert report["total"] == len(ids) and report["resumed"] + report["ran"] == len(ids)
        kept = [i for i in ids if i.rsplit("-", 1)[0] in {c.id for c in CASES
                                                          if c.stage is None}]
        assert [r["id"] for r in _lines(out / "sft.jsonl")] == kept  # input order
    finally:
        server.close()


def test_malformed_rows_name_file_line_and_field(tmp_path: Path,
                                                 teacher_server: TeacherServer) -> None:
    inp = tmp_path / "bad.jsonl"
    inp.write_text('{"id": "a", "problem": "1+1?", "answer": "2", "solution": "2"}\n'
                   '{"id": "b", "problem": "", "answer": "3", "solution": "3"}\n')
    proc = subprocess.run(_synth(inp, tmp_path / "run", teacher_server.url),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{inp}: line 2: field 'problem'" in proc.stderr
    inp.write_text('{"id": "a", "problem": "1+1?", "answer": "2"\n')
    proc = subprocess.run(_synth(inp, tmp_path / "run2", teacher_server.url),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{inp}: line 1" in proc.stderr and "JSON" in proc.stderr


def test_a_resumed_run_must_keep_its_settings(tmp_path: Path,
                                              teacher_server: TeacherServer) -> None:
    inp = tmp_path / "cot.jsonl"
    write_cases(inp, CASES[:2])
    out = tmp_path / "run"
    first = subprocess.run(_synth(inp, out, teacher_server.url, "--json"),
                           capture_output=True, text=True, timeout=240)
    assert first.returncode == 0, first.stderr
    kept = _lines(out / "sft.jsonl")
    other = subprocess.run(_synth(inp, out, teacher_server.url, "--format", "markdown"),
                           capture_output=True, text=True, timeout=120)
    assert other.returncode == 2 and "format" in other.stderr and "Traceback" not in other.stderr
    assert _lines(out / "sft.jsonl") == kept  # nothing already done is lost
