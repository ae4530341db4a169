"""The benchmarks run with the main install alone: none imports the test suite (the brief's
rule; the data a benchmark shares with a test lives under benchmarks/, and tests read it there).

Checked over the source's import statements, so that an import inside a function (where
``_dedup_hand.py`` once read its paraphrases from tests/fixtures) counts as well."""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def imported_modules(source: str) -> set[str]:
    """Every module named by an ``import`` or ``from ... import`` anywhere in ``source``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_imported_modules_sees_nested_imports() -> None:
    source = "import os\ndef f():\n    from tests.fixtures.x import Y\n    import tests\n"
    assert imported_modules(source) == {"os", "tests.fixtures.x", "tests"}


def test_no_benchmark_imports_the_tests() -> None:
    files = sorted(BENCHMARKS.rglob("*.py"))
    assert len(files) > 10
    offenders = {str(path.relative_to(BENCHMARKS)): sorted(bad) for path in files
                 if (bad := {m for m in imported_modules(path.read_text())
                             if m == "tests" or m.startswith("tests.")})}
    assert offenders == {}
