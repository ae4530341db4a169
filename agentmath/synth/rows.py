"""The rows that decontamination and dedup read and write (:mod:`agentmath.synth.decontam`).

Reading is as strict as ``agentmath eval``'s: a malformed row (bad JSON, a missing, empty or
non-string problem field, a bad id, an answer that is neither text nor a number) raises
:class:`~agentmath.errors.DataError` naming the file, the line (or row) and the field. The kept
rows are written back unchanged (a JSONL line byte for byte), in input order, to a temporary
file renamed over the output at the end, so an interrupted run never leaves a half-written file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmath.errors import DataError
from agentmath.tasks.files import file_rows, no_file, row_error


@dataclass(frozen=True)
class Item:
    """One text to check or to check against: its id, the problem text, where it is from, and
    its reference answer when known (for the same-story rule; None: unknown)."""

    id: str
    text: str
    source: str = ""
    answer: str | None = None


@dataclass(frozen=True)
class Row:
    """An input row: its :class:`Item`, its location (``line 3``), the parsed object, and the
    original JSONL line (None for JSON and Parquet input), which is what gets written back."""

    item: Item
    where: str
    data: dict[str, Any]
    raw: str | None = None


def _row_id(obj: dict[str, Any], index: int, path: Path, where: str, id_field: str) -> str:
    """The row's id as text; its 0-based index when ``id_field`` is absent or null."""
    value = obj.get(id_field) if id_field else None
    if value is None:
        return str(index)
    if (isinstance(value, str) and value.strip()) or (
            isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise row_error(path, where, id_field, f"must be a non-empty string or an integer, got "
                    f"{value!r}")


def _row_answer(obj: dict[str, Any], path: Path, where: str, field_name: str | None
                ) -> str | None:
    """The row's reference answer as text (a number written as JSON too); None when the
    field is absent, null or empty, or ``field_name`` is None."""
    value = obj.get(field_name) if field_name else None
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise row_error(path, where, field_name, f"must be a string or a number, got "
                    f"{type(value).__name__}")


def _user_turns(messages: list[Any], path: Path, where: str, field_name: str) -> str:
    """The user turns' text of a chat-format field (``[{"role", "content"}, ...]``, as SFT
    records and agentmath's own sft.jsonl keep their prompts), joined by blank lines."""
    texts = []
    for n, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise row_error(path, where, f"{field_name}[{n}]", "must be an object with a role")
        if message["role"] == "user":
            content = message.get("content")
            if not isinstance(content, str):
                raise row_error(path, where, f"{field_name}[{n}].content",
                                "must be a string in a user message")
            texts.append(content)
    if not texts:
        raise row_error(path, where, field_name, "has no user message")
    return "\n\n".join(texts)


def _row_text(obj: dict[str, Any], path: Path, where: str, field_name: str) -> str:
    """The row's text: a string field, or the user turns of a chat-format ``messages`` list."""
    if field_name not in obj:
        hint = (" (the row holds chat messages: --problem-field messages)"
                if field_name == "problem" and isinstance(obj.get("messages"), list) else "")
        raise row_error(path, where, field_name, f"is missing{hint}")
    text = obj[field_name]
    if isinstance(text, list):
        text = _user_turns(text, path, where, field_name)
    elif not isinstance(text, str):
        kind = "null" if text is None else type(text).__name__
        raise row_error(path, where, field_name, f"must be a string or a list of chat "
                        f"messages, got {kind}")
    if not text.strip():
        raise row_error(path, where, field_name, "is empty")
    return text


def read_rows(path: str | Path, problem_field: str = "problem", id_field: str = "id",
              source: str | None = None, answer_field: str | None = "answer") -> list[Row]:
    """Every row of a JSONL/JSON/Parquet file, validated: the first malformed row raises a
    DataError naming the file, the line and the field. ``problem_field`` is a string, or a
    list of chat messages whose user turns are the text (``--problem-field messages``).
    Duplicate ids are allowed (dedup exists to remove copied rows); a row without ``id_field``
    gets its 0-based index. A row's ``answer_field`` (optional) is its reference answer, for
    the same-story rule."""
    path = Path(path)
    if not path.is_file():
        raise no_file(path)
    rows: list[Row] = []
    for index, file_row in enumerate(file_rows(path)):
        where, obj = file_row.where, file_row.value
        if not isinstance(obj, dict):
            raise row_error(path, where, None, f"row must be a JSON object, got "
                            f"{type(obj).__name__}")
        text = _row_text(obj, path, where, problem_field)
        item = Item(_row_id(obj, index, path, where, id_field), text, source or str(path),
                    _row_answer(obj, path, where, answer_field))
        rows.append(Row(item, where, obj, file_row.raw))
    return rows


def load_against(spec: str | Sequence[str], *, data_dir: str | Path | None = None,
                 problem_field: str = "problem", id_field: str = "id",
                 answer_field: str | None = "answer") -> list[Item]:
    """The items of ``spec``: comma-separated built-in names (``math500,aime24``, read with
    :func:`agentmath.tasks.load_tasks`, with their gold answers) or file paths (read with
    :func:`read_rows`)."""
    from agentmath.tasks import BUILTIN, load_tasks

    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec)]
    names = [n for n in names if n]
    if not names:
        raise DataError("--against names no dataset")
    items: list[Item] = []
    for name in names:
        if name in BUILTIN:
            items += [Item(t.id, t.problem, name, t.answer or None)
                      for t in load_tasks(name, data_dir=data_dir)]
        elif Path(name).expanduser().is_file():
            items += [row.item for row in read_rows(Path(name).expanduser(), problem_field,
                                                    id_field, source=name,
                                                    answer_field=answer_field)]
        else:
            raise DataError(f"--against {name!r} is neither a built-in dataset "
                            f"({', '.join(BUILTIN)}) nor a file")
    return items


def write_rows(path: str | Path, rows: Iterable[Row]) -> None:
    """Write ``rows`` unchanged to ``path`` atomically (a temporary file in the same
    directory, flushed and renamed over ``path``): JSONL, or a JSON list for a ``.json``
    path. JSONL input lines are copied as they were; other rows are dumped as JSON."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="\n") as out:
            if path.suffix.lower() == ".json":
                json.dump([row.data for row in rows], out, ensure_ascii=False, default=str)
                out.write("\n")
            else:
                for row in rows:
                    out.write(row.raw if row.raw is not None
                              else json.dumps(row.data, ensure_ascii=False, default=str))
                    out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
