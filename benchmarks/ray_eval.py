"""Ray scale-out benchmark: evaluation throughput on 1, 2 and 3 Ray nodes, beside one process.

Run: ``.venv/bin/python benchmarks/ray_eval.py`` (``--quick`` for a smoke run, ``--json``).
Needs the ``ray`` extra. Each cluster is a local ``ray.cluster_utils.Cluster`` (a head and
``n - 1`` more nodes, 1 CPU each, dashboard off) on this machine; the evaluation is
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
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import print_table

from agentmath.config import EvalConfig, LoopConfig, RayConfig
from agentmath.eval.runner import run_eval

NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}


def write_dataset(model_root: Path, path: Path, n: int) -> Path:
    """``n`` rows cycling over the tool model's held-out problems (ids made unique)."""
    from agentmath.jsonl import read_jsonl

    rows = [{"id": r["id"], "problem": r["problem"], "answer": r["answer"]}
            for r in read_jsonl(model_root / "test.jsonl")]
    rows = [rows[i % len(rows)] | {"id": f"{rows[i % len(rows)]['id']}-{i}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(model_root: Path, data: Path, concurrency: int, ray: RayConfig | None) -> EvalConfig:
    return EvalConfig(dataset=str(data), model=str(model_root / "final"), backend="hf",
                      samples=1, concurrency=concurrency, temperature=0.0,
                      loop=LoopConfig(max_model_tokens=200), ray=ray)


async def local(model_root: Path, data: Path, out: Path, concurrency: int) -> dict[str, Any]:
    """The baseline: one process, the hf backend batching ``concurrency`` requests."""
    from agentmath.backends.hf import HFBackend

    backend = HFBackend(str(model_root / "final"))
    start = time.perf_counter()
    try:
        metrics = await run_eval(config(model_root, data, concurrency, None), out, backend)
    finally:
        await backend.aclose()
    return {"wall_s": time.perf_counter() - start, "metrics": metrics}


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
        start = time.perf_counter()
        metrics = asyncio.run(run_eval(cfg, out, None))
        return {"wall_s": time.perf_counter() - start, "metrics": metrics}
    finally:
        ray.shutdown()
        cluster.shutdown()


def rows(n: int, base: dict[str, Any], runs: dict[int, dict[str, Any]]) -> list[tuple[str, ...]]:
    base_rate = n / base["wall_s"]
    one = n / runs[min(runs)]["wall_s"]
    out = [("one process (no Ray), baseline", f"{base_rate:.2f} samples/s",
            f"{base['wall_s']:.1f} s", "1.00x", "",
            f"{base['metrics']['avg']['value']:.1%}")]
    for nodes, r in sorted(runs.items()):
        rate = n / r["wall_s"]
        out.append((f"Ray: {nodes} node(s), {nodes} worker(s)", f"{rate:.2f} samples/s",
                    f"{r['wall_s']:.1f} s", f"{rate / base_rate:.2f}x", f"{rate / one:.2f}x",
                    f"{r['metrics']['avg']['value']:.1%}"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples (smoke run)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--concurrency", type=int, default=12,
                        help="samples in flight in all (split over the workers)")
    parser.add_argument("--model", type=Path, default=None, help=(
        "a grown tool-model directory (final/ and test.jsonl) to use instead of growing one"))
    args = parser.parse_args()
    from agentmath.recipes.tool_model import TEST_MODEL, cached_tool_model

    model_root = args.model or cached_tool_model(TEST_MODEL, Path.home() / ".cache" /
                                                 "agentmath-bench")
    n = 12 if args.quick else 60
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        data = write_dataset(model_root, tmp / "data.jsonl", n)
        base = asyncio.run(local(model_root, data, tmp / "local", args.concurrency))
        runs = {k: on_cluster(model_root, data, tmp / f"ray{k}", k, args.concurrency)
                for k in ((1, 3) if args.quick else (1, 2, 3))}
    table = rows(n, base, runs)
    if args.json:
        print(json.dumps({"samples": n, "concurrency": args.concurrency, "rows": table,
                          "wall_s": {"local": base["wall_s"],
                                     **{str(k): r["wall_s"] for k, r in runs.items()}}},
                         indent=2))
        return
    print_table(f"evaluation on Ray ({n} samples, tiny tool model via hf in each worker, "
                f"concurrency {args.concurrency}; local nodes of 1 CPU on this machine)",
                ("run", "throughput", "wall", "vs one process", "vs 1 node", "accuracy"),
                table)


if __name__ == "__main__":
    main()
