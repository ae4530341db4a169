"""The package layers hold (the import-linter contracts in pyproject.toml, drawn in
docs/architecture.md), and an import that breaks them fails with the offending line, including
an import made inside a function."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the ``agentmath`` found in ``cwd`` (its own pyproject.toml)."""
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} not found: install the dev extra (pip install -e '.[dev]')")
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", "pyproject.toml"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_contracts_hold() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_every_package_has_a_layer() -> None:
    """A new package or top-level module is placed in the layers, not left outside them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["id"] == "layers")["layers"]
    placed = {name.strip().strip("()") for layer in layers for name in layer.split("|")}
    found = {p.stem if p.is_file() else p.name for p in (ROOT / "agentmath").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert found - placed == set(), "add these to the layers in pyproject.toml"


def _plant(tmp_path: Path, module: str, code: str) -> tuple[Path, int]:
    """A copy of the package with ``code`` appended to ``module`` (a path under agentmath/);
    the copy's root and the line number of the code's first import."""
    shutil.copytree(ROOT / "agentmath", tmp_path / "agentmath",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    text = target.read_text()
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    target.write_text(text.rstrip("\n") + "\n\n\n" + code)
    return tmp_path, lines + 3 + next(i for i, line in enumerate(code.splitlines())
                                      if "import" in line)


PLANTS = {
    # An upward import hidden inside a function: grading sits far below rl.
    "upward": ("agentmath/grading/extract.py",
               "def _planted() -> None:\n    from agentmath.rl import config  # noqa: F401\n",
               "agentmath.grading.extract -> agentmath.rl.config (l.{line})"),
    # The library reaching into the test suite.
    "tests": ("agentmath/backends/scripted.py",
              "def _planted() -> None:\n    from tests import conftest  # noqa: F401\n",
              "agentmath.backends.scripted -> tests (l.{line})"),
    # A cycle inside one package: the trajectory record importing the episode that fills it.
    "cycle": ("agentmath/agent/trajectory.py",
              "def _planted() -> None:\n    from agentmath.agent import episode  # noqa: F401\n",
              ".trajectory -> .episode"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_import_fails_and_is_named(tmp_path: Path, plant: str) -> None:
    module, code, expected = PLANTS[plant]
    copy, line = _plant(tmp_path, module, code)
    done = _lint(copy)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout
    assert expected.format(line=line) in done.stdout, done.stdout
