"""agentmath.jsonl: the one JSONL reader; every bad line is named by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmath.errors import DataError
from agentmath.jsonl import iter_jsonl, read_jsonl, write_jsonl


def test_round_trip_skips_blank_lines_and_keeps_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "rows.jsonl"
    assert write_jsonl([{"a": 1}, {"b": "é"}], path) == 2
    path.write_text(path.read_text() + "\n  \n" + '{"c": 3}\n', encoding="utf-8")
    assert read_jsonl(path) == [{"a": 1}, {"b": "é"}, {"c": 3}]
    assert [n for n, _ in iter_jsonl(path)] == [1, 2, 5]


@pytest.mark.parametrize(("text", "require", "message"), [
    ('{"a": 1}\n{"a": \n', (), "rows.jsonl:2: invalid JSON (Expecting value, column 7)"),
    ('{"a": 1}\n[1, 2]\n', (), "rows.jsonl:2: expected a JSON object, got list"),
    ('{"a": 1}\n\n{"b": 2}\n', ("a",), "rows.jsonl:3: missing field 'a'"),
])
def test_bad_lines_are_named(tmp_path: Path, text: str, require: tuple, message: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(text)
    with pytest.raises(DataError, match=f"^{path}:".replace(".", r"\.")) as info:
        read_jsonl(path, require)
    assert str(info.value).endswith(message)


def test_unreadable_files_say_what_they_were(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read SFT data"):
        list(iter_jsonl(tmp_path / "missing.jsonl", what="SFT data"))
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"a": "\xe9"}\n')
    with pytest.raises(DataError, match="latin1.jsonl: cannot read"):
        read_jsonl(bad)
