"""benchmarks/_hiccups.py: the bystanders see a CPU the machine held, and a slow request is
tied to a stall only when one lies in it or just before it."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _hiccups():
    spec = importlib.util.spec_from_file_location("bench_hiccups", BENCHMARKS / "_hiccups.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_explain_counts_requests_with_a_stall_in_or_just_before_them() -> None:
    h = _hiccups()
    stalls = [(10.0, 0.002), (20.0, 0.002)]
    slow = [(10.001, 10.010),   # a stall inside it
            (10.030, 10.040),   # 28 ms after a stall ended: within the 50 ms lookback
            (10.100, 10.110),   # 98 ms after: not
            (19.990, 19.999)]   # ends before the next stall starts
    assert h.explain(slow, stalls) == 2
    assert h.explain(slow, stalls, lookback_s=0.0) == 1
    assert h.explain(slow, []) == 0


def test_by_chance_is_what_random_times_give() -> None:
    h = _hiccups()
    stalls = [(float(t), 0.002) for t in range(0, 100, 10)]  # one every 10 s
    slow = [(5.0 + i * 0.5, 5.0 + i * 0.5 + 0.01) for i in range(10)]  # none near a stall
    assert h.explain(slow, stalls) == 0
    chance = h.by_chance(slow, stalls, (0.0, 100.0))
    # a 10 ms interval with a 50 ms lookback meets a stall ~0.6% of the time: ~0.06 of 10
    assert 0 <= chance < 1
    assert h.by_chance(slow, stalls, (0.0, 100.0)) == chance  # seeded


def test_bystanders_report_samples_and_take_no_part() -> None:
    h = _hiccups()
    with h.Hiccups(period_ms=5) as hic:
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:  # busy here: the bystanders still get their CPUs
            pass
    summary = hic.summary()
    assert summary["samples"] >= 20
    assert summary["loop_ms"] > 0
    assert summary["bystander_priority"]
    assert all(length > 0.001 for _, length in hic.stalls)
