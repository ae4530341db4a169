"""Is a latency tail ours or the machine's? A bystander on each CPU, doing a fixed small piece
of work on a fixed period, watched during a measurement.

``Hiccups`` starts one child Python process per CPU (pinned to it) that wakes every
``period_ms`` (default 20 ms), runs a fixed loop (~0.2 ms here) and notes when it was due,
when it woke and when the loop ended, on the monotonic clock that ``time.perf_counter`` reads
in every process. It runs at real-time priority (SCHED_FIFO, where allowed: as root here), so
no process of ours can keep it from its CPU once it is due: when the window from due to done
is longer than the loop's median by more than ``stall_ms`` (default 1 ms), the VM or the
kernel held that CPU (host preemption, interrupts, a slower core), not the client's event
loop, the service or its workers. It costs ~1% of each CPU.

An earlier bystander only slept 0.5 ms at a time and flagged wake-ups more than 2.5 ms late;
it saw nothing in runs whose tail was 50-100 ms (2026-11-27), because this VM's host takes a
vCPU for ~2.2 ms at a time, in bursts (two of these bystanders caught 5-17 such stalls in
each 100-300 ms stretch of slow cells, on both CPUs): each one alone too short for its
threshold, and invisible to the steal counter (0.00 s), but a 0.2 ms loop that takes 2.4 ms
shows it. The host's steal time (``/proc/stat``) over the window
is still read beside it. Where real-time priority is refused the bystanders run at normal
priority and say so: their stalls then include waits for a CPU our own processes hold.

``explain(slow, stalls, lookback_s)`` says, for the slow requests of a paced run (each as the
interval from when it was due to when it completed), how many had a stall in it or within
``lookback_s`` before it (a backlog built while the host held the CPUs is served after it);
``by_chance`` is how many the same intervals, moved to random times of the run, would have:
the association the first number shows is real only where it is well above the second.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

__all__ = ["Hiccups", "by_chance", "explain"]

_BYSTANDER = r"""
import json, os, sys, time, select
cpu, period, loops = int(sys.argv[1]), float(sys.argv[2]) / 1000.0, int(sys.argv[3])
try:
    os.sched_setaffinity(0, {cpu})
except OSError:
    pass
try:  # real-time priority: no process of ours can keep it from its CPU once it is due
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    priority = "SCHED_FIFO"
except (OSError, AttributeError):
    priority = "normal"
samples = []
due = time.perf_counter() + period
while True:
    ready, _, _ = select.select([sys.stdin], [], [], max(0.0, due - time.perf_counter()))
    if ready:
        break
    woke = time.perf_counter()
    for _ in range(loops):
        pass
    done = time.perf_counter()
    samples.append((due, woke, done))
    due = done + period
print(json.dumps({"priority": priority, "samples": samples}))
"""


def _steal_s() -> float:
    """The host's steal time so far, all CPUs (seconds; 0 where /proc/stat has no column)."""
    with open("/proc/stat") as fh:
        fields = fh.readline().split()
    ticks = int(fields[8]) if len(fields) > 8 else 0
    return ticks / os.sysconf("SC_CLK_TCK")


class Hiccups:
    """Context manager: the bystanders run while the block runs; afterwards ``stalls`` holds
    the windows in which the machine held a CPU, as (start, seconds), and ``steal_s`` the
    steal time of the window."""

    def __init__(self, period_ms: float = 20.0, stall_ms: float = 1.0,
                 loops: int = 4000) -> None:
        self.period_ms, self.stall_ms, self.loops = period_ms, stall_ms, loops
        self.stalls: list[tuple[float, float]] = []
        self.steal_s = 0.0
        self.priority = ""
        self.samples = 0
        self.loop_ms = 0.0
        self._procs: list[subprocess.Popen[str]] = []
        self._steal0 = 0.0

    def __enter__(self) -> Hiccups:
        self._steal0 = _steal_s()
        cpus = sorted(os.sched_getaffinity(0))
        self._procs = [subprocess.Popen(
            [sys.executable, "-c", _BYSTANDER, str(cpu), str(self.period_ms), str(self.loops)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for cpu in cpus]
        time.sleep(0.15)  # let them start (an interpreter each) before the measurement does
        return self

    def __exit__(self, *exc: Any) -> None:
        outs = [proc.communicate("x\n", timeout=30)[0] for proc in self._procs]
        data = [json.loads(out or '{"priority": "none", "samples": []}') for out in outs]
        self.priority = ",".join(sorted({d["priority"] for d in data}))
        self.stalls, loop_s = [], []
        for d in data:
            samples = [(float(a), float(b), float(c)) for a, b, c in d["samples"]]
            if not samples:
                continue
            loop = statistics.median(done - woke for _, woke, done in samples)
            loop_s.append(loop)
            self.samples += len(samples)
            self.stalls += [(due, done - due) for due, _, done in samples
                            if done - due - loop > self.stall_ms / 1000]
        self.stalls.sort()
        self.loop_ms = 1000 * statistics.median(loop_s) if loop_s else 0.0
        self.steal_s = _steal_s() - self._steal0

    def summary(self) -> dict[str, Any]:
        """Count, longest and total of the stalls seen (ms), the samples taken, the steal."""
        lengths = [d * 1000 for _, d in self.stalls]
        return {"stalls": len(lengths), "longest_stall_ms": max(lengths, default=0.0),
                "stalled_ms": sum(lengths), "samples": self.samples,
                "loop_ms": self.loop_ms, "steal_s": self.steal_s,
                "bystander_priority": self.priority}


def explain(slow: list[tuple[float, float]], stalls: list[tuple[float, float]],
            lookback_s: float = 0.05) -> int:
    """How many of the ``slow`` requests, each (due, done) in perf_counter seconds, had a
    stall (start, seconds) between ``lookback_s`` before they were due and their end."""
    return sum(1 for due, done in slow
               if any(start < done and start + length > due - lookback_s
                      for start, length in stalls))


def by_chance(slow: list[tuple[float, float]], stalls: list[tuple[float, float]],
              span: tuple[float, float], lookback_s: float = 0.05, seed: int = 0) -> float:
    """What :func:`explain` gives, on average, for the same intervals moved to random times
    within ``span`` (the run): the count a tail unrelated to the stalls would show."""
    rng = random.Random(seed)
    start, end = span
    total, tries = 0, 20
    for _ in range(tries):
        moved = []
        for due, done in slow:
            at = rng.uniform(start, max(start, end - (done - due)))
            moved.append((at, at + done - due))
        total += explain(moved, stalls, lookback_s)
    return total / tries
