"""The tool-model recipe's config: formats and per-format prompts are checked up front."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentmath.recipes.tool_model import NATIVE, ToolModelConfig, corpus_texts


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
