"""The run directory on disk: its config, and samples.jsonl that survives kill -9.

Each finished sample is appended as one line with a single ``write`` on an ``O_APPEND`` file
descriptor, so once the call returns the record is in the kernel and survives the process being
killed. A record cut short by a kill in the middle of that write (or by a full disk) can only
be the last line; on resume it is cut off and that sample runs again. Together with skipping
what is recorded, every (problem, sample) ends up exactly once.

Samples recorded as errors (the model server failed) count as done until a run asks to retry
them: :func:`drop_errors` then moves their records to ``retried_errors.jsonl`` and rewrites
``samples.jsonl`` without them in one atomic rename, so a kill at any moment leaves either the
old file or the new one, and the retried samples are simply missing, to be run again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentmath.errors import ConfigError, DataError
from agentmath.jsonl import parse_line, write_jsonl
from agentmath.runs.files import (
    CONFIG_FILE,
    DATASET_KEY,
    METRICS_FILE,
    RECORD_KEY,
    RETRIED_FILE,
    SAMPLES_FILE,
)
from agentmath.runs.fingerprint import describe_change

__all__ = ["CONFIG_FILE", "DATASET_KEY", "METRICS_FILE", "RECORD_KEY", "RETRIED_FILE",
           "SAMPLES_FILE", "SampleWriter", "check_or_write_config", "drop_errors",
           "identity_differences", "is_error",
           "load_records", "read_json_object", "unique_records", "write_json_atomic",
           "write_jsonl_atomic"]


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file and rename (never half-written)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_jsonl_atomic(records: Iterable[dict[str, Any]], path: Path) -> int:
    """Replace the JSONL file ``path`` in one rename: a kill at any moment leaves either the
    old file or the whole new one. Returns how many records were written."""
    tmp = path.with_name(f".{path.name}.tmp")
    count = write_jsonl(records, tmp, durable=True)
    os.replace(tmp, path)
    return count


def read_json_object(path: Path) -> dict[str, Any]:
    """The one reader of a run directory's JSON files (``config.json``, ``metrics.json``,
    written by :func:`write_json_atomic`): the object the file holds. A DataError naming the
    file when it is missing, unreadable, not JSON or not an object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise DataError(f"{path}: missing (every run directory needs {path.name})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def identity_differences(saved: dict[str, Any], now: dict[str, Any],
                         prefix: str = "") -> list[str]:
    """Each identity field whose saved value differs from the current one, as
    ``field: saved X, now Y``. A group of settings (a dict on both sides, e.g. ``sandbox``) is
    compared field by field on the fields the current code counts: one that a newer version
    no longer counts (it moved to a config's resumable fields) is ignored, so a run saved
    before that still resumes; one added to the identity since must match."""
    out: list[str] = []
    for key in sorted(set(saved) | set(now)):
        old, new = saved.get(key), now.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            out += identity_differences({k: v for k, v in old.items() if k in new}, new,
                                        f"{prefix}{key}.")
        elif old != new:
            out.append(f"{prefix}{key}: saved {old!r}, now {new!r}")
    return out


def check_or_write_config(run_dir: Path, identity: dict[str, Any], full: dict[str, Any],
                          dataset: dict[str, Any] | None = None) -> bool:
    """Save the run's config (and ``dataset``, its fingerprint), or check that a resumed run
    uses the same config and the same data.

    Returns True when the run is being resumed. A differing identity field or a changed
    dataset is a :class:`ConfigError` that names every field and both values, and which
    problem ids changed, so results are never mixed. A run saved before fingerprints existed
    gets the current one written in (from then on, its data is pinned).
    """
    path = run_dir / CONFIG_FILE
    if not path.exists():
        extra = {DATASET_KEY: dataset} if dataset is not None else {}
        write_json_atomic(path, {**full, "identity": identity, **extra})
        return False
    document = read_json_object(path)
    saved = document.get("identity") if isinstance(document.get("identity"), dict) else {}
    problems = identity_differences(saved, identity)
    saved_data = document.get(DATASET_KEY)
    if dataset is not None and isinstance(saved_data, dict):
        change = describe_change(saved_data, dataset)
        if change is not None:
            problems.append(change)
    if problems:
        raise ConfigError(f"{path}: this run was started with a different config or dataset; "
                          f"refusing to mix results (use another --out, or the same settings "
                          f"and data): " + "; ".join(problems))
    if dataset is not None and not isinstance(saved_data, dict):
        write_json_atomic(path, {**document, DATASET_KEY: dataset})
    return True


def is_error(record: dict[str, Any]) -> bool:
    """Whether a sample record is a failed sample (the episode ended in an error)."""
    return record.get("finish_reason") == "error" or bool(record.get("error"))


def unique_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (problem, sample), in first-seen order.

    Duplicates come only from older versions (two runs on one directory before runs were
    locked). A later record supersedes an earlier one, except that an error never replaces a
    finished sample, so such a directory resumes and scores each sample once.
    """
    chosen: dict[tuple[Any, Any], dict[str, Any]] = {}
    for record in records:
        key = (record["problem_id"], record["sample_index"])
        old = chosen.get(key)
        if old is None or is_error(old) or not is_error(record):
            chosen[key] = record
    return list(chosen.values())


def drop_errors(run_dir: Path) -> int:
    """Remove the error records (and any duplicates) from samples.jsonl so that those samples
    run again; the removed errors are appended to ``retried_errors.jsonl`` first. Returns how
    many samples will be retried. Call it with the run's lock held."""
    records = load_records(run_dir)
    kept = unique_records(records)
    errors = [r for r in kept if is_error(r)]
    if not errors and len(kept) == len(records):
        return 0
    if errors:
        write_jsonl(errors, run_dir / RETRIED_FILE, append=True, durable=True)
    write_jsonl_atomic((r for r in kept if not is_error(r)), run_dir / SAMPLES_FILE)
    return len(errors)


def load_records(run_dir: Path, name: str = SAMPLES_FILE,
                 key: Sequence[str] = RECORD_KEY) -> list[dict[str, Any]]:
    """Read samples.jsonl (or the append-only log ``name`` whose records all have ``key``),
    cutting off a partial last line (left by a kill mid-write).

    A malformed line anywhere else is a :class:`DataError` naming the file and line: that is
    not something a crash produces, and dropping it silently would lose data.
    """
    path = run_dir / name
    if not path.exists():
        return []
    data = path.read_bytes()
    complete = data.rfind(b"\n") + 1
    if complete < len(data):
        with open(path, "r+b") as fh:  # drop the torn tail so the next append starts clean
            fh.truncate(complete)
    return [parse_line(path, lineno, line, key)
            for lineno, line in enumerate(data[:complete].splitlines(), start=1)
            if line.strip()]


class SampleWriter:
    """Appends records to samples.jsonl (or the log ``name``), one ``write`` per record."""

    def __init__(self, run_dir: Path, name: str = SAMPLES_FILE) -> None:
        self.path = run_dir / name
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, record: dict[str, Any]) -> None:
        """Write one record as one line; returns once the kernel has all of it."""
        try:
            data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate somewhere: escape it, keep the record
            data = (json.dumps(record, ensure_ascii=True) + "\n").encode("ascii")
        view = memoryview(data)
        try:
            while view:  # a regular-file write is complete in practice; loop for a short one
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:  # a full disk: stop the run with a clear message
            raise DataError(f"{self.path}: cannot append a sample record: {exc.strerror}") \
                from exc

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
