"""Soak test of the sandbox service over loopback: many cells over many sessions, some hostile.

Run: ``.venv/bin/python benchmarks/sandbox_soak.py`` (``--cells``/``--sessions``, default
1,000,000 over 1,000 as issue 12 asks; ``--quick``: 5,000 over 50; ``--time-limit`` bounds the
run: sessions not started by then are skipped and the table says how many cells ran; ``--json``).
The service runs in a subprocess (uvicorn on ``create_app``, 127.0.0.1, token auth); this process
drives it with ``--concurrency`` sessions at a time over keep-alive HTTP/1.1 connections. A
fraction (``--hostile``) of the cells are hostile: infinite loops (with a 0.2 s limit), memory
bombs, worker crashes (``os._exit`` through an allow-list escape) and output floods. Checked:
every cell answered exactly once (the reply's cell number, in order, per session), no process
of the service's tree alive after it stops, the tree's resident memory at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from typing import Any

from _common import pct, print_table
from _service import SERVICE, RawSession, ServiceProcess, alive, tree_pids, tree_rss_mib

# The allow-list escape of tests/fixtures/sandbox_payloads.py (copied: benchmarks do not import
# the tests package): os._exit through it kills the worker mid-cell (os.kill is seccomp-blocked).
ESC = ("os = [c for c in object.__subclasses__() if c.__name__ == '_wrap_close'][0]"
       ".__init__.__globals__['sys'].modules['os']\n")
HOSTILE: dict[str, tuple[str, float | None]] = {
    "timeout": ("while True: pass", 0.2),
    "memory_bomb": ("x = 'a' * 10**10", None),
    "crash": (ESC + "os._exit(1)", None),
    "output_flood": ("print('x' * 10**7)", None),
}
BENIGN = ("x = {i}", "{i} + 1", "sum(range(100))", "pass")


async def soak(svc: ServiceProcess, cells: int, sessions: int, hostile: float,
               concurrency: int, time_limit: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    per = [cells // sessions + (1 if i < cells % sessions else 0) for i in range(sessions)]
    answered: list[list[int]] = [[] for _ in range(sessions)]
    outcomes: dict[str, dict[str, int]] = {k: {} for k in (*HOSTILE, "benign")}
    benign_ms: list[float] = []
    seen: set[int] = set(tree_pids(svc.pid))
    next_session = 0
    deadline = time.monotonic() + time_limit
    skipped = 0

    def label(result: dict[str, Any]) -> str:
        if result.get("timed_out"):
            return "timeout"
        if result.get("crashed"):
            return "crashed"
        return "ok" if result.get("error") is None else "error"

    async def worker() -> None:
        nonlocal next_session, skipped
        while next_session < sessions:
            idx = next_session
            next_session += 1
            if time.monotonic() > deadline:
                skipped += 1
                continue
            s = await RawSession(svc.url, svc.token).open()
            for i in range(per[idx]):
                if rng.random() < hostile:
                    kind = rng.choice(list(HOSTILE))
                    code, limit = HOSTILE[kind]
                else:
                    kind, limit = "benign", None
                    code = rng.choice(BENIGN).format(i=i)
                t = time.perf_counter()
                reply = await s.run(code, limit)
                if kind == "benign":
                    benign_ms.append((time.perf_counter() - t) * 1000)
                answered[idx].append(reply["cell"])
                tally = outcomes[kind]
                tally[label(reply["result"])] = tally.get(label(reply["result"]), 0) + 1
            await s.close()

    async def sampler() -> None:
        while True:
            seen.update(tree_pids(svc.pid))
            await asyncio.sleep(0.5)

    watch = asyncio.create_task(sampler())
    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t
    watch.cancel()
    seen.update(tree_pids(svc.pid))
    ran = [i for i in range(sessions) if answered[i]]
    exactly_once = all(answered[i] == list(range(per[i])) for i in ran)
    return {"cells_run": sum(len(answered[i]) for i in ran), "sessions_run": len(ran),
            "sessions_skipped": skipped, "exactly_once": exactly_once, "wall_s": wall,
            "benign_ms": benign_ms, "outcomes": outcomes, "seen_pids": sorted(seen)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--hostile", type=float, default=0.01,
                        help="fraction of hostile cells (default 0.01)")
    parser.add_argument("--concurrency", type=int, default=16,
                        help="sessions driven at once (default 16)")
    parser.add_argument("--time-limit", type=float, default=600.0,
                        help="seconds after which no new session starts (default 600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="5,000 cells over 50 sessions")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.quick:
        args.cells, args.sessions = 5_000, 50
    with ServiceProcess(SERVICE) as svc:
        time.sleep(0.5)  # the pool's spare workers
        pids_start = len(tree_pids(svc.pid))
        rss_start = tree_rss_mib(svc.pid)
        r = asyncio.run(soak(svc, args.cells, args.sessions, args.hostile, args.concurrency,
                             args.time_limit, args.seed))
        time.sleep(0.5)
        pids_end = len(tree_pids(svc.pid))
        rss_end = tree_rss_mib(svc.pid)
        stop_t = time.perf_counter()
        code = svc.stop()
        stop_s = time.perf_counter() - stop_t
    time.sleep(0.5)
    leaked = [p for p in r["seen_pids"] if alive(p)]
    hostile = {k: v for k, v in r["outcomes"].items() if k != "benign"}
    table = [
        ("cells answered / asked", f"{r['cells_run']:,} / {args.cells:,}"
         + (f" ({r['sessions_skipped']} sessions skipped at the time limit)"
            if r["sessions_skipped"] else "")),
        ("sessions run", f"{r['sessions_run']:,} ({args.concurrency} at a time)"),
        ("every cell answered exactly once, in order", "yes" if r["exactly_once"] else "NO"),
        ("hostile cells (kind: outcomes)", "; ".join(
            f"{k}: " + ", ".join(f"{o} {n}" for o, n in sorted(v.items()))
            for k, v in hostile.items() if v) or "none"),
        ("benign cells: outcomes", ", ".join(f"{o} {n:,}" for o, n in
                                             sorted(r["outcomes"]["benign"].items()))),
        ("benign cell latency p50 / p99",
         f"{pct(r['benign_ms'], 0.5):.2f} / {pct(r['benign_ms'], 0.99):.2f} ms"),
        ("throughput", f"{r['cells_run'] / r['wall_s']:,.0f} cells/s over {r['wall_s']:.1f} s"),
        ("service processes: at start / at end (idle) / alive after stop",
         f"{pids_start} / {pids_end} / {len(leaked)} (of {len(r['seen_pids'])} seen)"),
        ("service resident memory (VmRSS over its tree): start / end",
         f"{rss_start:.0f} / {rss_end:.0f} MiB"),
        ("service stop (SIGTERM) exit code / time", f"{code} / {stop_s:.2f} s"
         + (" (uvicorn re-raises SIGTERM after its graceful shutdown)" if code == -15 else "")),
    ]
    ok = r["exactly_once"] and not leaked
    if args.json:
        print(json.dumps({
            "cells": args.cells, "sessions": args.sessions, "hostile": args.hostile,
            "cells_run": r["cells_run"], "sessions_run": r["sessions_run"],
            "sessions_skipped": r["sessions_skipped"], "exactly_once": r["exactly_once"],
            "outcomes": r["outcomes"], "benign_p50_ms": pct(r["benign_ms"], 0.5),
            "benign_p99_ms": pct(r["benign_ms"], 0.99), "wall_s": r["wall_s"],
            "cells_per_s": r["cells_run"] / r["wall_s"], "pids_start": pids_start,
            "pids_end": pids_end, "pids_seen": len(r["seen_pids"]), "leaked_pids": leaked,
            "rss_start_mib": rss_start, "rss_end_mib": rss_end, "exit_code": code,
            "ok": ok, "rows": table}, indent=2))
    else:
        print_table(f"sandbox service soak: {args.cells:,} cells over {args.sessions:,} "
                    f"sessions, {args.hostile:.1%} hostile (loopback; client on the same CPUs)",
                    ("check", "result"), table)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
