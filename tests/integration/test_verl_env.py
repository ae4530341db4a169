"""agentmath inside verl: the tests/verl suite, run in verl's own environment.

verl 0.9.1 pins an older transformers than the main venv, so its tests run in ``.venv-verl``
(``scripts/install_verl.sh``, which scripts/test.sh runs) as
``.venv-verl/bin/python -m pytest -q tests/verl``, in a subprocess. Without ``.venv-verl`` this
test skips, unless ``CI`` is set (CI builds it): then it fails.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"


def test_verl_suite_passes_in_its_own_env() -> None:
    if not VERL_PYTHON.exists():
        message = f"{VERL_PYTHON} is missing: run bash scripts/install_verl.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(VERL_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/verl"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=280, check=False)
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    summary = re.search(r"(\d+) passed", done.stdout)
    assert summary is not None and int(summary.group(1)) >= 25, tail
    assert not re.search(r"\d+ (failed|errors?|skipped)", done.stdout), tail  # all ran
