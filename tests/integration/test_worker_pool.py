"""The demo's worker pool (agentmath/recipes/_parallel.py): one pool of spawned workers serves
every stage of a recipe, results come back in job order, and a one-core machine runs the jobs
in the calling process."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from agentmath.recipes._parallel import run_parallel, worker_pool

pytestmark = [pytest.mark.integration]


def test_one_pool_serves_every_stage_with_results_in_job_order() -> None:
    pytest.importorskip("torch", reason="the workers set torch's threads")
    with mock.patch("os.cpu_count", return_value=2), worker_pool(2, preload=("json",)) as pool:
        assert pool is not None
        first = run_parallel(os.getpid, [(), ()], pool=pool)
        second = run_parallel(os.getpid, [(), (), ()], pool=pool)
        squares = run_parallel(pow, [(n, 2) for n in range(6)], pool=pool)
    workers = set(first) | set(second)
    assert os.getpid() not in workers  # the jobs ran in spawned processes
    assert len(workers) <= 2  # ... the same two for both stages: no new process per stage
    assert squares == [n * n for n in range(6)]  # in job order, whoever ran them


def test_a_one_core_machine_runs_the_jobs_here() -> None:
    with mock.patch("os.cpu_count", return_value=1), worker_pool(2) as pool:
        assert pool is None
        assert run_parallel(os.getpid, [(), ()], pool=pool) == [os.getpid()] * 2
