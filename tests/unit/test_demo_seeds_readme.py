"""benchmarks/demo_seeds.py --readme: the README's results table is written from the seeds'
demo summaries (a row per seed, a mean ± sd row), between its two markers, and a README
without them is refused with a message naming them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture()
def seeds_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its _common
    import importlib

    return importlib.import_module("demo_seeds")


def _summary(tool: float, grpo: float, pass_at_8: float, seconds: float) -> dict[str, Any]:
    def row(name: str, acc: float, sampled: float) -> dict[str, Any]:
        return {"model": name, "accuracy": acc, "accuracy_ci95": [acc - 0.02, acc + 0.02],
                "sampled_accuracy": sampled, "mean_model_tokens": 100.0,
                "tool_calls_per_sample": 1.0, "failed_tool_calls_per_sample": 0.0, "n": 300}

    return {"models": [row("text-only", 0.0, 0.01), row("tool", tool, 0.2),
                       row("tool + grpo", grpo, grpo - 0.1),
                       row("tool + grpo (unmasked)", 0.1, 0.05)],
            "sampling": {"samples": 8, "temperature": 1.0, "problems": 100, "split": "test"},
            "headroom": {"split": "validation", "greedy_pass@1": tool, "k": 8,
                         "temperature": 1.0, "pass@8": pass_at_8, "sampled_pass@1": 0.2,
                         "sampled_tool_calls_per_sample": 1.0, "problems": 100},
            "starts": [], "seconds": seconds}


def test_the_table_has_a_row_per_seed_and_a_mean_row(seeds_module: Any) -> None:
    result = seeds_module.summarize({0: _summary(0.0, 0.9, 0.8, 300.0),
                                     1: _summary(0.1, 0.7, 0.6, 360.0)})
    table = seeds_module.readme_table(result).splitlines()
    assert table[0] == ("| seed | headroom (validation): greedy / pass@8 | tool: greedy / "
                        "sampled | tool + GRPO: greedy / sampled | tool + GRPO unmasked: "
                        "greedy / sampled | text-only: greedy / sampled | wall time |")
    assert table[2] == ("| 0 | 0.0% / 80.0% | 0.0% / 20.0% | 90.0% / 80.0% | 10.0% / 5.0% "
                        "| 0.0% / 1.0% | 5.0 min |")
    assert table[4] == ("| mean ± sd | 5.0 ± 7.1% / 70.0 ± 14.1% | 5.0 ± 7.1% / 20.0 ± 0.0% "
                        "| 80.0 ± 14.1% / 70.0 ± 14.1% | 10.0 ± 0.0% / 5.0 ± 0.0% "
                        "| 0.0 ± 0.0% / 1.0 ± 0.0% | 5.5 ± 0.7 min |")
    assert "8 samples at temperature 1.0 on the first 100" in table[-1]
    assert "`python benchmarks/demo_seeds.py --seeds 0 1 --readme`" in table[-1]
    assert result["spread_points"]["tool + grpo (sampled)"]["mean"] == pytest.approx(70.0)


def test_the_readme_is_rewritten_between_its_markers_only(seeds_module: Any,
                                                          tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- results:begin -->\nold table\n<!-- results:end -->\n\nafter\n")
    seeds_module.write_readme(readme, "| new |")
    assert readme.read_text() == ("# x\n\n<!-- results:begin -->\n| new |\n"
                                  "<!-- results:end -->\n\nafter\n")
    seeds_module.write_readme(readme, "| newer |")  # again: the same place
    assert readme.read_text().count("results:begin") == 1 and "| new |" not in \
        readme.read_text()


def test_a_readme_without_markers_is_refused_before_any_seed_runs(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no table here\n")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "demo_seeds.py"), "--seeds", "0",
                           "--out", str(tmp_path / "runs"), "--readme", str(readme)],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 1
    assert "<!-- results:begin -->" in done.stderr and "<!-- results:end -->" in done.stderr
    assert "Traceback" not in done.stderr and readme.read_text() == "# no table here\n"
    assert not (tmp_path / "runs").exists()  # no demo ran
