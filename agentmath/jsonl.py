"""JSON Lines files: one JSON object per line, read with errors that name the file and line.

Every JSONL file agentmath reads (SFT data, converted trajectories, a run's samples.jsonl) goes
through :func:`parse_line`, so a bad line is reported the same way everywhere:
``PATH:LINE: invalid JSON (...)``, ``PATH:LINE: expected a JSON object, got list`` or
``PATH:LINE: missing field 'x'``. Blank lines are skipped, never counted as rows.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentmath.errors import DataError

T = TypeVar("T")

__all__ = ["finite", "is_number", "iter_jsonl", "parse_line", "read_jsonl", "write_jsonl"]


def finite(value: Any) -> Any:
    """``value`` with every NaN and infinity (nested in dicts, lists and tuples) replaced by
    None: JSON has neither, and ``json.dumps`` would write ``NaN``, which strict parsers (jq,
    JavaScript) refuse. For JSON that leaves the process: ``--json`` output, the viewer."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def is_number(value: Any) -> bool:
    """A JSON number as read: an int or a float, not a bool (``True`` is an int in Python)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_line(path: str | Path, lineno: int, line: str | bytes,
               require: Sequence[str] = ()) -> dict[str, Any]:
    """One line as a JSON object holding every field in ``require``; DataError otherwise.

    The line ending is dropped first, so an error at the end of a line (a missing ``}``)
    reports that line's last column, not column 1 of a line that does not exist.
    """
    line = line.rstrip(b"\r\n") if isinstance(line, bytes) else line.rstrip("\r\n")
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg}, column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}:{lineno}: not valid UTF-8 ({exc.reason})") from None
    if not isinstance(value, dict):
        raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(value).__name__}")
    for field in require:
        if field not in value:
            raise DataError(f"{path}:{lineno}: missing field {field!r}")
    return value


def iter_jsonl(path: str | Path, require: Sequence[str] = (),
               what: str = "JSONL file") -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of ``path`` (UTF-8)."""
    path = Path(path)
    try:
        if path.suffix == ".gz":  # a compressed file (an RL rollout dump)
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                text = fh.read()
        else:
            text = path.read_text(encoding="utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read {what}: {exc}") from exc
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield lineno, parse_line(path, lineno, line, require)


def read_records(path: str | Path, parse: Callable[[dict[str, Any]], T],
                 what: str = "JSONL file") -> list[T]:
    """Every line of ``path`` as a typed record, ``parse`` of its object; a DataError that
    ``parse`` raises (a missing or malformed field) is said again with the file and line."""
    out = []
    for lineno, row in iter_jsonl(path, what=what):
        try:
            out.append(parse(row))
        except DataError as exc:
            raise DataError(f"{path}:{lineno}: {exc}") from exc
    return out


def read_jsonl(path: str | Path, require: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every object of a JSONL file, in order (see :func:`iter_jsonl`)."""
    return [obj for _, obj in iter_jsonl(path, require)]


def write_jsonl(records: Iterable[dict[str, Any]], path: str | Path, *, append: bool = False,
                durable: bool = False) -> int:
    """Write one JSON object per line (UTF-8, parents created); returns how many.

    ``append`` adds to the file instead of replacing it; ``durable`` fsyncs before returning,
    so a rename or a record that follows the write cannot be seen without it. A path ending in
    ``.gz`` is written gzip-compressed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    mode = "a" if append else "w"
    opened = (gzip.open(path, mode + "t", encoding="utf-8") if path.suffix == ".gz"
              else path.open(mode, encoding="utf-8"))
    with opened as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    return count
