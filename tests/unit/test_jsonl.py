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


@pytest.mark.parametrize("line", ['{"a": 1', b'{"a": 1', '{"a": 1\n', b'{"a": 1\r\n'])
def test_an_error_at_the_end_of_a_line_reports_that_column(line: str | bytes) -> None:
    from agentmath.jsonl import parse_line

    with pytest.raises(DataError, match=r"^f\.jsonl:4: invalid JSON \(Expecting ',' delimiter, "
                                        r"column 8\)$"):
        parse_line("f.jsonl", 4, line)
