"""Ray scale-out benchmark: evaluation throughput on 1, 2 and 3 Ray nodes, beside one process.

Run: ``.venv/bin/python benchmarks/ray_eval.py`` (``--quick`` for a smoke run, ``--json``).
Needs the ``ray`` extra. Each cluster is a local ``ray.cluster_utils.Cluster`` (a head and
``n - 1`` more nodes, 1 CPU each, dashboard off) on this machine (a smoke run, ``--quick``: 12
samples on 1 and 3 nodes, one cluster grown from 1 node to 3 between its two runs, so the
3-node run's start-up figure finds the head warm); the evaluation is
``run_eval`` with ``config.ray`` set (one rollout worker per node), on the tiny tool model
through the ``hf`` backend *inside each worker* (every node generates for its own episodes,
as evaluation shards would on a real cluster), greedy, with real tool calls in each node's
own sandbox. The baseline, measured in the same run, is the same evaluation in one process
(``hf`` backend batching up to the same concurrency, no Ray).

On this machine's 2 vCPUs the nodes share two cores, so the figures say how much of the work
the placement spreads, not what 3 real machines give; the written plan for a 100-node run is in
docs/scaling.md (with the rollout simulator's figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import print_table, tool_model_dataset

from agentmath.config import LoopConfig, RayConfig
from agentmath.eval.config import EvalConfig
from agentmath.eval.results import EvalProgress, EvalResult
from agentmath.eval.runner import run_eval

NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}


def config(model_root: Path, data: Path, concurrency: int, ray: RayConfig | None) -> EvalConfig:
    return EvalConfig(dataset=str(data), model=str(model_root / "final"), backend="hf",
                      samples=1, concurrency=concurrency, temperature=0.0,
                      loop=LoopConfig(max_model_tokens=200), ray=ray)


class Clock:
    """Wall time of a run, of its first sample and of its last (start-up vs steady state)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first = self.last = 0.0
        self.done = 0

    def __call__(self, progress: EvalProgress) -> None:
        now = time.perf_counter() - self.start
        self.first = self.first or now
        self.last, self.done = now, progress.done

    def result(self, result: EvalResult) -> dict[str, Any]:
        metrics = result.metrics.to_dict()
        steady = (self.done - 1) / (self.last - self.first) if self.last > self.first else 0.0
        return {"wall_s": time.perf_counter() - self.start, "first_s": self.first,
                "steady_rate": steady, "metrics": metrics}


async def local(model_root: Path, data: Path, out: Path, concurrency: int) -> dict[str, Any]:
    """The baseline: one process, the hf backend batching ``concurrency`` requests, torch on
    one thread as in a 1-CPU Ray worker (Ray sets OMP_NUM_THREADS=1 there; with torch's default
    two threads here, the model and the sandbox fight over the 2 cores: 4x slower)."""
    import torch

    from agentmath.backends.hf import HFBackend

    torch.set_num_threads(1)

    clock = Clock()
    backend = HFBackend(str(model_root / "final"))
    try:
        metrics = await run_eval(config(model_root, data, concurrency, None), out, backend,
                                 progress=clock)
    finally:
        await backend.aclose()
    return clock.result(metrics)


def on_cluster(model_root: Path, data: Path, out: Path, nodes: int,
               concurrency: int) -> dict[str, Any]:
    """The evaluation on a fresh local cluster of ``nodes`` nodes (one worker each)."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        cfg = config(model_root, data, concurrency,
                     RayConfig(address=cluster.address, workers=nodes))
        clock = Clock()
        metrics = asyncio.run(run_eval(cfg, out, None, progress=clock))
        return clock.result(metrics)
    finally:
        ray.shutdown()
        cluster.shutdown()


def on_growing_cluster(model_root: Path, data: Path, tmp: Path, sizes: tuple[int, ...],
                       concurrency: int) -> dict[int, dict[str, Any]]:
    """The evaluation on each of ``sizes`` nodes (ascending), on one local cluster that gains
    nodes between the runs (a smoke run: one cluster's start and stop instead of one each)."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    runs, have = {}, 1
    try:
        for nodes in sizes:
            for _ in range(nodes - have):
                cluster.add_node(**NODE)
            have = max(have, nodes)
            cluster.wait_for_nodes()
            if not ray.is_initialized():
                ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
            cfg = config(model_root, data, concurrency,
                         RayConfig(address=cluster.address, workers=nodes))
            clock = Clock()
            metrics = asyncio.run(run_eval(cfg, tmp / f"ray{nodes}", None, progress=clock))
            runs[nodes] = clock.result(metrics)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return runs


def rows(base: dict[str, Any], runs: dict[int, dict[str, Any]]) -> list[tuple[str, ...]]:
    """(run, steady samples/s, start-up, wall, vs one process, vs 1 node) rows."""
    base_rate = base["steady_rate"]
    one = runs[min(runs)]["steady_rate"]

    def row(name: str, r: dict[str, Any], vs_one: str) -> tuple[str, ...]:
        return (name, f"{r['steady_rate']:.2f} samples/s", f"{r['first_s']:.1f} s",
                f"{r['wall_s']:.1f} s", f"{r['steady_rate'] / base_rate:.2f}x", vs_one)

    out = [row("one process (no Ray), baseline", base, "")]
    for nodes, r in sorted(runs.items()):
        out.append(row(f"Ray: {nodes} node(s), {nodes} worker(s)", r,
                       f"{r['steady_rate'] / one:.2f}x"))
    return out


def _plain(r: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in r.items() if k != "metrics"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 12 samples, 1 and 3 nodes of one growing cluster")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--concurrency", type=int, default=12,
                        help="samples in flight in all (split over the workers)")
    parser.add_argument("--model", type=Path, default=None, help=(
        "a grown tool-model directory (final/ and test.jsonl) to use instead of growing one"))
    args = parser.parse_args()
    from agentmath.recipes.tool_model import TEST_MODEL, cached_tool_model

    model_root = args.model or cached_tool_model(  # progress on stderr: --json owns stdout
        TEST_MODEL, Path.home() / ".cache" / "agentmath-bench",
        stage=lambda line: print(line, file=sys.stderr))
    n = 12 if args.quick else 60
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        data = tool_model_dataset(model_root, tmp / "data.jsonl", n)
        base = asyncio.run(local(model_root, data, tmp / "local", args.concurrency))
        if args.quick:
            runs = on_growing_cluster(model_root, data, tmp, (1, 3), args.concurrency)
        else:
            runs = {k: on_cluster(model_root, data, tmp / f"ray{k}", k, args.concurrency)
                    for k in (1, 2, 3)}
    table = rows(base, runs)
    if args.json:
        print(json.dumps({"samples": n, "concurrency": args.concurrency, "rows": table,
                          "runs": {"local": _plain(base),
                                   **{str(k): _plain(r) for k, r in runs.items()}}},
                         indent=2))
        return
    print_table(f"evaluation on Ray ({n} samples, tiny tool model via hf in each worker, "
                f"concurrency {args.concurrency}; local nodes of 1 CPU on this machine)",
                ("run", "steady state (first to last sample)", "start-up (to first sample)",
                 "wall", "vs one process", "vs 1 node"), table)


if __name__ == "__main__":
    main()
