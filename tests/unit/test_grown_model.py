"""The grown tool model's summary (OUT/tool_model.json): one writer, one typed reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentmath.errors import DataError
from agentmath.recipes.tool_model import SUMMARY_FILE, GrownModel, ToolModelConfig
from agentmath.synth.tool_records import Conversion


def _summary() -> GrownModel:
    return GrownModel(model_dir="/m/final", test="/m/test.jsonl",
                      conversion={"markdown": Conversion(10, {"answer": 2}, 1.5),
                                  "native": Conversion(12, {}, 0.5, text=3)},
                      final_loss=0.25, examples={"total": 25, "kept": 25, "truncated": 0,
                                                 "dropped": 0},
                      config=ToolModelConfig(formats=["markdown", "native"], steps=3),
                      seconds=12.5)


def test_the_summary_reads_back_as_written(tmp_path: Path) -> None:
    summary = _summary()
    summary.write(tmp_path)
    assert GrownModel.read(tmp_path) == summary
    data = json.loads((tmp_path / SUMMARY_FILE).read_text())
    # the grow command's --json and the file keep their keys
    assert set(data) == {"model_dir", "test", "conversion", "final_loss", "examples",
                         "config", "seconds"}
    assert data["conversion"]["native"] == {"kept": 12, "dropped": {}, "seconds": 0.5,
                                            "text": 3}
    assert "text" not in data["conversion"]["markdown"]  # no text share: no count


def test_a_summary_written_before_the_record_existed_reads(tmp_path: Path) -> None:
    # the dict build_tool_model wrote before GrownModel: the same keys, a plain config dump
    old = {"model_dir": "/m/final", "test": "/m/test.jsonl",
           "conversion": {"code_interpreter": {"kept": 5, "dropped": {"ast": 1},
                                               "seconds": 0.3}},
           "final_loss": None, "examples": {"total": 5, "kept": 5, "truncated": 0,
                                            "dropped": 0},
           "config": ToolModelConfig().model_dump(), "seconds": 4.0}
    (tmp_path / SUMMARY_FILE).write_text(json.dumps(old))
    read = GrownModel.read(tmp_path)
    assert read.final_loss is None and read.config == ToolModelConfig()
    assert read.conversion["code_interpreter"] == Conversion(5, {"ast": 1}, 0.3)


@pytest.mark.parametrize(("text", "words"), [
    (None, "cannot read"),
    ("{not json", "not a grown model's summary"),
    ('{"model_dir": "x"}', "not a grown model's summary"),
    ('[1, 2]', "not a grown model's summary"),
])  # fmt: skip
def test_a_missing_or_malformed_summary_names_the_file(tmp_path: Path, text: str | None,
                                                       words: str) -> None:
    if text is not None:
        (tmp_path / SUMMARY_FILE).write_text(text)
    with pytest.raises(DataError) as err:
        GrownModel.read(tmp_path)
    assert str(err.value).startswith(str(tmp_path / SUMMARY_FILE)) and words in str(err.value)
