"""docs/cli.md is what the CLI says about itself (agentmath/cli/docs.py writes it)."""

from __future__ import annotations

import re
from pathlib import Path

from agentmath.cli.docs import render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_is_generated_from_the_cli() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/cli.md is stale: regenerate it with `python -m agentmath.cli.docs > docs/cli.md`")


def test_the_page_names_every_command_and_no_terminal_markup() -> None:
    page = render()
    for command in ("demo", "eval", "solve", "sft", "rl", "synth", "report", "grade",
                    "decontam", "dedup", "grow", "example", "datasets", "sandbox exec",
                    "sandbox info", "sandbox serve"):
        assert f"## `agentmath {command}`" in page, command
    assert "\x1b[" not in page and "╭" not in page and "<bool>" not in page
    assert not re.search(r"20\d\d-\d\d-\d\d", page)  # help texts carry no dates
