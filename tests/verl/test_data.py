"""agentmath tasks as verl dataset rows and back (agentmath.verl.data)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from agentmath.errors import DataError
from agentmath.tasks import Task
from agentmath.verl.data import main, task_from_fields, to_verl_row


def test_rows_round_trip_and_fallbacks() -> None:
    task = Task("p7", "What is 6 * 7?", "42")
    row = to_verl_row(task, index=3, split="test")
    back = task_from_fields({**row, "raw_prompt": row["prompt"], "index": 3})
    assert (back.id, back.problem, back.answer) == ("p7", "What is 6 * 7?", "42")
    foreign = {"raw_prompt": [{"role": "system", "content": "S"},
                              {"role": "user", "content": "Q?"}],
               "reward_model": {"ground_truth": 5}, "extra_info": {}, "index": 9}
    plain = task_from_fields(foreign)  # a dataset not written by agentmath
    assert (plain.id, plain.problem, plain.answer) == ("9", "Q?", "5")
    with pytest.raises(DataError, match="gold answer"):
        task_from_fields({**foreign, "reward_model": {}})
    with pytest.raises(DataError, match="no problem"):
        task_from_fields({"raw_prompt": [], "reward_model": {"ground_truth": "1"}})


def test_cli_writes_verl_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "tasks.jsonl"
    source.write_text('{"id": "a", "problem": "1+1?", "answer": "2"}\n'
                      '{"id": "b", "problem": "2+2?", "answer": "4"}\n')
    out = tmp_path / "verl" / "train.parquet"
    assert main(["--dataset", str(source), "--out", str(out), "--limit", "1"]) == 0
    assert "wrote 1 rows" in capsys.readouterr().out
    frame = pd.read_parquet(out)
    assert frame["agent_name"].tolist() == ["agentmath"]
    assert frame["reward_model"][0]["ground_truth"] == "2"
    assert list(frame["prompt"][0]) == [{"role": "user", "content": "1+1?"}]
