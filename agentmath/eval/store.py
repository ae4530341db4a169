"""The run directory on disk: its config, and samples.jsonl that survives kill -9.

Each finished sample is appended as one line with a single ``write`` on an ``O_APPEND`` file
descriptor, so once the call returns the record is in the kernel and survives the process being
killed. A record cut short by a kill in the middle of that write (or by a full disk) can only
be the last line; on resume it is cut off and that sample runs again. Together with skipping
what is recorded, every (problem, sample) ends up exactly once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentmath.errors import ConfigError, DataError
from agentmath.jsonl import parse_line

CONFIG_FILE = "config.json"
SAMPLES_FILE = "samples.jsonl"
RECORD_KEY = ("problem_id", "sample_index")  # every sample record has these
METRICS_FILE = "metrics.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file and rename (never half-written)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def check_or_write_config(run_dir: Path, identity: dict[str, Any], full: dict[str, Any]) -> bool:
    """Save the run's config, or check that a resumed run uses the same one.

    Returns True when the run is being resumed. A differing identity field is a
    :class:`ConfigError` that names every field and both values, so results are never mixed.
    """
    path = run_dir / CONFIG_FILE
    if not path.exists():
        write_json_atomic(path, {**full, "identity": identity})
        return False
    try:
        saved = json.loads(path.read_text(encoding="utf-8")).get("identity", {})
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: cannot read the saved run config: {exc}") from exc
    diffs = [f"{k}: saved {saved.get(k)!r}, now {identity.get(k)!r}"
             for k in sorted(set(saved) | set(identity)) if saved.get(k) != identity.get(k)]
    if diffs:
        raise ConfigError(f"{path}: this run was started with a different config; refusing to "
                          f"mix results (use another --out or the same settings): "
                          + "; ".join(diffs))
    return True


def load_records(run_dir: Path) -> list[dict[str, Any]]:
    """Read samples.jsonl, cutting off a partial last line (left by a kill mid-write).

    A malformed line anywhere else is a :class:`DataError` naming the file and line: that is
    not something a crash produces, and dropping it silently would lose data.
    """
    path = run_dir / SAMPLES_FILE
    if not path.exists():
        return []
    data = path.read_bytes()
    complete = data.rfind(b"\n") + 1
    if complete < len(data):
        with open(path, "r+b") as fh:  # drop the torn tail so the next append starts clean
            fh.truncate(complete)
    return [parse_line(path, lineno, line, RECORD_KEY)
            for lineno, line in enumerate(data[:complete].splitlines(), start=1)
            if line.strip()]


class SampleWriter:
    """Appends records to samples.jsonl, one ``write`` per record."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / SAMPLES_FILE
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, record: dict[str, Any]) -> None:
        """Write one record as one line; returns once the kernel has all of it."""
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        view = memoryview(data)
        while view:  # a regular-file write is complete in practice; loop for the rare short one
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
