"""The rows of a data file someone hands agentmath: ``.jsonl``, ``.json`` or ``.parquet``.

One reader for every place that takes a file of problems (``agentmath eval``'s datasets in
:mod:`agentmath.tasks.datasets`, decontamination and dedup in :mod:`agentmath.synth.rows`), so
that a file reads the same, and a bad one fails with the same message, wherever it is given.
Each row comes with where it is (``line 3`` of a JSONL file, ``row 3`` of a JSON list or a
parquet table) for the callers' errors, which name the file, that place and the field
(:func:`row_error`). Values are returned as parsed: checking that a row is an object with the
right fields is the caller's, since each needs other fields.

Not :mod:`agentmath.jsonl`: that module reads the records agentmath writes itself (objects,
``PATH:LINE:`` errors); this one reads people's files (a byte-order mark on the first line, a
JSON list or ``{"data": [...]}``, parquet). ``pyarrow`` is imported only for parquet.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmath.errors import DataError

__all__ = ["SUFFIXES", "FileRow", "file_rows", "jsonl_rows", "no_file", "row_error"]

#: The file types :func:`file_rows` reads, by suffix (any case).
SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class FileRow:
    """One row of a data file: where it is, its parsed value, and for JSONL the line as read
    (without its line ending; what dedup writes back byte for byte), else None."""

    where: str
    value: Any
    raw: str | None = None


def row_error(source: str | Path, where: str, field_name: str | None,
              message: str) -> DataError:
    """A DataError naming the file (or source), the line or row, and the field when there is
    one: ``data.jsonl: line 3: field 'answer': is empty``."""
    field_part = f"field {field_name!r}: " if field_name else ""
    return DataError(f"{source}: {where}: {field_part}{message}")


def no_file(source: str | Path) -> DataError:
    """The DataError for a data file that cannot be read as one: ``data.jsonl: no such file``,
    or ``runs/: a directory, not a file`` (a directory is a common slip for its file)."""
    what = "a directory, not a file" if Path(source).expanduser().is_dir() else "no such file"
    return DataError(f"{source}: {what}")


def jsonl_rows(path: Path) -> Iterator[FileRow]:
    """A row per non-blank line (blank lines are not rows); a byte-order mark on the first line
    is dropped, a line that is not UTF-8 or not JSON is a DataError naming it."""
    with path.open("rb") as handle:
        for lineno, data in enumerate(handle, start=1):
            where = f"line {lineno}"
            try:  # the line ending goes first: a JSON error at the end of the line keeps its column
                raw = data.decode("utf-8-sig" if lineno == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise row_error(path, where, None, f"not valid UTF-8 ({exc.reason})") from None
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise row_error(path, where, None, f"invalid JSON: {exc.msg} "
                                f"(column {exc.colno})") from None
            yield FileRow(where, value, raw)


def _json_rows(path: Path) -> Iterator[FileRow]:
    """A row per item of a JSON list of objects or of a ``{"data": [...]}`` document."""
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise row_error(path, "file", None, f"not valid UTF-8 ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise row_error(path, f"line {exc.lineno}", None,
                        f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    if isinstance(document, dict) and isinstance(document.get("data"), list):
        document = document["data"]
    if not isinstance(document, list):
        raise row_error(path, "line 1", None,
                        'expected a JSON list of objects or {"data": [...]}')
    for number, value in enumerate(document, start=1):
        yield FileRow(f"row {number}", value)


def _parquet_rows(path: Path) -> Iterator[FileRow]:
    """A row per parquet row, read with pyarrow (a DataError when it is missing)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading parquet files needs pyarrow: "
                        "pip install pyarrow") from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"{path}: not a readable parquet file: {exc}") from None
    for number, value in enumerate(table.to_pylist(), start=1):
        yield FileRow(f"row {number}", value)


def file_rows(path: Path) -> Iterator[FileRow]:
    """The rows of a local ``.jsonl``, ``.json`` or ``.parquet`` file, by its suffix; any other
    suffix is a DataError listing the ones read."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return jsonl_rows(path)
    if suffix == ".json":
        return _json_rows(path)
    if suffix == ".parquet":
        return _parquet_rows(path)
    raise DataError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .json or .parquet")
