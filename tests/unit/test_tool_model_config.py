"""The tool-model recipe's config: formats and per-format prompts are checked up front."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentmath.recipes.tool_model import ToolModelConfig
from agentmath.synth.config import NATIVE
from agentmath.train.grow import corpus_texts


def test_defaults_and_every_format_are_accepted() -> None:
    assert ToolModelConfig().formats == ["code_interpreter"]
    cfg = ToolModelConfig(formats=["markdown", "tool_call", "code_interpreter",
                                   "openai_tools", NATIVE])
    assert len(cfg.formats) == 5


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"formats": ["latex"]}, "unknown format"),
    ({"formats": ["markdown", "markdown"]}, "must not repeat"),
    ({"formats": []}, "at least 1"),
    ({"formats": ["markdown"], "system_prompts": {"tool_call": "x"}}, "not trained"),
    ({"steps": 0}, "greater than or equal to 1"),
    ({"model_size_typo": "nano"}, "Extra inputs"),
])
def test_bad_configs_say_what_is_wrong(kwargs: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ToolModelConfig(**kwargs)


def test_corpus_covers_text_and_chat_records() -> None:
    text = {"messages": [{"role": "user", "content": "q1"}],
            "completion": [{"text": "a", "train": True}, {"text": "b", "train": False}]}
    chat = {"messages": [{"role": "user", "content": "q2"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"function": {"name": "python", "arguments": "{}"}}]}],
            "tools": [{"type": "function"}]}
    texts = corpus_texts([text, chat])
    assert "q1" in texts and "ab" in texts and "q2" in texts
    assert any('"python"' in t for t in texts) and '{"type": "function"}' in texts


def test_unknown_model_size_is_rejected_up_front() -> None:
    with pytest.raises(ValidationError, match="unknown model size 'huge'"):
        ToolModelConfig(model_size="huge")


def test_cached_tool_model_keeps_a_copy_grown_meanwhile(tmp_path, monkeypatch) -> None:
    """Two processes growing the same model (two benchmarks, two test workers): the one that
    finishes second uses the first one's finished directory instead of failing its rename."""
    from agentmath.recipes import tool_model

    def first_finishes(cfg, out, stage, progress):
        (out / "tool_model.json").write_text('{"who": "first"}')

    monkeypatch.setattr(tool_model, "build_tool_model", first_finishes)
    first = tool_model.cached_tool_model(ToolModelConfig(), tmp_path, stage=lambda _: None)
    (first / "tool_model.json").rename(tmp_path / "aside.json")  # not finished to the next one

    said: list[str] = []

    def second_grows(cfg, out, stage, progress):
        (tmp_path / "aside.json").rename(first / "tool_model.json")  # the first one finishes
        (out / "tool_model.json").write_text('{"who": "second"}')

    monkeypatch.setattr(tool_model, "build_tool_model", second_grows)
    again = tool_model.cached_tool_model(ToolModelConfig(), tmp_path, stage=said.append)
    assert again == first
    assert (again / "tool_model.json").read_text() == '{"who": "first"}'
    assert any("grown meanwhile" in line for line in said)
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no staging left behind
