"""Evaluation-harness benchmark: overhead per sample, and samples/s with a real tiny model.

Run: ``.venv/bin/python benchmarks/eval_overhead.py`` (``--quick`` for a smoke run: 10
problems x 4 samples a run for the overhead rows, one round; the model rows on 8 samples at
concurrency 1, 4 and 8).

* overhead per sample: ``run_eval`` with a scripted backend (no model) on a synthetic dataset,
  through the real sandbox, grading and the samples.jsonl store — what the harness itself costs,
  at concurrency 1 and 64 (``--overhead-concurrency``), each beside the same run with
  ``Segment.to_dict`` as it was before it stopped using ``dataclasses.asdict`` (the baseline of
  that fix) and with a zygote that does not preload ``matplotlib.pyplot`` (what that preload
  costs every sample: a larger zygote makes every worker's fork and exit dearer), interleaved,
  best of ``--rounds``; with the
  CPU time of the whole process tree (host, zygote, workers) per sample, which a shared machine
  disturbs less than the wall time (``--overhead-only`` skips the model rows);
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
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _common import print_table, tool_model_dataset  # noqa: E402

from agentmath.agent.trajectory import Segment  # noqa: E402
from agentmath.backends.scripted import ScriptedBackend  # noqa: E402
from agentmath.config import DEFAULT_PRELOAD, LoopConfig, SandboxConfig  # noqa: E402
from agentmath.eval.config import EvalConfig  # noqa: E402
from agentmath.eval.runner import run_eval  # noqa: E402


def write_dataset(path: Path, n: int) -> Path:
    rows = [{"id": f"p{i}", "problem": f"What is {100 + i} * {7 + i}?",
             "answer": str((100 + i) * (7 + i))} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tree_cpu_s(pid: int | None = None) -> float:
    """CPU seconds of a process tree from /proc: each live process's own time and that of the
    children it reaped (so workers the zygote reaped count too); 0 where /proc is missing."""
    pid = pid or os.getpid()
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        children: list[int] = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                children += [int(c) for c in fh.read().split()]
    except OSError:
        return 0.0
    own = sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return own + sum(tree_cpu_s(c) for c in children)


NO_PYPLOT = tuple(m for m in DEFAULT_PRELOAD if m != "matplotlib.pyplot")


def _segment_to_dict_before(self: Segment) -> dict[str, Any]:
    """Segment.to_dict as it was before the fix (dataclasses.asdict), the same run's baseline."""
    data = asdict(self)
    data["result"] = self.result.to_dict() if self.result is not None else None
    return data


@contextmanager
def segment_to_dict(before: bool) -> Iterator[None]:
    fixed = Segment.to_dict
    if before:
        Segment.to_dict = _segment_to_dict_before  # type: ignore[method-assign]
    try:
        yield
    finally:
        Segment.to_dict = fixed  # type: ignore[method-assign]


async def overhead(tmp: Path, problems: int, samples: int, concurrency: int = 64,
                   preload: tuple[str, ...] = DEFAULT_PRELOAD) -> tuple[float, float, float]:
    """(start-up ms, steady-state ms per sample, CPU ms per sample) of the harness with an
    instant model.

    Start-up (sandbox pool, grading workers) is paid once per run; the steady state is the
    time between the first and the last finished sample divided by the samples in between, and
    the CPU is that of the process tree over the same span (read at those two samples only:
    walking /proc costs milliseconds).
    """
    data = write_dataset(tmp / "data.jsonl", problems)
    turns = ["Compute.\n<code>\nprint(6 * 7)\n</code>", "The answer is \\boxed{42}."]
    cfg = EvalConfig(dataset=str(data), model="scripted", samples=samples,
                     concurrency=concurrency, sandbox=SandboxConfig(preload=preload))
    stamps: list[float] = []
    cpu: list[float] = []
    total = problems * samples

    def progress(_: object) -> None:
        stamps.append(time.perf_counter())
        if len(stamps) in (1, total):
            cpu.append(tree_cpu_s())

    start = time.perf_counter()
    await run_eval(cfg, tmp / f"run-overhead-{len(list(tmp.iterdir()))}", ScriptedBackend(turns),
                   progress=progress)
    between = len(stamps) - 1
    cpu_ms = (cpu[1] - cpu[0]) * 1000 / between if len(cpu) == 2 else float("nan")
    return (stamps[0] - start) * 1000, (stamps[-1] - stamps[0]) * 1000 / between, cpu_ms


VARIANTS = {  # name: (zygote preload, Segment.to_dict as before the fix)
    "today": (DEFAULT_PRELOAD, False),
    "before the to_dict fix": (DEFAULT_PRELOAD, True),
    "no pyplot preloaded": (NO_PYPLOT, False),
}


async def overhead_rows(tmp: Path, problems: int, samples: int, concurrencies: list[int],
                        rounds: int) -> list[tuple[str, str, str]]:
    """Each variant at each concurrency, interleaved (A, B, C, A, B, C), best of rounds."""
    best: dict[tuple[int, str], tuple[float, float]] = {}
    startup = []
    for _ in range(rounds):
        for conc in concurrencies:
            for name, (preload, before) in VARIANTS.items():
                with segment_to_dict(before):
                    up, per, cpu = await overhead(tmp, problems, samples, conc, preload)
                startup.append(up)
                old = best.get((conc, name), (float("inf"), float("inf")))
                best[(conc, name)] = (min(old[0], per), min(old[1], cpu))
    rows = [("harness start-up (sandbox pool, grading workers, first sample)",
             f"{min(startup):.0f} ms", "")]
    for conc in concurrencies:
        per, cpu = best[(conc, "today")]
        rows.append((f"harness overhead per sample, steady state, concurrency {conc} (scripted "
                     "model, real sandbox, grading, store)", f"{per:.2f} ms",
                     f"CPU {cpu:.2f} ms/sample"))
        for name in list(VARIANTS)[1:]:
            alt_per, alt_cpu = best[(conc, name)]
            rows.append((f"  the same, {name}", f"{alt_per:.2f} ms",
                         f"CPU {alt_cpu:.2f} ms/sample (today: {per / alt_per:.2f}x wall, "
                         f"{cpu / alt_cpu:.2f}x CPU)"))
    rows.append(("  load average (1 min) at the end", f"{os.getloadavg()[0]:.1f}",
                 f"{os.cpu_count()} CPUs; best of {rounds} interleaved rounds"))
    return rows


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


async def main(quick: bool, model_root: Path | None, concurrencies: list[int],
               rounds: int) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows += await overhead_rows(tmp, 10 if quick else 100, 4, concurrencies, rounds)
        n = 8 if quick else 64
        base = None
        for conc in (() if model_root is None else (1, 4, 8) if quick else (1, 4, 16, 64)):
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
    parser.add_argument("--quick", action="store_true",
                        help="smaller (smoke run): 10 problems x 4 samples an overhead run, "
                             "8 samples a model row at concurrency 1, 4, 8")
    parser.add_argument("--model", type=Path, default=None, help=(
        "a grown tool-model directory (final/ and test.jsonl) to use instead of growing one"))
    parser.add_argument("--overhead-only", action="store_true",
                        help="only the overhead rows (no model is grown or loaded)")
    parser.add_argument("--overhead-concurrency", default="1,64",
                        help="comma-separated concurrencies of the overhead rows (default 1,64)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds of the overhead rows, best kept (default 3; 1 "
                             "with --quick)")
    args = parser.parse_args()
    quick = args.quick
    concs = [int(c) for c in args.overhead_concurrency.split(",") if c.strip()]
    rounds = args.rounds or (1 if quick else 3)
    root = None
    if not args.overhead_only:
        from agentmath.recipes.tool_model import TEST_MODEL, cached_tool_model

        # Built (or loaded from the cache) before the event loop: building runs its own.
        cache = Path.home() / ".cache" / "agentmath-bench"
        root = args.model or cached_tool_model(TEST_MODEL, cache)
    asyncio.run(main(quick, root, concs, rounds))
