"""Tests of agentmath inside verl: they run in verl's own environment, ``.venv-verl``
(``scripts/install_verl.sh``), as ``.venv-verl/bin/python -m pytest -q tests/verl``; the main
suite runs exactly that in a subprocess (tests/integration/test_verl_env.py). Under the main
venv (no verl) this folder collects nothing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

if importlib.util.find_spec("verl") is None:
    collect_ignore_glob = ["test_*.py"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MAIN_PYTHON = ROOT / ".venv" / "bin" / "python"


def _skip_or_fail(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    """agentmath's test model (tokenizer + weights), built and cached by the MAIN venv: its
    cache key includes the library versions, and .venv-verl's older transformers would make
    it build a second copy."""
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve() or not MAIN_PYTHON.exists():
        _skip_or_fail(f"{MAIN_PYTHON} is needed to locate the test model")
    done = subprocess.run([str(MAIN_PYTHON), "-m", "tests.fixtures.models"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("== test model ready: "))
    return Path(line.removeprefix("== test model ready: ").rsplit(" (", 1)[0])


@pytest.fixture(scope="session")
def tokenizer(tiny_dir: Path) -> Any:  # a transformers tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_dir))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """This folder's async tests share one event loop, the session's: the agent loop keeps one
    sandbox per event loop for the process's later episodes (as in a verl worker), so they
    share its sandbox (each episode still gets a fresh sandbox session) instead of starting
    a sandbox zygote (1-2 s here) per test, like the reference outputs' pool."""
    from pytest_asyncio import is_async_test

    marker = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if item.path.is_relative_to(HERE) and is_async_test(item):
            item.add_marker(marker, append=False)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def close_sandboxes() -> AsyncIterator[None]:
    """Close the agent loop's shared sandbox clients, and the reference outputs' pool, of the
    session's event loop at the end."""
    from agentmath.verl.settings import close_shared_sandboxes
    from tests.verl.fakes import close_reference_pools

    yield
    await close_shared_sandboxes()
    await close_reference_pools()
