"""Sandbox benchmark: start, round trip, throughput, recovery and memory, against a baseline.

Run: ``.venv/bin/python benchmarks/sandbox.py`` (``--quick`` for a smoke run, ``--json`` for
machine-readable output, ``--json-out FILE`` to write that to a file as well as printing the
tables). Everything is measured in one run on this machine, with every
protection the kernel offers switched on; the baseline is a fresh ``python -c`` per snippet.
A second table gives what each protection costs the round trip: the same measurement with that
one protection switched off (``SandboxConfig.disable_protections``), interleaved in the run.
A third (alone with ``--service``) gives the sandbox service (``agentmath.sandbox.service``, in a
subprocess under uvicorn on 127.0.0.1) measured over loopback HTTP with keep-alive from this
process, beside the in-process figures and the baseline of the same run.

A smoke run (``--quick``) takes 10x fewer iterations (30x over HTTP, paced phases of 0.25 s
instead of 4 s), and in the protection table pairs one pool with every protection on per round
with each pool that has one switched off (8 pool starts a round, not 14): a look, not figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import pct, print_table
from _floor import floors, one_core, pinned_to_one_cpu
from _service import service_measure
from _service_table import print_service_table, service_json, service_rows

from agentmath.config import SandboxConfig
from agentmath.sandbox import Sandbox, SandboxPool

TRIVIAL = "x = 1"
SYMPY = "sympy.factorint(2**64 - 1)"
SYMPY_SETUP = "import sympy"


def private_mib(pid: int) -> float:
    """Private (unshared) memory of a process in MiB, from /proc/PID/smaps_rollup."""
    total_kb = 0
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total_kb += int(line.split()[1])
    return total_kb / 1024


async def round_trips(pool: SandboxPool, code: str, n: int, setup: str = "") -> list[float]:
    """Latencies (ms) of n sequential snippets in one warm session."""
    async with pool.session() as session:
        await session.run(setup or "0")
        await session.run(code)
        out = []
        for _ in range(n):
            t = time.perf_counter()
            result = await session.run(code)
            out.append((time.perf_counter() - t) * 1000)
            assert result.error is None, result.error
        return out


async def throughput(pool: SandboxPool, code: str, sessions: int, per: int,
                     setup: str = "") -> float:
    """Snippets per second with ``sessions`` concurrent sessions each running ``per`` snippets."""
    opened = [pool.session() for _ in range(sessions)]
    for s in opened:
        await s.run(setup or "0")

    async def drive(s: Any) -> None:
        for _ in range(per):
            await s.run(code)

    t = time.perf_counter()
    await asyncio.gather(*(drive(s) for s in opened))
    elapsed = time.perf_counter() - t
    for s in opened:
        await s.close()
    return sessions * per / elapsed


async def session_starts(pool: SandboxPool, n: int) -> list[float]:
    """Time (ms) from creating a session to its worker being ready, n times."""
    out = []
    for _ in range(n):
        await asyncio.sleep(0.01)  # let the pool refill its spares as it would between uses
        t = time.perf_counter()
        session = pool.session()
        await session.start()
        out.append((time.perf_counter() - t) * 1000)
        await session.close()
    return out


async def recoveries(pool: SandboxPool, n: int, timeout: float) -> list[float]:
    """Time (ms) beyond the limit until a timed-out session answers its next snippet."""
    out = []
    async with pool.session() as session:
        for _ in range(n):
            await asyncio.sleep(0.01)
            t = time.perf_counter()
            result = await session.run("while True: pass", timeout=timeout)
            assert result.timed_out
            after = await session.run("1 + 1")
            assert after.value == "2"
            out.append((time.perf_counter() - t - timeout) * 1000)
    return out


async def memory(pool: SandboxPool, n: int) -> float:
    """Mean private memory (MiB) of n live sessions after a sympy + numpy snippet each."""
    sessions = [pool.session() for _ in range(n)]
    code = ("import sympy, numpy as np\nx = sympy.symbols('x')\n"
            "r = sympy.integrate(x**2 * sympy.sin(x), x)\na = np.arange(1000).sum()")
    for s in sessions:
        await s.run(code)
    values = [private_mib(s.pid) for s in sessions if s.pid]
    for s in sessions:
        await s.close()
    return statistics.mean(values)


def baseline(code: str, n: int, setup: str = "") -> tuple[list[float], float]:
    """A fresh ``python -c`` per snippet: latencies (ms) and throughput with 2 in parallel."""
    program = f"{setup}\n{code}" if setup else code
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", program], check=True)
        lat.append((time.perf_counter() - t) * 1000)
    # Exactly n processes, two at a time: the timed window ends when the n-th exits (a
    # replacement started after the last counted one would be timed without being counted).
    t = time.perf_counter()
    running = [subprocess.Popen([sys.executable, "-c", program]) for _ in range(min(2, n))]
    started = len(running)
    while running:
        for p in [p for p in running if p.poll() is not None]:
            running.remove(p)
            if started < n:
                running.append(subprocess.Popen([sys.executable, "-c", program]))
                started += 1
        time.sleep(0.001)
    return lat, n / (time.perf_counter() - t)


async def measure(quick: bool) -> dict[str, Any]:
    """Run every measurement and return the figures."""
    k = 10 if quick else 1
    res: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    t = time.perf_counter()
    async with SandboxPool() as pool:
        res["pool_start_ms"] = (time.perf_counter() - t) * 1000
        res["protections"] = pool.protections
        res["start_spare"] = await session_starts(pool, 100 // k)
        res["rt_trivial"] = await round_trips(pool, TRIVIAL, 3000 // k)
        res["rt_sympy"] = await round_trips(pool, SYMPY, 1000 // k, SYMPY_SETUP)
        res["tput_trivial"] = await throughput(pool, TRIVIAL, 32, 1000 // k)
        res["tput_sympy"] = await throughput(pool, SYMPY, 32, 200 // k, SYMPY_SETUP)
        res["recovery"] = await recoveries(pool, 20 // k or 2, 0.2)
        res["memory_mib"] = await memory(pool, 4 if quick else 16)
    async with SandboxPool(SandboxConfig(spare_workers=0)) as pool:
        res["start_cold"] = await session_starts(pool, 50 // k)
        res["recovery_cold"] = await recoveries(pool, 20 // k or 2, 0.2)
    with Sandbox() as sb:
        session = sb.session()
        session.run("0")
        lat = []
        for _ in range(2000 // k):
            t = time.perf_counter()
            session.run(TRIVIAL)
            lat.append((time.perf_counter() - t) * 1000)
        res["rt_trivial_sync"] = lat
    res["costs"] = await protection_costs(1000 // k, 1 if quick else 5, shared=quick)
    res["base_trivial"], res["base_tput_trivial"] = baseline(TRIVIAL, 40 // k)
    res["base_sympy"], res["base_tput_sympy"] = baseline(
        "sympy.factorint(2**64 - 1)", 20 // k, "import sympy")
    return res


# Protections whose cost can be measured by switching them off (SandboxConfig's
# disable_protections); the reply checks (decoding limits, sanitizing) are timed directly.
TOGGLED = ("idle_freeze", "minimal_root", "ipc_namespace", "seccomp", "landlock", "setuid",
           "network_namespace")


async def _rt_p50(disable: tuple[str, ...], n: int) -> float:
    async with SandboxPool(SandboxConfig(disable_protections=disable)) as pool:
        return pct(await round_trips(pool, TRIVIAL, n), 0.5)


async def protection_costs(n: int, repeats: int, shared: bool = False) -> dict[str, Any]:
    """What each protection costs the trivial round trip, measured in pairs in one run.

    For each protection and each repeat, a pool with every protection on and one with that
    protection off are measured back to back (p50 of ``n`` round trips each); the cost is the
    median over repeats of the paired ratio, so the drift of a shared VM between pairs cancels.
    With ``shared`` (a smoke run) each repeat measures the pool with every protection on once
    and pairs it with each protection's pool (8 pool starts a repeat instead of 14), and the
    affinity is left alone (:func:`_floor.pinned_to_one_cpu`). Otherwise everything runs on
    one CPU (the table's title says so).
    """
    # One CPU for the host, the zygote and its workers: where the kernel places a worker
    # relative to the host moves a pool's round trip by more than any protection costs.
    with pinned_to_one_cpu(not shared):
        return {**await _paired_costs(n, repeats, shared), "pinned": not shared}


async def _paired_costs(n: int, repeats: int, shared: bool) -> dict[str, Any]:
    ratios: dict[str, list[float]] = {name: [] for name in TOGGLED}
    on_all: list[float] = []
    off: dict[str, list[float]] = {name: [] for name in TOGGLED}
    for _ in range(repeats):
        for name in TOGGLED:
            if not shared or name == TOGGLED[0]:  # shared: one all-on pool a round
                with_all = await _rt_p50((), n)
                on_all.append(with_all)
            without = await _rt_p50((name,), n)
            off[name].append(without)
            ratios[name].append(with_all / without - 1)
    return {"all_on": statistics.median(on_all),
            "off": {name: statistics.median(v) for name, v in off.items()},
            "cost": {name: statistics.median(v) for name, v in ratios.items()},
            "repeats": repeats, "reply_checks_us": reply_check_cost()}


def reply_check_cost() -> float:
    """Microseconds the host spends on a trivial reply's checks (decode limits + sanitizing)."""
    from agentmath.sandbox.pool import _result_from_reply
    from agentmath.sandbox.protocol import decode_body, encode

    body = encode({"duration_ms": 0.004, "id": 2**61})[4:]
    config = SandboxConfig()
    n = 20000
    t = time.perf_counter()
    for _ in range(n):
        _result_from_reply(decode_body(body), config)
    checked = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(n):
        json.loads(body)
    plain = time.perf_counter() - t
    return max(checked - plain, 0.0) / n * 1e6


def cost_rows(c: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(protection, p50 without it, p50 with all, paired cost) rows; goal <= +20% each."""
    out = []
    for name, without in c["off"].items():
        out.append((name, f"{without:.3f} ms", f"{c['all_on']:.3f} ms",
                    f"{c['cost'][name] * 100:+.1f}%"))
    checks = c["reply_checks_us"] / 1000
    out.append(("reply checks (decode limits, sanitizing)", f"{c['all_on'] - checks:.3f} ms",
                f"{c['all_on']:.3f} ms", f"{checks / (c['all_on'] - checks) * 100:+.1f}%"))
    return out


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, agentmath, baseline, goal) rows of the report."""
    def ms(v: list[float], q: float = 0.5) -> str:
        return f"{pct(v, q):.3f} ms"

    return [
        ("new session, spare ready (p50)", ms(r["start_spare"]), ms(r["base_trivial"]),
         "<= 10 ms"),
        ("new session, cold fork (p50)", ms(r["start_cold"]), "", "<= 10 ms"),
        ("round trip, trivial, async (p50)", ms(r["rt_trivial"]), ms(r["base_trivial"]),
         "<= 0.2 ms"),
        ("round trip, trivial, async (p99)", ms(r["rt_trivial"], 0.99), "", ""),
        ("round trip, trivial, sync API (p50)", ms(r["rt_trivial_sync"]), "", ""),
        ("round trip, sympy factorint (p50)", ms(r["rt_sympy"]), ms(r["base_sympy"]), ""),
        ("round trip, sympy factorint (p99)", ms(r["rt_sympy"], 0.99), "", ""),
        ("throughput, trivial (32 sessions)", f"{r['tput_trivial']:,.0f} /s",
         f"{r['base_tput_trivial']:,.0f} /s", ">= 10,000 /s"),
        ("throughput, sympy factorint (32 sessions)", f"{r['tput_sympy']:,.0f} /s",
         f"{r['base_tput_sympy']:,.0f} /s", ""),
        ("timeout recovery, spare ready (p50)", ms(r["recovery"]), "", "<= 20 ms"),
        ("timeout recovery, cold fork (p50)", ms(r["recovery_cold"]), "", "<= 20 ms"),
        ("private memory per live session", f"{r['memory_mib']:.1f} MiB", "", "<= 20 MiB"),
    ]


def print_cost_table(costs: dict[str, Any], as_json: bool) -> None:
    """The protection-cost table, or its rows as JSON."""
    if as_json:
        print(json.dumps({"protection_costs": cost_rows(costs)}, indent=2))
        return
    where = "pinned to one CPU" if costs.get("pinned", True) else "not pinned (smoke run)"
    print_table(f"what each protection costs the trivial round trip (p50, {where}; "
                f"median of {costs['repeats']} paired runs; goal: <= +20% each)",
                ("protection switched off", "round trip without it", "with every protection",
                 "cost"), cost_rows(costs))


# -- the service over loopback HTTP (issue 12): the table in benchmarks/_service_table.py ----

async def measure_service(quick: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The service section alone: the in-process trivial figures and the ``python -c``
    baseline it is compared with, then the service over HTTP, all in this run."""
    k = 10 if quick else 1
    res: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    res["rt_trivial"], res["tput_trivial"] = await trivial_in_process(quick)
    res["base_trivial"], res["base_tput_trivial"] = baseline(TRIVIAL, 40 // k)
    return res, await service_measure(quick)


async def trivial_in_process(quick: bool) -> tuple[list[float], float]:
    """Trivial round trips (ms) in one session and the 32-session throughput of a pool."""
    k = 10 if quick else 1
    async with SandboxPool() as pool:
        return (await round_trips(pool, TRIVIAL, 3000 // k),
                await throughput(pool, TRIVIAL, 32, 1000 // k))


def machine_share(quick: bool) -> dict[str, Any]:
    """The floors under the in-process figures and the in-process figures again on uvloop
    (:func:`_floor.floors`), then all of it and the baseline pinned to one CPU
    (:func:`_floor.one_core`): the machine's share of the round trip."""
    out = floors(quick, lambda: trivial_in_process(quick))
    out.update(one_core(quick, lambda: trivial_in_process(quick),
                        lambda: baseline(TRIVIAL, 4 if quick else 40)))
    return out


def write_json(payload: dict[str, Any], path: str | None) -> None:
    """``--json-out``: what ``--json`` prints, written to ``path`` (the tables still print)."""
    if path:
        with open(path, "w") as fh:
            json.dump(payload, fh, indent=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 10x fewer iterations (30x over HTTP, paced phases "
                             "of 0.25 s), one all-on pool a round in the protection table")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    parser.add_argument("--json-out", metavar="FILE",
                        help="also write what --json prints to FILE (the tables still print)")
    parser.add_argument("--costs", action="store_true",
                        help="only the table of what each protection costs the round trip")
    parser.add_argument("--service", action="store_true",
                        help="only the service section: in process and over loopback HTTP "
                             "(the service in a subprocess) against the python -c baseline")
    args = parser.parse_args()
    if args.service:
        r, s = asyncio.run(measure_service(args.quick))
        r.update(machine_share(args.quick))
        write_json(service_json(r, s), args.json_out)
        print_service_table(r, s, args.json)
        return
    if args.costs:
        costs = asyncio.run(protection_costs(100 if args.quick else 1000, 1 if args.quick else 7,
                                             shared=args.quick))
        write_json({"protection_costs": cost_rows(costs)}, args.json_out)
        print_cost_table(costs, args.json)
        return
    result = asyncio.run(measure(args.quick))
    service = asyncio.run(service_measure(args.quick))
    result.update(machine_share(args.quick))
    table = rows(result)
    payload = {"rows": table, "protection_costs": cost_rows(result["costs"]),
               "service_rows": service_rows(result, service),
               "protections": result["protections"]}
    write_json(payload, args.json_out)
    if args.json:
        print(json.dumps(payload, indent=2))
        return
    print_table(f"agentmath sandbox benchmark ({result['cpus']} CPUs, Python "
                f"{result['python']}; pool start {result['pool_start_ms']:.0f} ms)",
                ("metric", "agentmath", "baseline: python -c per snippet", "goal"), table)
    print_cost_table(result["costs"], False)
    print_service_table(result, service, False)
    active = [k for k, v in result["protections"].items() if v]
    print(f"protections active: {', '.join(active) or 'none'}")


if __name__ == "__main__":
    main()
