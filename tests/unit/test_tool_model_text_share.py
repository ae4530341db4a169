"""The tool model's text/tool mixture (``ToolModelConfig.text_share``): a seeded share of the
training problems become text records in the protocol of the format they were dealt to, under
the same prompt as that format's tool records; the default (0) changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from typing import Any

import pytest
from pydantic import ValidationError

from agentmath.agent.prompts import CHAT_SYSTEM_PROMPT, build_messages
from agentmath.formats import get_format
from agentmath.formats.openai_tools import OPENAI_TOOLS, tool_spec
from agentmath.recipes.tool_model import TEST_MODEL, ToolModelConfig, config_key_data
from agentmath.synth.config import NATIVE
from agentmath.synth.records import build_record
from agentmath.synth.tool_records import text_record, tool_records
from agentmath.tasks.synthetic import make_problems, text_problem_ids


@pytest.fixture(scope="module")
def problems() -> list[Any]:
    train, _ = make_problems(0, 400, 10, 3)
    return train


def test_share_is_seeded_and_close_to_asked(problems: list[Any]) -> None:
    ids = text_problem_ids(problems, 0.7, seed=0)
    assert 0.6 < len(ids) / len(problems) < 0.8
    assert ids == text_problem_ids(problems, 0.7, seed=0)
    assert ids != text_problem_ids(problems, 0.7, seed=1)
    assert text_problem_ids(problems, 0.0, seed=0) == set()
    assert text_problem_ids(problems, 1.0, seed=0) == {p.id for p in problems}
    # one draw per problem in order: a larger share keeps the smaller share's problems
    assert text_problem_ids(problems, 0.3, seed=0) <= ids


def test_native_text_record_has_the_native_tool_records_prompt(problems: list[Any]) -> None:
    task = problems[0]
    rec = text_record(task, NATIVE)
    tool_rec = build_record(task, [], None, system_prompt=None, max_output_chars=1000)
    assert rec["messages"][:2] == tool_rec["messages"][:2]  # system + user
    assert rec["messages"][0]["content"] == CHAT_SYSTEM_PROMPT
    assert rec["tools"] == tool_rec["tools"] == [tool_spec()]
    assert rec["messages"][2:] == [{"role": "assistant", "content": task.solution}]
    assert "tool_calls" not in rec["messages"][2] and "completion" not in rec
    assert rec["answer"] == task.answer and "\\boxed{" in task.solution
    custom = text_record(task, NATIVE, "Be brief.")
    assert custom["messages"] == [*build_messages(task.problem, OPENAI_TOOLS, "Be brief."),
                                  {"role": "assistant", "content": task.solution}]


@pytest.mark.parametrize("name", ["openai_tools", "code_interpreter"])
def test_text_format_record_has_the_formats_prompt(problems: list[Any], name: str) -> None:
    task = problems[1]
    rec = text_record(task, name)
    assert rec["messages"] == build_messages(task.problem, get_format(name))
    assert rec["completion"] == [{"text": task.solution, "train": True}]
    assert text_record(task, name, "X")["messages"][0] == {"role": "system", "content": "X"}


def test_tool_records_deal_text_records_in_each_formats_protocol(
        problems: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The dealing is unchanged (problem i in format i % n); text problems skip injection."""
    from agentmath import sandbox
    from agentmath.synth import inject as inject_mod

    injected: list[list[str]] = []

    async def fake_inject(tasks: Any, *_: Any, native: bool = False, **__: Any) -> Any:
        injected.append([t.id for t in tasks])
        report = inject_mod.ConversionReport()
        report.records = [{"id": t.id, "tool": True, "native": native} for t in tasks]
        return report

    monkeypatch.setattr(inject_mod, "inject", fake_inject)
    monkeypatch.setattr(sandbox, "SandboxPool", lambda *a, **k: contextlib.nullcontext())
    tasks = problems[:40]
    text_ids = text_problem_ids(tasks, 0.5, seed=3)
    records, stats = asyncio.run(tool_records(tasks, ["openai_tools", NATIVE],
                                              text_ids=text_ids))
    assert [r["id"] for r in records] == [p.id for p in tasks[0::2]] + [p.id for p in tasks[1::2]]
    assert injected == [[p.id for p in tasks[k::2] if p.id not in text_ids] for k in (0, 1)]
    for i, (rec, name) in enumerate(zip(records, ["openai_tools"] * 20 + [NATIVE] * 20,
                                        strict=True)):
        task = (tasks[0::2] + tasks[1::2])[i]
        if task.id in text_ids:
            assert rec == text_record(task, name)
        else:
            assert rec["tool"] and rec["native"] == (name == NATIVE)
    assert sum(s.text or 0 for s in stats.values()) == len(text_ids)
    records0, stats0 = asyncio.run(tool_records(tasks, ["openai_tools"]))
    assert all(r.get("tool") for r in records0) and stats0["openai_tools"].text is None


def _old_key(cfg: ToolModelConfig) -> str:
    """The cache key as computed before ``text_share`` and ``copy_steps`` existed (the whole
    dump)."""
    data = cfg.model_dump(mode="json")
    data.pop("text_share")
    data.pop("copy_steps")
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def test_default_keeps_the_cache_key() -> None:
    assert ToolModelConfig().text_share == 0.0 and ToolModelConfig().copy_steps == 0
    for cfg in (ToolModelConfig(), TEST_MODEL):
        assert "text_share" not in config_key_data(cfg)
        assert "copy_steps" not in config_key_data(cfg)
        key = hashlib.sha256(json.dumps(config_key_data(cfg), sort_keys=True)
                             .encode()).hexdigest()[:12]
        assert key == _old_key(cfg)
    assert _old_key(TEST_MODEL) == "70a71e21f839"  # the key before the field existed
    mixed = TEST_MODEL.model_copy(update={"text_share": 0.7})
    assert config_key_data(mixed)["text_share"] == 0.7
    warmed = TEST_MODEL.model_copy(update={"copy_steps": 300})
    assert config_key_data(warmed)["copy_steps"] == 300


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_share_bounds(share: float) -> None:
    with pytest.raises(ValidationError, match="text_share"):
        ToolModelConfig(text_share=share)
