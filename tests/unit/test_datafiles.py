"""agentmath.tasks.files: the one reader of data files people hand agentmath."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentmath.errors import DataError
from agentmath.tasks.files import FileRow, file_rows, row_error


def test_jsonl_rows_keep_the_line_and_skip_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n\n  \n{"a":  2}\n[3]\n')
    assert list(file_rows(path)) == [FileRow("line 1", {"a": 1}, '{"a": 1}'),
                                     FileRow("line 4", {"a": 2}, '{"a":  2}'),
                                     FileRow("line 5", [3], "[3]")]


def test_json_list_and_data_document_rows(tmp_path: Path) -> None:
    listed, wrapped = tmp_path / "l.json", tmp_path / "w.JSON"
    listed.write_text(json.dumps([{"a": 1}, {"a": 2}]))
    wrapped.write_text(json.dumps({"data": [{"a": 3}]}))
    assert list(file_rows(listed)) == [FileRow("row 1", {"a": 1}), FileRow("row 2", {"a": 2})]
    assert list(file_rows(wrapped)) == [FileRow("row 1", {"a": 3})]


@pytest.mark.parametrize("name,data,message", [
    ("bad.jsonl", b'{"a": 1}\n{"a": \n', "bad.jsonl: line 2: invalid JSON: Expecting value"),
    ("bad.jsonl", b'{"a": 1}\n\xff\n', "bad.jsonl: line 2: not valid UTF-8"),
    ("bad.json", b'{"a": 1}', 'bad.json: line 1: expected a JSON list of objects or {"data"'),
    ("bad.csv", b"a,b\n", "unsupported file type '.csv'"),
])
def test_bad_files_name_the_file_and_place(tmp_path: Path, name: str, data: bytes,
                                           message: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DataError) as info:
        list(file_rows(path))
    assert message in str(info.value)
    assert str(tmp_path) in str(info.value)


def test_row_error_names_the_field_when_there_is_one() -> None:
    assert str(row_error("d.jsonl", "line 3", "answer", "is empty")) == \
        "d.jsonl: line 3: field 'answer': is empty"
    assert str(row_error("d.jsonl", "row 2", None, "bad")) == "d.jsonl: row 2: bad"
