"""SFT on native tool-calling conversations (agentmath.train.chat_records): the assistant turns
(their tool calls and end-of-turn token included) are trained on; the system and user turns,
tool results and the template's glue are masked; malformed records are named precisely."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from agentmath.errors import DataError  # noqa: E402
from agentmath.formats.openai_tools import tool_spec  # noqa: E402
from agentmath.models.tiny import build_tokenizer  # noqa: E402
from agentmath.train.chat_records import chat_pieces  # noqa: E402
from agentmath.train.sft import IGNORE_INDEX, load_examples, tokenize_example  # noqa: E402


def _call(code: str, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": "python", "arguments": json.dumps({"code": code})}}


RECORD: dict[str, Any] = {
    "id": "native-1",
    "messages": [
        {"role": "system", "content": "Solve the problem."},
        {"role": "user", "content": "What is 123 * 456 + 1?"},
        {"role": "assistant", "content": "I compute the product.",
         "tool_calls": [_call("x = 123 * 456\nprint(x)", "call_0")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "56088"},
        {"role": "assistant", "content": "The answer is \\boxed{56089}."},
    ],
    "tools": [tool_spec()],
    "answer": "56089",
}


@pytest.fixture(scope="module")
def tok() -> Any:
    corpus = [m["content"] for m in RECORD["messages"]] + [json.dumps(tool_spec())] * 3
    return build_tokenizer(corpus * 20, vocab_size=400)


def _rendered(tok: Any, record: dict[str, Any]) -> str:
    return str(tok.apply_chat_template(record["messages"], tools=record["tools"],
                                       tokenize=False))


def test_pieces_cover_the_rendered_conversation_and_train_only_assistant_turns(tok: Any) -> None:
    pieces = chat_pieces(tok, RECORD)
    assert "".join(text for text, _ in pieces) == _rendered(tok, RECORD)
    trained = [text for text, train in pieces if train]
    assert len(trained) == 2  # the two assistant turns
    assert trained[0].startswith("I compute the product.") and "<tool_call>" in trained[0]
    assert '"code": "x = 123 * 456' in trained[0].replace("\\n", "\n")
    assert all(text.endswith(tok.eos_token) for text in trained)  # end of turn is learned
    masked = "".join(text for text, train in pieces if not train)
    assert "56088" in masked and "What is 123 * 456 + 1?" in masked and '"python"' in masked


def test_labels_mask_tool_results_and_follow_the_ids(tok: Any) -> None:
    ids, labels = tokenize_example(tok, RECORD, max_length=4096)
    assert len(ids) == len(labels)
    assert all(lab in (IGNORE_INDEX, i) for i, lab in zip(ids, labels, strict=True))
    trained_text = tok.decode([i for i, lab in zip(ids, labels, strict=True)
                               if lab != IGNORE_INDEX])
    assert "56088" not in trained_text and "boxed{56089}" in trained_text
    assert tok.eos_token_id in [lab for lab in labels if lab != IGNORE_INDEX]


def test_changing_the_tool_result_changes_no_trained_label(tok: Any) -> None:
    other = copy.deepcopy(RECORD)
    other["messages"][3]["content"] = "99999999 (a different tool output)"
    _, labels_a = tokenize_example(tok, RECORD, max_length=4096)
    _, labels_b = tokenize_example(tok, other, max_length=4096)
    assert [x for x in labels_a if x != IGNORE_INDEX] == [x for x in labels_b if x != IGNORE_INDEX]


def test_a_template_that_rewrites_history_is_an_error(tok: Any) -> None:
    class Rewriting:
        """Renders earlier assistant turns differently once a later turn exists."""

        eos_token = tok.eos_token

        def apply_chat_template(self, messages: list, **kw: Any) -> str:
            n = len(messages)
            return "".join(f"[{n}]{m['content']}" for m in messages)

        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [ord(c) for c in text]

    with pytest.raises(DataError, match="prefix-preserving"):
        chat_pieces(Rewriting(), RECORD)


@pytest.mark.parametrize(("row", "field"), [
    ({"messages": [{"role": "user", "content": "q"}]}, "'messages'"),
    ({"messages": [{"role": "robot", "content": "q"}]}, "'messages[0].role'"),
    ({"messages": [{"role": "assistant", "content": 3}]}, "'messages[0].content'"),
    ({"messages": [{"role": "assistant", "content": "a", "tool_calls": {}}]},
     "'messages[0].tool_calls'"),
    ({"messages": [{"role": "assistant", "content": "a"}], "tools": ["python"]}, "'tools'"),
])
def test_bad_chat_records_name_file_line_and_field(tmp_path: Path, row: dict, field: str) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(RECORD) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match=re.escape(f"data.jsonl:2: field {field}")):
        load_examples(path)


def test_text_and_chat_records_mix_in_one_file(tmp_path: Path) -> None:
    text = {"messages": [{"role": "user", "content": "q"}],
            "completion": [{"text": "a", "train": True}]}
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(text) + "\n" + json.dumps(RECORD) + "\n")
    assert len(load_examples(path)) == 2
