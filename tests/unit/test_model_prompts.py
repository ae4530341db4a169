"""The system prompts stored beside a trained model (agentmath.models.prompts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmath.errors import DataError
from agentmath.models.prompts import FILE, TrainedPrompts, trained_prompt


def test_written_prompts_read_back_per_format(tmp_path: Path) -> None:
    stored = TrainedPrompts({"code_interpreter": "Use <code>.", "markdown": "Use ```python."})
    path = stored.write(tmp_path)
    assert path == tmp_path / FILE
    assert TrainedPrompts.read(tmp_path) == stored
    assert trained_prompt(tmp_path, "markdown") == "Use ```python."
    assert trained_prompt(tmp_path, "tool_call") is None  # not trained with one for it
    assert stored.with_prompt("markdown", "new").get("markdown") == "new"
    assert stored.get("markdown") == "Use ```python."  # with_prompt copies


def test_a_model_without_the_file_or_a_served_name_has_none(tmp_path: Path) -> None:
    assert TrainedPrompts.read(tmp_path) is None
    assert trained_prompt("Qwen/Qwen3-8B", "code_interpreter") is None
    assert trained_prompt(tmp_path / "absent", "code_interpreter") is None


@pytest.mark.parametrize(("text", "words"), [
    ("{not json", "not valid JSON"),
    ('{"prompts": ["a"]}', "field 'prompts'"),
    ('{"prompts": {"code_interpreter": 3}}', "field 'prompts'"),
    ('["prompts"]', "field 'prompts'"),
])  # fmt: skip
def test_a_malformed_file_is_an_error_naming_it(tmp_path: Path, text: str,
                                                words: str) -> None:
    (tmp_path / FILE).write_text(text)
    with pytest.raises(DataError) as err:
        TrainedPrompts.read(tmp_path)
    assert str(err.value).startswith(str(tmp_path / FILE)) and words in str(err.value)
