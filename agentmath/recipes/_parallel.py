"""Independent CPU jobs side by side, one per core (the demo's two SFTs, two GRPO runs, evals).

On a small CPU machine torch's intra-op threads scale badly for tiny models: measured here
(2 vCPUs, the demo's micro model), one SFT step took 0.8 s with torch's 2 threads and 0.6 s
with one thread while another job used the other core. So jobs that do not depend on each other
run in spawned processes with ``cores // jobs`` threads each instead of one after another.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def run_parallel(fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]],
                 workers: int | None = None) -> list[Any]:
    """``[fn(*job) for job in jobs]``, computed in up to ``workers`` (default: the CPU count)
    spawned processes; results in job order. ``fn`` must be importable (module level). One
    worker, or one job, runs in this process."""
    cores = os.cpu_count() or 1
    workers = max(1, min(len(jobs), workers or cores))
    if workers == 1:
        return [fn(*job) for job in jobs]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                             initializer=_init_worker,
                             initargs=(max(1, cores // workers),)) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        return [f.result() for f in futures]
