"""Load math benchmark tasks from built-in names, local files or the Hugging Face hub.

Every source becomes a list of :class:`Task` (id, problem, answer, meta). Loading is strict: a
malformed row (bad JSON, a missing or empty field, a wrong type, a duplicate id) raises
:class:`~agentmath.errors.DataError` naming the file, the 1-based line (or row) and the field,
because a silently dropped row would change a benchmark score without anyone noticing.

Built-ins (``math500``, ``aime24``, ``aime25``, ``hmmt25``, ``gsm8k``, ``amc23``) are searched
for as local JSONL files first (see :func:`data_dirs`), then fetched from the hub with the
field mapping of the hub version. ``datasets`` and ``pyarrow`` are imported only when needed.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmath.errors import DataError
from agentmath.tasks.files import SUFFIXES, FileRow, file_rows, jsonl_rows, no_file, row_error
from agentmath.tasks.task import Task

#: Environment variable naming extra data directories (several joined with ``os.pathsep``).
DATA_DIR_ENV = "AGENTMATH_DATA_DIR"
_REPO_ROOT = Path(__file__).resolve().parents[2]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_LEVEL = re.compile(r"^\s*(?:level\s*)?(\d+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class BuiltinInfo:
    """Where a built-in benchmark lives: its local file name and its Hugging Face hub version.

    The local files share one schema (``id``, ``problem``, ``answer``, ``solution``, ...); the
    hub versions do not, so each carries its own field mapping. ``hub_answer_marker`` splits a
    full worked answer (GSM8K's ``... #### 18``) into the final answer and ``solution``.
    """

    name: str
    file: str
    hub_id: str
    hub_split: str
    hub_config: str | None = None
    hub_problem_field: str = "problem"
    hub_answer_field: str = "answer"
    hub_id_field: str = "id"
    hub_answer_marker: str | None = None


BUILTIN: dict[str, BuiltinInfo] = {
    info.name: info
    for info in (
        BuiltinInfo("math500", "math500.jsonl", "HuggingFaceH4/MATH-500", "test",
                    hub_id_field="unique_id"),
        BuiltinInfo("aime24", "aime24.jsonl", "HuggingFaceH4/aime_2024", "train"),
        BuiltinInfo("aime25", "aime25.jsonl", "MathArena/aime_2025", "train",
                    hub_id_field="problem_idx"),
        BuiltinInfo("hmmt25", "hmmt25.jsonl", "MathArena/hmmt_feb_2025", "train",
                    hub_id_field="problem_idx"),
        BuiltinInfo("gsm8k", "gsm8k.jsonl", "openai/gsm8k", "test", hub_config="main",
                    hub_problem_field="question", hub_id_field="", hub_answer_marker="####"),
        BuiltinInfo("amc23", "amc23.jsonl", "math-ai/amc23", "test",
                    hub_problem_field="question"),
    )
}  # fmt: skip


@dataclass(frozen=True)
class _Fields:
    """The source field names that become a task's problem, answer and id."""

    problem: str = "problem"
    answer: str = "answer"
    id: str = "id"


def data_dirs(data_dir: str | Path | None = None) -> list[Path]:
    """The directories searched for built-in files, in order, without duplicates.

    Order: the explicit ``data_dir``, then ``$AGENTMATH_DATA_DIR`` (``os.pathsep``-separated),
    then ``../shared/data`` next to the repository root (the parent of the ``agentmath``
    package), then ``./data``. Directories that do not exist are listed too, so that an error
    can say everywhere it looked.
    """
    candidates: list[Path] = []
    if data_dir is not None and str(data_dir):
        candidates.append(Path(data_dir))
    env = os.environ.get(DATA_DIR_ENV, "")
    candidates += [Path(part) for part in env.split(os.pathsep) if part.strip()]
    candidates += [_REPO_ROOT.parent / "shared" / "data", Path.cwd() / "data"]
    resolved = [path.expanduser().resolve() for path in candidates]
    return list(dict.fromkeys(resolved))  # drop duplicates, keep the order


def _builtin_info(name: str) -> BuiltinInfo:
    """The :class:`BuiltinInfo` of ``name``, or a DataError listing the known names."""
    try:
        return BUILTIN[name]
    except KeyError:
        raise DataError(
            f"unknown built-in dataset {name!r}; known: {', '.join(BUILTIN)}") from None


def find_builtin(name: str, data_dir: str | Path | None = None) -> Path | None:
    """The first local copy of built-in ``name`` in :func:`data_dirs` order, or None."""
    info = _builtin_info(name)
    for directory in data_dirs(data_dir):
        path = directory / info.file
        if path.is_file():
            return path
    return None


def _text(value: Any, source: str, where: str, field_name: str) -> str:
    """A problem/answer value as text: a non-empty string as is (``"025"`` stays ``"025"``),
    a finite number written plainly (``27.0`` -> ``"27"``); anything else is a DataError."""
    if isinstance(value, str):
        if not value.strip():
            raise row_error(source, where, field_name, "is empty")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "null" if value is None else type(value).__name__
        raise row_error(source, where, field_name, f"must be a string or a number, got {kind}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise row_error(source, where, field_name, f"is not a finite number: {value!r}")
        if value.is_integer():
            return str(int(value))
    return str(value)


def _row_id(row: dict[str, Any], index: int, source: str, where: str, id_field: str) -> str:
    """The row's id as text; the 0-based row index when ``id_field`` is absent or null."""
    value = row.get(id_field) if id_field else None
    if value is None:
        return str(index)
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise row_error(source, where, id_field, f"must be a non-empty string or an integer, "
                    f"got {value!r}")


def _meta(row: dict[str, Any], fields: _Fields) -> dict[str, Any]:
    """Every field but the mapped ones; a numeric ``level`` (``3``, ``"3"``, ``"Level 3"``)
    becomes an int so that results can be grouped and sorted by difficulty."""
    meta = {k: v for k, v in row.items() if k not in (fields.problem, fields.answer, fields.id)}
    level = meta.get("level")
    if isinstance(level, str) and (match := _LEVEL.match(level)):
        meta["level"] = int(match.group(1))
    elif isinstance(level, float) and level.is_integer():
        meta["level"] = int(level)
    return meta


def _to_tasks(rows: Iterable[FileRow], source: str, fields: _Fields) -> list[Task]:
    """Validate rows (of a file or of the hub) into tasks; the first malformed row, or no row
    at all, raises DataError."""
    tasks: list[Task] = []
    first_seen: dict[str, str] = {}
    for index, file_row in enumerate(rows):
        where, row = file_row.where, file_row.value
        if not isinstance(row, dict):
            raise row_error(source, where, None, f"row must be a JSON object, got "
                            f"{type(row).__name__}")
        values: dict[str, str] = {}
        for name in (fields.problem, fields.answer):
            if name not in row:
                raise row_error(source, where, name, "is missing")
            values[name] = _text(row[name], source, where, name)
        task_id = _row_id(row, index, source, where, fields.id)
        if task_id in first_seen:
            raise row_error(source, where, fields.id or "id", f"duplicate id {task_id!r} "
                            f"(first at {first_seen[task_id]})")
        first_seen[task_id] = where
        tasks.append(Task(task_id, values[fields.problem], values[fields.answer],
                          _meta(row, fields)))
    if not tasks:  # said here, naming the file, not later as "no records to compute metrics"
        raise DataError(f"{source}: the dataset is empty (no rows)")
    return tasks


def _hub_rows(hub_id: str, config: str | None, split: str | None) -> list[FileRow]:
    """Rows of a hub dataset, via a lazy ``datasets`` import; any failure is a DataError that
    names the dataset, config and split that were tried."""
    tried = f"{hub_id!r} (config={config!r}, split={split or 'auto'!r})"
    try:
        import datasets
    except ImportError:
        raise DataError(f"cannot load {tried} from the Hugging Face hub: the 'datasets' "
                        "package is not installed (pip install datasets)") from None
    try:
        loaded = datasets.load_dataset(hub_id, config, split=split)
    except Exception as exc:  # datasets raises many unrelated types (network, missing repo,
        # bad split, auth); each one means "could not load" and is reported as such
        raise DataError(f"could not load {tried} from the Hugging Face hub "
                        f"(offline, or no such dataset/split?): {type(exc).__name__}: {exc}"
                        ) from exc
    if split is None and isinstance(loaded, dict):
        names = list(loaded)
        if "test" in loaded or len(names) == 1:
            loaded = loaded["test" if "test" in loaded else names[0]]
        else:
            raise DataError(f"{hub_id}: several splits ({', '.join(names)}); pass split=")
    return [FileRow(f"row {n}", dict(row)) for n, row in enumerate(loaded, start=1)]


def _split_marker(rows: list[FileRow], source: str, answer_field: str,
                  marker: str) -> list[FileRow]:
    """Split ``"work #### 18"`` answers: the final answer after the marker, the whole text
    kept as ``solution`` (GSM8K on the hub stores both in one field)."""
    result = []
    for file_row in rows:
        row = file_row.value
        text = row.get(answer_field) if isinstance(row, dict) else None
        if isinstance(text, str):
            if marker not in text:
                raise row_error(source, file_row.where, answer_field,
                                f"has no {marker!r} final answer")
            row = {**row, answer_field: text.rsplit(marker, 1)[1].strip(), "solution": text}
        result.append(FileRow(file_row.where, row))
    return result


def _load_builtin_hub(info: BuiltinInfo, split: str | None) -> list[Task]:
    """A built-in from the hub, with that version's own field mapping."""
    rows = _hub_rows(info.hub_id, info.hub_config, split or info.hub_split)
    source = f"hub:{info.hub_id}"
    if info.hub_answer_marker:
        rows = _split_marker(rows, source, info.hub_answer_field, info.hub_answer_marker)
    fields = _Fields(info.hub_problem_field, info.hub_answer_field, info.hub_id_field)
    return _to_tasks(rows, source, fields)


def _load_builtin(name: str, data_dir: str | Path | None, fields: _Fields,
                  split: str | None, allow_hub: bool) -> list[Task]:
    """A built-in: the local copy if there is one (it holds the evaluation split only: the
    hub's split name or ``test``), else the hub version when ``allow_hub``; the error lists
    the directories searched."""
    info = BUILTIN[name]
    other_split = split not in (None, info.hub_split, "test")
    path = None if other_split else find_builtin(name, data_dir)
    if path is not None:
        return _to_tasks(jsonl_rows(path), str(path), fields)
    if other_split:
        why = f"the local copy of {name!r} holds only split {info.hub_split!r}, not {split!r}"
    else:
        searched = ", ".join(str(d) for d in data_dirs(data_dir))
        why = f"built-in dataset {name!r} ({info.file}) not found in: {searched}"
    if not allow_hub:
        raise DataError(f"{why}; pass data_dir (--data-dir) or set ${DATA_DIR_ENV}, "
                        f"or allow hub loading ({info.hub_id})")
    try:
        return _load_builtin_hub(info, split)
    except DataError as exc:
        raise DataError(f"{why}; the hub fallback failed: {exc}") from exc


def load_tasks(
    source: str,
    *,
    data_dir: str | Path | None = None,
    problem_field: str = "problem",
    answer_field: str = "answer",
    id_field: str = "id",
    split: str | None = None,
    limit: int | None = None,
    allow_hub: bool = True,
) -> list[Task]:
    """Load the tasks of ``source``: a built-in name, a ``.jsonl``/``.json``/``.parquet`` file,
    or a hub id ``org/name``. Every row is validated; the first bad one raises DataError.

    The ``*_field`` names map source fields to the task (hub built-ins use their own mapping).
    A row without ``id_field`` gets its 0-based row index as id. ``split`` picks a hub split
    (default: the built-in's, else ``test`` or the only one); it is an error for local files.
    ``limit`` keeps the first N tasks, after all rows were validated.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    fields = _Fields(problem_field, answer_field, id_field)
    path = Path(source).expanduser()
    if source in BUILTIN:
        tasks = _load_builtin(source, data_dir, fields, split, allow_hub)
    elif path.is_file() or path.suffix.lower() in SUFFIXES:
        if not path.is_file():
            raise no_file(source)
        if split is not None:
            raise DataError(f"{source}: split={split!r} applies only to hub datasets")
        tasks = _to_tasks(file_rows(path), str(path), fields)
    elif _HUB_ID.match(source):
        if not allow_hub:
            raise DataError(f"{source!r} is not a local file and hub loading is disabled")
        tasks = _to_tasks(_hub_rows(source, None, split), f"hub:{source}", fields)
    else:
        raise DataError(f"unknown dataset {source!r}: not a built-in ({', '.join(BUILTIN)}), "
                        "not a .jsonl/.json/.parquet file, not a hub id 'org/name'")
    return tasks if limit is None else tasks[:limit]


def _count_rows(path: Path) -> int:
    """Non-blank lines of a JSONL file: its row count, without parsing (summaries stay fast)."""
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def dataset_summary(data_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """One record per built-in: ``name``, ``rows`` (when found locally), ``path`` (or None),
    ``source`` (``local``/``missing``) and ``hub_id``, for ``agentmath datasets``."""
    paths = {name: find_builtin(name, data_dir) for name in BUILTIN}
    return [{"name": name,
             "rows": None if path is None else _count_rows(path),
             "path": None if path is None else str(path),
             "source": "missing" if path is None else "local",
             "hub_id": BUILTIN[name].hub_id} for name, path in paths.items()]
