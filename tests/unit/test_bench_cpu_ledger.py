"""benchmarks/_cpu_ledger.py: a server tree's CPU seconds, in all and by process name."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _ledger():
    spec = importlib.util.spec_from_file_location("bench_cpu_ledger",
                                                  BENCHMARKS / "_cpu_ledger.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_server_trees_cpu_is_split_by_process_name() -> None:
    """A 'server' that spins for a moment: its seconds show in servers_s and, under its
    process name, in servers_by_name_s, which adds up to the same total."""
    server = subprocess.Popen([sys.executable, "-c",
                               "import time\nend = time.time() + 0.6\n"
                               "while time.time() < end: pass\ntime.sleep(30)"])
    try:
        ledger = _ledger().CpuLedger([server.pid])
        before = ledger.snapshot()
        time.sleep(1.0)
        spent = ledger.snapshot().since(before)
    finally:
        server.kill()
        server.wait()
    by_name = spent["servers_by_name_s"]
    assert spent["servers_s"] > 0.2
    assert len(by_name) == 1 and next(iter(by_name)).startswith("python")
    assert abs(sum(by_name.values()) - spent["servers_s"]) < 0.01
