"""Every file under configs/ is run end to end by some test: a recipe no test runs can rot.

A test that runs a recipe says so with ``@pytest.mark.recipe("configs/<dir>/<file>")`` (on the
test, or on a ``pytest.param``); this test reads those marks from the test sources and fails on a
recipe that none names, and on a mark that names no file.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_MARK_RE = re.compile(r"mark\.recipe\(\s*[\"']([^\"']+)[\"']")


def _recipes() -> set[str]:
    return {path.relative_to(ROOT).as_posix() for path in (ROOT / "configs").rglob("*")
            if path.is_file() and path.suffix in {".toml", ".yaml", ".yml", ".json"}}


def _marked() -> dict[str, list[str]]:
    marked: dict[str, list[str]] = {}
    for source in (ROOT / "tests").rglob("test_*.py"):
        if source.resolve() == Path(__file__).resolve():  # its own examples below
            continue
        for name in _MARK_RE.findall(source.read_text()):
            marked.setdefault(name, []).append(source.relative_to(ROOT).as_posix())
    return marked


def test_every_recipe_is_run_by_a_test() -> None:
    unrun = sorted(_recipes() - set(_marked()))
    assert not unrun, (f"no test runs these recipes (mark the test that does with "
                       f"@pytest.mark.recipe(PATH)): {unrun}")


def test_every_recipe_mark_names_a_file() -> None:
    stale = {name: files for name, files in _marked().items() if name not in _recipes()}
    assert not stale, f"recipe marks naming no file under configs/: {stale}"


def test_the_mark_is_read_from_test_sources() -> None:
    # The reader itself: a mark in a pytest.param and one on a function are both found.
    text = ('pytest.param("a", marks=pytest.mark.recipe("configs/x/a.toml"))\n'
            "@pytest.mark.recipe('configs/x/b.yaml')\n")
    assert _MARK_RE.findall(text) == ["configs/x/a.toml", "configs/x/b.yaml"]
