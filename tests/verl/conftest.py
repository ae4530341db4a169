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

if importlib.util.find_spec("verl") is None:
    collect_ignore_glob = ["test_*.py"]

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.fixture
async def close_sandboxes() -> AsyncIterator[None]:
    """Close the agent loop's shared sandbox clients of this test's event loop afterwards."""
    from agentmath.verl.settings import close_shared_sandboxes

    yield
    await close_shared_sandboxes()
