"""Benchmark decontamination and near-duplicate removal with the detectors of
:mod:`agentmath.synth.detectors` (word N-grams, MinHash LSH, sentence embeddings).

- :func:`decontaminate` drops the rows that match an item of a benchmark (or any dataset);
- :func:`deduplicate` drops, within one dataset, every row that matches an earlier kept row,
  so the first row of each cluster of near-duplicates stays.

Detectors run as a cascade, cheapest first (``ngram``, ``minhash``, ``semantic``): each sees
only the rows the previous ones kept. So every removal names the first detector that caught it,
with that detector's score and the matched item, and the embedding model (the slow one) reads
only what the lexical detectors let through. A detector's index is released when its stage
ends, so the peak memory is the largest stage's, not the sum.

Reading is as strict as ``agentmath eval``'s: a malformed row (bad JSON, a missing, empty or
non-string problem field, a bad id) raises :class:`~agentmath.errors.DataError` naming the
file, the line (or row) and the field. The kept rows are written back unchanged (a JSONL line
byte for byte), in input order, to a temporary file renamed over the output at the end, so an
interrupted run never leaves a half-written file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentmath.errors import DataError
from agentmath.synth.detectors import (
    Detector,
    MinHashDetector,
    NGramDetector,
    SemanticDetector,
)


@dataclass(frozen=True)
class Item:
    """One text to check or to check against: its id, the problem text, where it is from."""

    id: str
    text: str
    source: str = ""


@dataclass(frozen=True)
class Row:
    """An input row: its :class:`Item`, its location (``line 3``), the parsed object, and the
    original JSONL line (None for JSON and Parquet input), which is what gets written back."""

    item: Item
    where: str
    data: dict[str, Any]
    raw: str | None = None


@dataclass(frozen=True)
class Removal:
    """A removed row: its id and 0-based input index, the detector that caught it, the score,
    and the matched item's id and source (a benchmark name, or the input itself for dedup)."""

    id: str
    index: int
    detector: str
    score: float
    matched: str
    source: str


@dataclass(frozen=True)
class DetectorStats:
    """What one detector stage did: rows it checked and removed, its threshold, its time."""

    detector: str
    threshold: float
    checked: int
    removed: int
    seconds: float


@dataclass
class DecontamReport:
    """The outcome: the input size, the kept row indices (input order), the removals (input
    order) and one :class:`DetectorStats` per detector stage."""

    total: int
    kept: list[int]
    removed: list[Removal] = field(default_factory=list)
    stages: list[DetectorStats] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``{"total", "kept" (a count), "removed": [{id, detector, score, matched, ...}],
        "detectors": [...]}``: the object ``agentmath decontam/dedup --json`` prints."""
        return {"total": self.total, "kept": len(self.kept),
                "removed": [asdict(r) for r in self.removed],
                "detectors": [asdict(s) for s in self.stages]}


@dataclass(frozen=True)
class DetectorSettings:
    """Every detector's parameters, with the defaults the CLI uses (see the detectors)."""

    ngram_n: int = 13
    ngram_threshold: float = 0.5
    minhash_threshold: float = 0.5
    minhash_perm: int = 128
    minhash_shingle: int = 2
    semantic_threshold: float = 0.85
    semantic_numbers: float = 0.5
    semantic_model: str | None = None
    semantic_device: str = "auto"
    semantic_batch_size: int = 32
    semantic_backend: str = "auto"


#: Detector name -> how it is built from the settings, in the order they run (cheapest first).
DETECTORS: dict[str, Callable[[DetectorSettings], Detector]] = {
    "ngram": lambda s: NGramDetector(n=s.ngram_n, threshold=s.ngram_threshold),
    "minhash": lambda s: MinHashDetector(threshold=s.minhash_threshold, num_perm=s.minhash_perm,
                                         shingle=s.minhash_shingle),
    "semantic": lambda s: SemanticDetector(
        threshold=s.semantic_threshold, numbers_agree=s.semantic_numbers,
        model=s.semantic_model, device=s.semantic_device, batch_size=s.semantic_batch_size,
        backend=s.semantic_backend),
}


def parse_detectors(names: str | Iterable[str]) -> list[str]:
    """``"ngram,semantic"`` (or a list) as known detector names in running order; a
    ValueError names an unknown one."""
    given = [n.strip().lower() for n in (names.split(",") if isinstance(names, str) else names)]
    given = [n for n in given if n]
    unknown = [n for n in given if n not in DETECTORS]
    if unknown or not given:
        problem = f"unknown detector {unknown[0]!r}" if unknown else "no detector given"
        raise ValueError(f"{problem}; choose from {', '.join(DETECTORS)}")
    return [n for n in DETECTORS if n in given]


def make_detectors(names: str | Iterable[str],
                   settings: DetectorSettings | None = None) -> list[Detector]:
    """The named detectors, configured by ``settings``, in running order."""
    s = settings or DetectorSettings()
    return [DETECTORS[name](s) for name in parse_detectors(names)]


Progress = Callable[[str, int], None]


def _ordered(detectors: Sequence[Detector]) -> list[Detector]:
    """Detectors in running order (known names first, cheapest first; others after)."""
    rank = {name: i for i, name in enumerate(DETECTORS)}
    return sorted(detectors, key=lambda d: rank.get(d.name, len(rank)))


#: One detector's pass: (detector, row indices still in) -> (indices kept, removals).
Stage = Callable[[Detector, list[int]], tuple[list[int], list[Removal]]]


def _cascade(rows: Sequence[Item], detectors: Sequence[Detector], stage: Stage,
             progress: Progress | None, against: Sequence[Item] = ()) -> DecontamReport:
    """Run ``stage`` for each detector, cheapest first, on the rows the previous ones kept;
    each pass is timed and counted, and its index released before the next one. A later
    detector with a ``prepare(texts)`` method (the embedding one) is handed every text first,
    to start on while the cheaper stages run on the other core."""
    remaining = list(range(len(rows)))
    report = DecontamReport(total=len(rows), kept=remaining)
    ordered = _ordered(detectors)
    for detector in ordered[1:]:
        prepare = getattr(detector, "prepare", None)
        if prepare is not None:
            prepare([a.text for a in against] + [r.text for r in rows])
    for detector in ordered:
        if progress:
            progress(detector.name, len(remaining))
        start = time.perf_counter()
        kept, removed = stage(detector, remaining)
        detector.index([])  # release the index before the next stage
        report.removed += removed
        report.stages.append(DetectorStats(detector.name, detector.threshold, len(remaining),
                                           len(remaining) - len(kept),
                                           round(time.perf_counter() - start, 3)))
        remaining = kept
    report.kept = remaining
    report.removed.sort(key=lambda r: r.index)
    return report


def decontaminate(rows: Sequence[Item], against: Sequence[Item],
                  detectors: Sequence[Detector], progress: Progress | None = None
                  ) -> DecontamReport:
    """Remove every row that matches an item of ``against``; ``matched`` is that item's id."""
    def stage(detector: Detector, remaining: list[int]) -> tuple[list[int], list[Removal]]:
        detector.index([a.text for a in against])
        matches = detector.query([rows[i].text for i in remaining])
        kept, removed = [], []
        for i, found in zip(remaining, matches, strict=True):
            if found:
                ref = against[found[0].ref]
                removed.append(Removal(rows[i].id, i, detector.name, found[0].score,
                                       ref.id, ref.source))
            else:
                kept.append(i)
        return kept, removed

    return _cascade(rows, detectors, stage, progress, against)


def deduplicate(rows: Sequence[Item], detectors: Sequence[Detector],
                progress: Progress | None = None) -> DecontamReport:
    """Remove every row that matches an earlier kept row (the first of each cluster stays);
    ``matched`` is the id of that kept row, ``score`` the score against it."""
    def stage(detector: Detector, remaining: list[int]) -> tuple[list[int], list[Removal]]:
        texts = [rows[i].text for i in remaining]
        detector.index(texts)
        matches = detector.query(texts, earlier_only=True)
        keep = [False] * len(texts)
        removed = []
        for q, found in enumerate(matches):
            hit = next((m for m in found if keep[m.ref]), None)
            if hit is None:
                keep[q] = True
                continue
            row, ref = rows[remaining[q]], rows[remaining[hit.ref]]
            removed.append(Removal(row.id, remaining[q], detector.name, hit.score,
                                   ref.id, ref.source))
        return [i for i, k in zip(remaining, keep, strict=True) if k], removed

    return _cascade(rows, detectors, stage, progress)


# --------------------------------------------------------------------------- reading, writing


def _row_error(path: Path, where: str, field_name: str | None, message: str) -> DataError:
    """A DataError naming the file, the line (or row) and the field, as datasets.py does."""
    return DataError(f"{path}: {where}: " + (f"field {field_name!r}: " if field_name else "")
                     + message)


def _jsonl_lines(path: Path) -> Iterator[tuple[str, Any, str]]:
    """``(where, object, raw line)`` per non-blank line of a JSONL file."""
    with path.open("rb") as handle:
        for lineno, data in enumerate(handle, start=1):
            where = f"line {lineno}"
            try:
                raw = data.decode("utf-8-sig" if lineno == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise _row_error(path, where, None, f"not valid UTF-8 ({exc.reason})") from None
            if not raw.strip():
                continue
            try:
                yield where, json.loads(raw), raw
            except json.JSONDecodeError as exc:
                raise _row_error(path, where, None, f"invalid JSON: {exc.msg} "
                                 f"(column {exc.colno})") from None


def _source_rows(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    """Rows of a .jsonl (raw lines kept), .json or .parquet file (read as datasets.py does)."""
    if path.suffix.lower() == ".jsonl":
        yield from _jsonl_lines(path)
        return
    from agentmath.datasets import _file_rows

    for where, obj in _file_rows(path):
        yield where, obj, None


def _row_id(obj: dict[str, Any], index: int, path: Path, where: str, id_field: str) -> str:
    """The row's id as text; its 0-based index when ``id_field`` is absent or null."""
    value = obj.get(id_field) if id_field else None
    if value is None:
        return str(index)
    if (isinstance(value, str) and value.strip()) or (
            isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise _row_error(path, where, id_field, f"must be a non-empty string or an integer, got "
                     f"{value!r}")


def read_rows(path: str | Path, problem_field: str = "problem", id_field: str = "id",
              source: str | None = None) -> list[Row]:
    """Every row of a JSONL/JSON/Parquet file, validated: the first malformed row raises a
    DataError naming the file, the line and the field. Duplicate ids are allowed (dedup
    exists to remove copied rows); a row without ``id_field`` gets its 0-based index."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    rows: list[Row] = []
    for index, (where, obj, raw) in enumerate(_source_rows(path)):
        if not isinstance(obj, dict):
            raise _row_error(path, where, None, f"row must be a JSON object, got "
                             f"{type(obj).__name__}")
        if problem_field not in obj:
            raise _row_error(path, where, problem_field, "is missing")
        text = obj[problem_field]
        if not isinstance(text, str):
            kind = "null" if text is None else type(text).__name__
            raise _row_error(path, where, problem_field, f"must be a string, got {kind}")
        if not text.strip():
            raise _row_error(path, where, problem_field, "is empty")
        item = Item(_row_id(obj, index, path, where, id_field), text, source or str(path))
        rows.append(Row(item, where, obj, raw))
    return rows


def load_against(spec: str | Sequence[str], *, data_dir: str | Path | None = None,
                 problem_field: str = "problem", id_field: str = "id") -> list[Item]:
    """The items of ``spec``: comma-separated built-in names (``math500,aime24``, read with
    :func:`agentmath.datasets.load_tasks`) or file paths (read with :func:`read_rows`)."""
    from agentmath.datasets import BUILTIN, load_tasks

    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec)]
    names = [n for n in names if n]
    if not names:
        raise DataError("--against names no dataset")
    items: list[Item] = []
    for name in names:
        if name in BUILTIN:
            items += [Item(t.id, t.problem, name) for t in load_tasks(name, data_dir=data_dir)]
        elif Path(name).expanduser().is_file():
            items += [row.item for row in read_rows(Path(name).expanduser(), problem_field,
                                                    id_field, source=name)]
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
