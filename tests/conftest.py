"""Fixtures shared by every test tier (model, server and cluster fixtures live in
tests/fixtures), and how the suite splits over pytest-xdist workers."""

from __future__ import annotations

import os

import pytest

from tests.fixtures.models import tiny_model_dir
from tests.fixtures.ray_cluster import all_workers_ready
from tests.fixtures.vllm_server import (
    qwen3_vllm_server,
    vllm_server,
    vllm_server_handle,
    vllm_server_pair,
)

__all__ = ["all_workers_ready", "qwen3_vllm_server", "tiny_model_dir", "vllm_server",
           "vllm_server_handle", "vllm_server_pair"]

#: Fixtures whose server is started once per session: every test using one runs in the same
#: xdist worker, so a session under ``-n 2 --dist loadgroup`` (scripts/test.sh) starts each
#: server once, not once per worker.
_VLLM_FIXTURES = frozenset({"vllm_server", "vllm_server_handle", "vllm_server_pair",
                            "qwen3_vllm_server"})


def xdist_group_of(markers: set[str], fixtures: set[str]) -> str | None:
    """The worker group a test joins: ``vllm`` for the tests of a real vLLM server (one
    session server and its restarts), ``ray`` for the local Ray clusters (one at a time on
    the machine, as the clusters' 1-CPU nodes assume); None spreads the test freely."""
    if "vllm" in markers or fixtures & _VLLM_FIXTURES:
        return "vllm"
    if "ray" in markers:
        return "ray"
    return None


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist worker, torch and the processes it starts use one OpenMP thread unless told
    otherwise: two workers with one thread per core each oversubscribe a 2-core runner, and
    OpenMP's waiting threads spin on the cores the other worker needs."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")


# tryfirst: before pytest-xdist's own hook in the worker, which reads the groups off the marks
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(item.fixturenames) if isinstance(item, pytest.Function) else set()
        group = xdist_group_of({m.name for m in item.iter_markers()}, fixtures)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
