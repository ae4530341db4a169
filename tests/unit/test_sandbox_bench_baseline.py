"""benchmarks/sandbox.py's ``python -c`` baseline times exactly the processes it counts."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _bench():
    sys.path.insert(0, str(BENCHMARKS))  # the script's sibling modules (_common, _floor, ...)
    try:
        spec = importlib.util.spec_from_file_location("sandbox_bench", BENCHMARKS / "sandbox.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


@pytest.mark.parametrize("n", [1, 2, 5])
def test_parallel_baseline_starts_exactly_n_processes(n: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    started = []
    real_popen = subprocess.Popen

    def counting_popen(*args, **kwargs):
        started.append(args[0])
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(bench.subprocess, "Popen", counting_popen)
    latencies, throughput = bench.baseline("pass", n)
    # subprocess.run starts its own Popen for each of the n sequential latencies, then the
    # parallel part starts n more: none beyond the n it counts
    assert len(latencies) == n
    assert len(started) == 2 * n
    assert throughput > 0
