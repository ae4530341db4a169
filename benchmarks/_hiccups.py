"""Is a latency tail ours or the machine's? A bystander process that only sleeps, watched
during a measurement.

``Hiccups`` starts a child Python process that does nothing but sleep 0.5 ms at a time and
note every wake-up later than ``gap_ms`` (default 2 ms), as (start, length) on the monotonic
clock that ``time.perf_counter`` reads in every process. It takes no part in the measurement:
it runs at real-time priority (SCHED_FIFO, where allowed: as root here), so no process of ours
can keep it from a CPU once its sleep is over; when it, too, is late by milliseconds, the VM or
the kernel held the CPUs (host preemption, steal, interrupts), not the client's event loop, the
service or its workers. The host's steal time (``/proc/stat``) over the window is read beside
it. Where real-time priority is refused the bystander runs at normal priority and says so: its
gaps then include waits for a CPU our own processes hold.

``explain(slow, gaps)`` then says, for the slow requests of a paced run (each as the interval
from when it was due to when it completed), how many overlapped a gap of the bystander: a slow
request with no bystander gap in its window was slowed by something of ours.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

__all__ = ["Hiccups", "explain"]

_BYSTANDER = r"""
import json, os, sys, time, select
gap = float(sys.argv[1]) / 1000.0
try:  # real-time priority: no process of ours can keep it from a CPU once it is due
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    priority = "SCHED_FIFO"
except (OSError, AttributeError):
    priority = "normal"
gaps = []
last = time.perf_counter()
while True:
    ready, _, _ = select.select([sys.stdin], [], [], 0.0005)
    now = time.perf_counter()
    if now - last > gap + 0.0005:
        gaps.append((last, now - last))
    last = now
    if ready:
        break
print(json.dumps({"priority": priority, "gaps": gaps}))
"""


def _steal_s() -> float:
    """The host's steal time so far, all CPUs (seconds; 0 where /proc/stat has no column)."""
    with open("/proc/stat") as fh:
        fields = fh.readline().split()
    ticks = int(fields[8]) if len(fields) > 8 else 0
    return ticks / os.sysconf("SC_CLK_TCK")


class Hiccups:
    """Context manager: the bystander runs while the block runs; afterwards ``gaps`` holds its
    late wake-ups as (start, seconds) and ``steal_s`` the steal time of the window."""

    def __init__(self, gap_ms: float = 2.0) -> None:
        self.gap_ms = gap_ms
        self.gaps: list[tuple[float, float]] = []
        self.steal_s = 0.0
        self._proc: subprocess.Popen[str] | None = None
        self._steal0 = 0.0
        self.priority = ""

    def __enter__(self) -> Hiccups:
        self._steal0 = _steal_s()
        self._proc = subprocess.Popen([sys.executable, "-c", _BYSTANDER, str(self.gap_ms)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        time.sleep(0.05)  # let it start before the measurement does
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._proc is not None
        out, _ = self._proc.communicate("x\n", timeout=30)
        data = json.loads(out or '{"priority": "none", "gaps": []}')
        self.priority = data["priority"]
        self.gaps = [(float(s), float(d)) for s, d in data["gaps"]]
        self.steal_s = _steal_s() - self._steal0

    def summary(self) -> dict[str, Any]:
        """Count, longest and total of the bystander's late wake-ups (ms), and the steal."""
        lengths = [d * 1000 for _, d in self.gaps]
        return {"gaps": len(lengths), "longest_ms": max(lengths, default=0.0),
                "total_ms": sum(lengths), "steal_s": self.steal_s,
                "bystander_priority": self.priority}


def explain(slow: list[tuple[float, float]], gaps: list[tuple[float, float]]) -> int:
    """How many of the ``slow`` requests, each (due, done) in perf_counter seconds, overlap a
    bystander gap (start, seconds): the machine's share of the tail."""
    return sum(1 for due, done in slow
               if any(start < done and start + length > due for start, length in gaps))
