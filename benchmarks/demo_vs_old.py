"""``agentmath demo`` beside the demo of an older commit, one after the other in one run.

    python benchmarks/demo_vs_old.py                     # ff79a7b's demo, then this checkout's
    python benchmarks/demo_vs_old.py --old REV --json

The demo's time goal: at most ``--max-minutes`` (10) of wall time, and at most ``--max-ratio``
(1.2) times the wall time of the ``--old`` commit's demo measured in the same run on the same
machine (a VM's speed can vary between days, so the ratio is the figure). The old commit runs
from a git worktree put first on PYTHONPATH (its own recipe, sizes and steps); this checkout's
from here. Each demo is a process of its own with ``--no-save-model``; the table gives wall
times, their ratio, each demo's accuracies (greedy, and sampled where the demo measures it) and
whether the goal is met. Run it on an otherwise idle machine: the demos use both cores.
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
    return {"wall_s": wall, "models": {m["model"]: m["accuracy"] for m in summary["models"]},
            "sampled": {m["model"]: m["sampled_accuracy"] for m in summary["models"]
                        if m.get("sampled_accuracy") is not None}}


def accuracies(run: dict[str, Any]) -> str:
    """A demo's accuracies for the table: greedy, and "/ sampled" where it has them."""
    sampled = run.get("sampled", {})
    return ", ".join(f"{m} {a:.1%}" + (f" / {sampled[m]:.1%}" if m in sampled else "")
                     for m, a in run["models"].items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", "--rev", dest="old", default="ff79a7b", metavar="REV",
                    help="the older commit whose demo runs first (default ff79a7b)")
    ap.add_argument("--max-minutes", type=float, default=10.0,
                    help="the goal: this checkout's demo takes at most this (default 10)")
    ap.add_argument("--max-ratio", type=float, default=1.2,
                    help="the goal: and at most this times the old demo's time (default 1.2)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-demo-vs-old")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        old_code = worktree(args.old, args.out.resolve())
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"--old {args.old}: no worktree of it "
                         f"({exc.stderr.decode(errors='replace').strip()})") from None
    old = run_demo(old_code, args.out.resolve() / "demo-old")
    new = run_demo(ROOT, args.out.resolve() / "demo-new")
    ratio = new["wall_s"] / old["wall_s"]
    result = {"rev": args.old, "old": old, "new": new, "ratio": ratio,
              "goal": {"max_minutes": args.max_minutes, "max_ratio": args.max_ratio,
                       "met": new["wall_s"] <= 60 * args.max_minutes
                       and ratio <= args.max_ratio},
              "load_avg": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print_table(f"agentmath demo: {args.old} beside this checkout's, one after the other",
                ["demo", "wall time", "vs old", "accuracies (greedy / sampled)"],
                [[name, f"{r['wall_s'] / 60:.1f} min", f"{r['wall_s'] / old['wall_s']:.2f}x",
                  accuracies(r)]
                 for name, r in ((f"old ({args.old})", old), ("this checkout", new))])
    print(f"goal: at most {args.max_minutes:g} min and {args.max_ratio:g}x the old demo: "
          f"{'met' if result['goal']['met'] else 'NOT met'}")


if __name__ == "__main__":
    main()
