"""benchmarks/demo_vs_old.py takes the commit to compare with as an option, and a commit git
does not know is a one-line error before any demo runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_old_commit_is_an_option() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "demo_vs_old.py"), "--help"],
                          capture_output=True, text=True, check=True, timeout=60)
    assert "--old REV" in done.stdout and "ff79a7b" in done.stdout
    assert "--max-ratio" in done.stdout and "--max-minutes" in done.stdout


def test_an_unknown_commit_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "demo_vs_old.py"), "--old",
                           "no-such-rev-0000", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 1
    assert "--old no-such-rev-0000: no worktree of it" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out" / "demo-old").exists()
