"""`agentmath grow` end to end at toy scale: a model directory that loads, a summary, and
clear usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
pytest.importorskip("torch")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentmath.cli", "grow", *args],
                          capture_output=True, text=True, timeout=300)


def test_grow_two_formats_at_toy_scale(tmp_path: Path) -> None:
    out = tmp_path / "grown"
    proc = run_cli("--out", str(out), "--formats", "markdown,native", "--size", "nano",
                   "--steps", "3", "--train-problems", "12", "--set", "test_problems=4",
                   "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert set(summary["conversion"]) == {"markdown", "native"}
    assert sum(s["kept"] for s in summary["conversion"].values()) == 12
    assert summary["examples"]["kept"] == 12 and summary["config"]["steps"] == 3
    final = Path(summary["model_dir"])
    assert (final / "config.json").exists() and (final / "tokenizer.json").exists()
    assert len((out / "test.jsonl").read_text().splitlines()) == 4
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(final))
    assert tok.apply_chat_template([{"role": "user", "content": "q"}], tokenize=False)


@pytest.mark.parametrize(("args", "message"), [
    (["--formats", "latex"], "unknown format"),
    (["--size", "huge"], "unknown model size"),
    (["--steps", "0"], "steps"),
])
def test_grow_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run_cli("--out", str(tmp_path / "x"), *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "x").exists()  # nothing started
