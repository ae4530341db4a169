"""Independent CPU jobs side by side, one per core (the demo's two SFTs, two GRPO runs, evals).

On a small CPU machine torch's intra-op threads scale badly for tiny models: one SFT step of
the demo's model is faster on one thread beside another job than on two threads alone. So jobs
that do not depend on each other run in spawned processes with ``cores // jobs``
threads each instead of one after another.

A recipe with several such stages keeps one pool of workers for all of them
(:func:`worker_pool`): a spawned process pays its interpreter start and the import of torch,
transformers and the library (seconds) once, while the recipe prepares its data,
instead of once per stage on the critical path.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Any, TypeVar

T = TypeVar("T")


def _init_worker(threads: int, preload: Sequence[str] = ()) -> None:
    import torch

    torch.set_num_threads(threads)
    for module in preload:
        importlib.import_module(module)


def _ready() -> int:
    return os.getpid()


@contextmanager
def worker_pool(workers: int, preload: Sequence[str] = ()) -> Iterator[ProcessPoolExecutor | None]:
    """A pool of ``workers`` spawned processes (at most the CPU count; ``cores // workers``
    torch threads each), started now and importing ``preload`` in the background, for
    :func:`run_parallel` calls that follow; None on a one-core machine (jobs then run in this
    process). Jobs run one after another in a worker, so a job must not rely on a fresh
    interpreter (each seeds its own RNGs and builds its own models)."""
    cores = os.cpu_count() or 1
    workers = max(1, min(workers, cores))
    if workers == 1:
        yield None
        return
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                             initializer=_init_worker,
                             initargs=(max(1, cores // workers), tuple(preload))) as pool:
        for _ in range(workers):  # a spawn pool starts a process per waiting task
            pool.submit(_ready)
        yield pool


def run_parallel(fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]],
                 workers: int | None = None,
                 pool: ProcessPoolExecutor | None = None) -> list[Any]:
    """``[fn(*job) for job in jobs]``, computed in ``pool`` when given, else in a pool of up
    to ``workers`` (default: the CPU count) made for this call; results in job order. ``fn``
    must be importable (module level). One worker, or one job, runs in this process."""
    if pool is None:
        with worker_pool(min(len(jobs), workers or os.cpu_count() or 1)) as own:
            if own is None:
                return [fn(*job) for job in jobs]
            return run_parallel(fn, jobs, pool=own)
    futures = [pool.submit(fn, *job) for job in jobs]
    return [f.result() for f in futures]


def submit(pool: ProcessPoolExecutor | None, fn: Callable[..., T], *args: Any) -> Future[T]:
    """``fn(*args)`` queued in ``pool`` (its first free worker runs it), for a recipe that
    starts a job as soon as what it needs is ready; without a pool (a one-core machine) it
    runs now, in this process, and the future is done."""
    if pool is not None:
        return pool.submit(fn, *args)
    done: Future[T] = Future()
    try:
        done.set_result(fn(*args))
    except Exception as exc:  # noqa: BLE001 - handed to the caller through the future
        done.set_exception(exc)
    return done
