"""A dataset's fingerprint: what a resumed run checks so that it never grades against new data.

The run identity in ``config.json`` pins the settings, but not the data: editing a gold answer
and resuming would keep old records graded against the old gold. So the run also saves a
fingerprint of the problems it evaluates: a SHA-256 per problem over its normalised id,
question and gold answer, and one over all of them. A resumed run whose fingerprint differs is
refused with a message that says which problem ids changed, appeared or disappeared.

Normalisation is deliberately light (Unicode NFC, ``\\r\\n`` to ``\\n``, surrounding
whitespace): re-saving a file on another OS is not a change; changing any character the
model reads or the grader compares is.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Sequence
from typing import Any

_SHOWN_IDS = 8  # ids listed per kind of change in an error message


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n")).strip()


def problem_digest(task_id: str, problem: str, answer: str) -> str:
    """SHA-256 (hex) of one problem's normalised id, question and gold answer."""
    fields = [_normalise(task_id), _normalise(problem), _normalise(answer)]
    return hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode("utf-8")).hexdigest()


def dataset_fingerprint(tasks: Sequence[Any]) -> dict[str, Any]:
    """``{"sha256", "n_problems", "problems": {id: digest}}`` of tasks (objects with ``id``,
    ``problem`` and ``answer``). The overall hash ignores row order: results are per id."""
    problems = {str(t.id): problem_digest(str(t.id), t.problem, t.answer) for t in tasks}
    listing = "\n".join(f"{pid}\t{digest}" for pid, digest in sorted(problems.items()))
    return {"sha256": hashlib.sha256(listing.encode("utf-8")).hexdigest(),
            "n_problems": len(problems), "problems": problems}


def _ids(ids: list[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:_SHOWN_IDS])
    more = len(ids) - _SHOWN_IDS
    return shown + (f" and {more} more" if more > 0 else "")


def describe_change(saved: dict[str, Any], now: dict[str, Any]) -> str | None:
    """None when the fingerprints match, else what changed, by problem id."""
    if saved.get("sha256") == now.get("sha256"):
        return None
    old = saved.get("problems") if isinstance(saved.get("problems"), dict) else {}
    new = now.get("problems") or {}
    changed = [pid for pid in new if pid in old and old[pid] != new[pid]]
    added = [pid for pid in new if pid not in old]
    removed = [pid for pid in old if pid not in new]
    parts = [f"{len(found)} {what} ({_ids(found)})" for found, what in (
        (changed, "problem(s) changed: question or gold answer"), (added, "added"),
        (removed, "removed")) if found]
    detail = "; ".join(parts) if parts else "the problems differ"
    return (f"the dataset changed since this run started (sha256 "
            f"{str(saved.get('sha256'))[:12]} -> {str(now.get('sha256'))[:12]}): {detail}")
