"""The README is a product page and the reference pages hold reference.

Dated measurements and design history live in one results log, docs/benchmarks.md; the README
stays short with at most a few dated lines (its script-written results table says when it was
measured); every other docs page, and the library's docstrings and comments, carry no dates and
no "on this machine" run records. The one exception is docs/gpu.md's status table of what has run
on which hardware, whose rows are dated by design.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESULTS_LOG = ROOT / "docs" / "benchmarks.md"
#: Pages allowed dated lines, by page and heading: only the table rows under that heading.
DATED_TABLES = {"gpu.md": "## What has run on which hardware"}

DATE = re.compile(r"\b20\d{2}-\d{2}-\d{2}\b")
RUN_RECORD = re.compile(r"on this machine", re.IGNORECASE)


def dated_lines(text: str) -> list[str]:
    """The lines of ``text`` that carry a date such as 2026-11-28."""
    return [line for line in text.splitlines() if DATE.search(line)]


def undated_exceptions(page: Path) -> list[str]:
    """The dated lines of a docs page that no rule allows: every one, except the table rows
    under the page's status heading in :data:`DATED_TABLES`."""
    heading = DATED_TABLES.get(page.name)
    found, in_table = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("#"):
            in_table = line.strip() == heading
        if DATE.search(line) and not (in_table and line.startswith("|")):
            found.append(f"{page.name}:{number}: {line.strip()[:100]}")
    return found


def test_the_readme_is_at_most_120_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines"


def test_the_readme_has_at_most_three_dated_lines() -> None:
    dated = dated_lines(README.read_text(encoding="utf-8"))
    assert len(dated) <= 3, dated


def test_the_readme_links_both_papers() -> None:
    text = README.read_text(encoding="utf-8")
    assert "https://arxiv.org/abs/2512.20745" in text  # AgentMath
    assert "https://huggingface.co/Intel/deepmath-v1" in text  # DeepMath's model card


def test_the_readme_has_one_results_table_between_its_markers() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.count("<!-- results:begin -->") == 1
    assert text.count("<!-- results:end -->") == 1
    begin, end = text.index("<!-- results:begin -->"), text.index("<!-- results:end -->")
    assert begin < end
    table = [line for line in text[begin:end].splitlines() if line.startswith("|")]
    assert len(table) >= 3, "no table (header, rule and a row) between the results markers"
    assert "benchmarks/demo_seeds.py --readme" in text[end:], (
        "the line under the markers names the command that rewrites the table")


def test_reference_pages_carry_no_dates() -> None:
    pages = sorted(p for p in (ROOT / "docs").glob("*.md") if p != RESULTS_LOG)
    assert pages, "no docs pages found"
    found = [problem for page in pages for problem in undated_exceptions(page)]
    assert found == [], "dated lines outside the results log:\n" + "\n".join(found)


def test_the_allowed_status_table_exists() -> None:
    for name, heading in DATED_TABLES.items():
        lines = (ROOT / "docs" / name).read_text(encoding="utf-8").splitlines()
        assert heading in lines, f"docs/{name} lost its section {heading!r}"


def test_the_results_log_keeps_dated_entries() -> None:
    assert len(dated_lines(RESULTS_LOG.read_text(encoding="utf-8"))) > 0


def test_the_license_is_the_apache_license_2() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert "APPENDIX: How to apply the Apache License to your work." in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == {"text": "Apache-2.0"}


def test_the_library_carries_no_dates_or_machine_run_records() -> None:
    found = []
    for path in sorted((ROOT / "agentmath").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if DATE.search(line) or RUN_RECORD.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert found == [], "dates or run records in the library:\n" + "\n".join(found)
