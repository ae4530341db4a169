"""``agentmath demo`` beside the demo of an older commit, one after the other in one run.

    python benchmarks/demo_vs_old.py                     # b333b8a's demo, then today's
    python benchmarks/demo_vs_old.py --rev REV --json

Issue 20 asked for today's demo to take at most half the wall time of the demo of the day it
was filed (commit b333b8a), both measured in the same session on the same machine (this VM's
speed varies up to 2x between days, so the ratio is the figure). The old commit runs from a git
worktree put first on PYTHONPATH (its own recipe, sizes and steps); today's from this checkout.
Each demo is a process of its own with ``--no-save-model``; the table gives wall times, their
ratio, and each demo's accuracies. Run it on an otherwise idle machine: the demos use both cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, worktree  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run_demo(code: Path, out: Path) -> dict[str, Any]:
    """One demo with the package at ``code``: its wall time and its ``--json`` summary."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agentmath.cli", "demo", "--out", str(out),
                           "--no-save-model", "--json"], cwd=str(code), env=env,
                          stdout=subprocess.PIPE, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the demo of {code} failed (exit {done.returncode})")
    summary = json.loads(done.stdout)
    return {"wall_s": wall, "models": {m["model"]: m["accuracy"] for m in summary["models"]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="b333b8a", help="the older commit whose demo runs first")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-demo-vs-old")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    old = run_demo(worktree(args.rev, args.out.resolve()), args.out.resolve() / "demo-old")
    new = run_demo(ROOT, args.out.resolve() / "demo-new")
    result = {"rev": args.rev, "old": old, "new": new, "ratio": new["wall_s"] / old["wall_s"],
              "load_avg": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print_table(f"agentmath demo: {args.rev} beside today's, one after the other",
                ["demo", "wall time", "vs old", "accuracies"],
                [[name, f"{r['wall_s'] / 60:.1f} min", f"{r['wall_s'] / old['wall_s']:.2f}x",
                  ", ".join(f"{m} {a:.1%}" for m, a in r["models"].items())]
                 for name, r in (("old (" + args.rev + ")", old), ("today", new))])


if __name__ == "__main__":
    main()
