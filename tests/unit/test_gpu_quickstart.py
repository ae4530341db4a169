"""docs/gpu.md, the GPU quickstart: its estimates table is what the cost model says of today's
recipes (``python -m agentmath.recipes.estimates``), and every recipe has a row and a command."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from agentmath.recipes.estimates import main

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "gpu.md"


def _generated() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main([str(ROOT / "configs")])
    return out.getvalue()


def test_the_estimates_table_is_current() -> None:
    text = PAGE.read_text()
    begin, end = "<!-- estimates:begin -->\n", "<!-- estimates:end -->"
    shown = text[text.index(begin) + len(begin):text.index(end)]
    assert shown == _generated(), ("docs/gpu.md's estimates are stale: regenerate them with "
                                   "python -m agentmath.recipes.estimates")


def test_every_priced_recipe_has_an_estimate_and_a_command() -> None:
    text = PAGE.read_text()
    for kind in ("eval", "synth", "sft", "rl"):
        for recipe in sorted((ROOT / "configs" / kind).glob("*.toml")):
            name = f"configs/{kind}/{recipe.name}"
            assert f"| `{name}` |" in _generated(), name
            assert text.count(name) >= 2, f"{name}: no command in docs/gpu.md"
