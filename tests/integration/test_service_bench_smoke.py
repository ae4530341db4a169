"""The service benchmarks still run: ``sandbox_soak.py --quick --json`` and the service section
of ``sandbox.py`` (``--service --quick --json-out FILE``), in subprocesses; figures are not
asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "250"}
    env.update({k: os.environ[k] for k in ("HOME",) if k in os.environ})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          cwd=str(ROOT), env=env)


def test_soak_quick_json() -> None:
    proc = _run(str(ROOT / "benchmarks" / "sandbox_soak.py"), "--quick", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    out = json.loads(proc.stdout)
    assert out["cells_run"] == out["cells"] == 5000 and out["sessions_run"] == 50
    assert out["exactly_once"] and out["leaked_pids"] == [] and out["ok"]
    assert out["outcomes"]["benign"].get("ok", 0) > 4000
    assert 0 < out["benign_p50_ms"] <= out["benign_p99_ms"]
    assert out["rss_start_mib"] > 0 and out["rss_end_mib"] > 0


def test_sandbox_service_section_quick(tmp_path: Path) -> None:
    """One run: the table on stdout, and what ``--json`` prints written by ``--json-out``
    (the same object, so the section is measured once, not once per output format)."""
    figures = tmp_path / "service.json"
    proc = _run(str(ROOT / "benchmarks" / "sandbox.py"), "--service", "--quick",
                "--json-out", str(figures))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for text in ("in process: round trip, trivial", "HTTP (httpx client): throughput",
                 "one CPU, in process on uvloop: round trip",
                 "HTTP (raw client): paced at 1,500 /s", "met"):
        assert text in proc.stdout, text
    out = json.loads(figures.read_text())
    assert {"agentmath RemoteSandbox", "httpx", "raw"} <= set(out["http"])
    assert all(out["http"][kind]["best"] > 0 for kind in out["http"])
    assert all(len(row) == 5 for row in out["service_rows"])
    one_cpu = [row for row in out["service_rows"] if row[0].startswith("one CPU")]
    assert [row[0].split(":")[0] for row in one_cpu] == [
        "one CPU, in process on uvloop", "one CPU, in process on uvloop",
        "one CPU, floor on uvloop"]
    assert all("(one CPU)" in row[2] for row in one_cpu)
