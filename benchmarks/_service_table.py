"""The service section's table of ``benchmarks/sandbox.py`` (``--service``, and the third table
of a full run): the in-process figures, the floors and the one-CPU run beside the service over
loopback HTTP, each against the ``python -c`` baseline of the same run."""

from __future__ import annotations

import json
from typing import Any

from _common import pct, print_table


def met(ok: bool) -> str:
    """The "met?" column of a goal row."""
    return "met" if ok else "NOT met"


def service_rows(r: dict[str, Any], s: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(metric, result, baseline, goal, met) rows: in process and over HTTP vs ``python -c``."""
    base_p50 = pct(r["base_trivial"], 0.5)
    ip_p50 = pct(r["rt_trivial"], 0.5)
    ratio = r["tput_trivial"] / r["base_tput_trivial"]
    uv_p50, uv_ratio = pct(r["rt_trivial_uvloop"], 0.5), r["tput_trivial_uvloop"] / r[
        "base_tput_trivial"]
    out = [
        ("in process: round trip, trivial (p50)", f"{ip_p50:.3f} ms ({base_p50 / ip_p50:,.0f}x)",
         f"{base_p50:.1f} ms", ">= 300x faster", met(base_p50 / ip_p50 >= 300)),
        ("in process: throughput, trivial (32 sessions)",
         f"{r['tput_trivial']:,.0f} /s ({ratio:,.0f}x)", f"{r['base_tput_trivial']:,.0f} /s",
         ">= 300x", met(ratio >= 300)),
        ("in process on uvloop: round trip, trivial (p50)",
         f"{uv_p50:.3f} ms ({base_p50 / uv_p50:,.0f}x)", f"{base_p50:.1f} ms", "", ""),
        ("in process on uvloop: throughput, trivial (32 sessions)",
         f"{r['tput_trivial_uvloop']:,.0f} /s ({uv_ratio:,.0f}x)",
         f"{r['base_tput_trivial']:,.0f} /s", "", ""),
    ]
    for kind in ("asyncio", "uvloop"):  # the machine's share (benchmarks/_floor.py)
        bare, frozen = r[f"floor_{kind}"], r[f"floor_freeze_{kind}"]
        out.append((f"floor on {kind}: bare 2-process ping-pong, without / with the freeze's "
                    f"2 signals (p50)", f"{bare:.3f} ms ({base_p50 / bare:,.0f}x) / {frozen:.3f}"
                    f" ms ({base_p50 / frozen:,.0f}x)", f"{base_p50:.1f} ms", "", ""))
    out += _one_core_rows(r)
    for kind, c in s.items():
        rt = c["rt"]
        out.append((f"HTTP ({kind} client): round trip, trivial (p50 / p99)",
                    f"{pct(rt, 0.5):.3f} / {pct(rt, 0.99):.3f} ms "
                    f"({base_p50 / pct(rt, 0.5):,.0f}x)", f"{base_p50:.1f} ms", "", ""))
        top = max(c["tput"])
        for conc, v in c["tput"].items():
            out.append((f"HTTP ({kind} client): throughput, {conc} concurrent sessions",
                        f"{v['rate']:,.0f} /s (CPU: client {v['client_cpu']:.2f}, service "
                        f"{v['service_cpu']:.2f}, workers {v['workers_cpu']:.2f})",
                        f"{r['base_tput_trivial']:,.0f} /s",
                        ">= 3,000 /s (best)" if conc == top else "",
                        met(c["best"] >= 3000) if conc == top else ""))
        for key, label in (("paced_half", "half its best rate"), ("paced_1500", "1,500 /s")):
            rate, lat = c[key]
            out.append((f"HTTP ({kind} client): paced at {label} ({rate:,.0f} /s), p50 / p99",
                        f"{pct(lat, 0.5):.2f} / {pct(lat, 0.99):.2f} ms", "", "p99 <= 5 ms",
                        met(pct(lat, 0.99) <= 5)))
            t = c["tail"][f"{rate:.0f}"]
            out.append((f"HTTP ({kind} client): paced at {label}: cells over 5 ms; of those, "
                        "with the machine stalled in them or in the 50 ms before (at random "
                        "times: as many)",
                        f"{t['slow_cells']} of {t['cells']}; {t['slow_cells_after_a_stall']} "
                        f"({t['slow_cells_by_chance']:.0f}) (bystanders: {t['stalls']} of "
                        f"{t['samples']} {t['loop_ms']:.2f} ms loops held over 1 ms, longest "
                        f"{t['longest_stall_ms']:.1f} ms; steal {t['steal_s']:.2f} s"
                        + ("" if t["bystander_priority"] == "SCHED_FIFO" else
                           f"; bystanders at {t['bystander_priority']} priority: their "
                           "stalls include waits for our own processes") + ")",
                        "", "", ""))
    return out


SERVICE_NOTE = ("the client (agentmath's RemoteSandbox: httpx on aiohttp's pool; plain httpx, "
                "its own pool, the client before 2026-11-28; or raw HTTP/1.1; on asyncio, this "
                "process) runs on the same "
                "CPUs as the service "
                "and its workers; 'CPU' is cores busy (1.00 = one core) in the client, the "
                "service's main process and its workers during that run. SandboxFusion "
                "publishes no latency or throughput figures (its repository at 469de08); its "
                "/run_code starts a fresh `python FILE` per request (sandbox/runners/major.py), "
                "so the python -c baseline is a lower bound on its cost per cell")


def _one_core_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """The same run pinned to one CPU (benchmarks/_floor.one_core), against ``python -c`` on
    that CPU: the client, the sandbox's workers and the baseline's interpreters on one core."""
    base = pct(r["one_core_base"], 0.5)
    rt = pct(r["one_core_rt_uvloop"], 0.5)
    ratio = r["one_core_tput_uvloop"] / r["one_core_base_tput"]
    bare, frozen = r["one_core_floor_uvloop"], r["one_core_floor_freeze_uvloop"]
    return [
        ("one CPU, in process on uvloop: round trip, trivial (p50)",
         f"{rt:.3f} ms ({base / rt:,.0f}x)", f"{base:.1f} ms (one CPU)", ">= 300x faster",
         met(base / rt >= 300)),
        ("one CPU, in process on uvloop: throughput, trivial (32 sessions)",
         f"{r['one_core_tput_uvloop']:,.0f} /s ({ratio:,.0f}x)",
         f"{r['one_core_base_tput']:,.0f} /s (one CPU)", ">= 300x", met(ratio >= 300)),
        ("one CPU, floor on uvloop: without / with the freeze (p50)",
         f"{bare:.3f} ms ({base / bare:,.0f}x) / {frozen:.3f} ms ({base / frozen:,.0f}x)",
         f"{base:.1f} ms (one CPU)", "", ""),
    ]


def service_json(r: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """What ``--service --json`` prints."""
    return {"service_rows": service_rows(r, s), "note": SERVICE_NOTE,
            "http": {kind: {"tput": c["tput"], "best": c["best"]} for kind, c in s.items()}}


def print_service_table(r: dict[str, Any], s: dict[str, Any], as_json: bool) -> None:
    """The service table (in process and over loopback HTTP against the baseline)."""
    table = service_rows(r, s)
    if as_json:
        print(json.dumps(service_json(r, s), indent=2))
        return
    print_table(f"sandbox service over loopback HTTP (keep-alive; {r['cpus']} CPUs shared with "
                f"the client)", ("metric", "result", "baseline: python -c per snippet", "goal",
                                 "met?"), table)
    print(f"note: {SERVICE_NOTE}")
