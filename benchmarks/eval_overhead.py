"""Evaluation-harness benchmark: overhead per sample, and samples/s with a real tiny model.

Run: ``.venv/bin/python benchmarks/eval_overhead.py`` (``--quick`` for a smoke run).

* overhead per sample: ``run_eval`` with a scripted backend (no model) on a synthetic dataset,
  through the real sandbox, grading and the samples.jsonl store — what the harness itself costs;
* throughput: a tiny tool model (agentmath's own, grown offline with the test model's recipe
  by :func:`agentmath.recipes.tool_model.cached_tool_model` and cached under
  ``~/.cache/agentmath-bench``) on its held-out problems through the ``hf`` backend, which batches
  concurrent requests, at several ``--concurrency`` levels, with real tool calls in the real
  sandbox; concurrency 1 is the sequential baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from _common import print_table, tool_model_dataset  # noqa: E402

from agentmath.backends.scripted import ScriptedBackend  # noqa: E402
from agentmath.config import EvalConfig, LoopConfig  # noqa: E402
from agentmath.eval.runner import run_eval  # noqa: E402


def write_dataset(path: Path, n: int) -> Path:
    rows = [{"id": f"p{i}", "problem": f"What is {100 + i} * {7 + i}?",
             "answer": str((100 + i) * (7 + i))} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


async def overhead(tmp: Path, problems: int, samples: int) -> tuple[float, float]:
    """(start-up ms, steady-state ms per sample) of the harness with an instant model.

    Start-up (sandbox pool, grading workers) is paid once per run; the steady state is the
    time between the first and the last finished sample divided by the samples in between.
    """
    data = write_dataset(tmp / "data.jsonl", problems)
    turns = ["Compute.\n<code>\nprint(6 * 7)\n</code>", "The answer is \\boxed{42}."]
    cfg = EvalConfig(dataset=str(data), model="scripted", samples=samples, concurrency=64)
    stamps: list[float] = []
    start = time.perf_counter()
    await run_eval(cfg, tmp / "run-overhead", ScriptedBackend(turns),
                   progress=lambda _: stamps.append(time.perf_counter()))
    steady = (stamps[-1] - stamps[0]) * 1000 / (len(stamps) - 1)
    return (stamps[0] - start) * 1000, steady


async def throughput(tmp: Path, model_root: Path, concurrency: int,
                     n: int) -> tuple[float, dict]:
    """Samples per second with the tiny model through the batching hf backend, on its
    held-out problems with its code_interpreter prompt (so the samples call the sandbox);
    and the run's metrics."""
    from agentmath.backends.hf import HFBackend

    model_dir = model_root / "final"
    data = tool_model_dataset(model_root, tmp / f"data-{concurrency}.jsonl", n)
    cfg = EvalConfig(dataset=str(data), model=str(model_dir), backend="hf", samples=1,
                     concurrency=concurrency, temperature=0.0,
                     loop=LoopConfig(max_model_tokens=200))
    backend = HFBackend(str(model_dir))
    start = time.perf_counter()
    try:
        metrics = (await run_eval(cfg, tmp / f"run-c{concurrency}", backend)).metrics.to_dict()
    finally:
        await backend.aclose()
    return n / (time.perf_counter() - start), metrics


async def main(quick: bool, model_root: Path) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        startup, per = await overhead(tmp, 20 if quick else 100, 4)
        rows.append(("harness start-up (sandbox pool, grading workers, first sample)",
                     f"{startup:.0f} ms", ""))
        rows.append(("harness overhead per sample, steady state (scripted model, real "
                     "sandbox, grading, store)", f"{per:.2f} ms", ""))
        n = 16 if quick else 64
        base = None
        for conc in (1, 4, 16) if quick else (1, 4, 16, 64):
            rate, metrics = await throughput(tmp, model_root, conc, n)
            base = base or rate
            rows.append((f"tiny model (hf backend), concurrency {conc}", f"{rate:.2f} samples/s",
                         f"{rate / base:.1f}x vs concurrency 1"))
            if conc == 1:
                tools = metrics["tools"]
                rows.append(("  its samples: accuracy / tool calls per sample / tool errors",
                             f"{metrics['avg']['value']:.1%} / {tools['calls_per_sample']:.2f}"
                             f" / {tools['error_rate']:.1%}", "greedy, held-out problems"))
    print_table("agentmath evaluation-harness benchmark", ("measure", "result", "vs baseline"),
                rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller (smoke run)")
    parser.add_argument("--model", type=Path, default=None, help=(
        "a grown tool-model directory (final/ and test.jsonl) to use instead of growing one"))
    args = parser.parse_args()
    quick = args.quick
    from agentmath.recipes.tool_model import TEST_MODEL, cached_tool_model

    root = Path.home() / ".cache" / "agentmath-bench"
    # Built (or loaded from the cache) before the event loop: building runs its own.
    asyncio.run(main(quick, args.model or cached_tool_model(TEST_MODEL, root)))
