"""Where the CPU went during a stretch of a benchmark: each core's busy seconds and the CPU
seconds of this process, of its other children (sandbox workers) and of given process trees
(model servers), from psutil's counters read before and after.

Why: on a 2-core VM the real rollout benchmark pins the servers' compute threads to one core
and everything else (the client, the sandbox, the servers' front ends and schedulers) to the
other; whether that second core is saturated decides whether the host's share of a tool call is
latency (which partial rollout can hide) or a queue of work (which it cannot).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import psutil

__all__ = ["CpuLedger", "CpuSnapshot"]


def _busy(times: object) -> float:
    """Busy seconds of one core: everything but idle and iowait."""
    fields = times._asdict()  # type: ignore[attr-defined]
    return sum(v for k, v in fields.items() if k not in ("idle", "iowait"))


def _cpu(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
    return t.user + t.system


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?"


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@dataclass(frozen=True)
class CpuSnapshot:
    """Counters at one moment (seconds since each process or the machine started)."""

    cores: tuple[float, ...]
    client: float
    others: dict[int, float]  # this process's other descendants, by pid
    servers: dict[int, float]  # the given trees' processes, by pid
    names: dict[int, str] = field(default_factory=dict)  # server pid -> name

    def since(self, before: CpuSnapshot) -> dict[str, object]:
        """What was spent between ``before`` and this snapshot (processes that started in
        between count from zero; those that ended in between are missed)."""
        def spent(now: dict[int, float], then: dict[int, float]) -> float:
            return sum(v - then.get(pid, 0.0) for pid, v in now.items())
        return {"core_busy_s": [round(a - b, 3) for a, b in
                                zip(self.cores, before.cores, strict=True)],
                "client_s": round(self.client - before.client, 3),
                "sandbox_s": round(spent(self.others, before.others), 3),
                "servers_s": round(spent(self.servers, before.servers), 3),
                # by process name: a vLLM server's front end (its API server, named after
                # the interpreter) apart from its engine ("VLLM::EngineCore")
                "servers_by_name_s": self._by_name(before)}

    def _by_name(self, before: CpuSnapshot) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, now in self.servers.items():
            name = self.names.get(pid, "?")
            out[name] = out.get(name, 0.0) + now - before.servers.get(pid, 0.0)
        return {k: round(v, 3) for k, v in sorted(out.items())}


class CpuLedger:
    """Snapshots of the machine's cores, this process, its other descendants, and the
    process trees of ``server_pids``."""

    def __init__(self, server_pids: Sequence[int] = ()) -> None:
        self.server_pids = list(server_pids)

    def snapshot(self) -> CpuSnapshot:
        me = psutil.Process()
        procs = [p for pid in self.server_pids for p in _tree(pid)]
        servers = {p.pid: _cpu(p) for p in procs}
        others = {p.pid: _cpu(p) for p in me.children(recursive=True)
                  if p.pid not in servers}
        return CpuSnapshot(tuple(_busy(t) for t in psutil.cpu_times(percpu=True)), _cpu(me),
                           others, servers, {p.pid: _name(p) for p in procs})
