"""Benchmark decontamination and near-duplicate removal with the detectors of
:mod:`agentmath.synth.detectors` (word N-grams, MinHash LSH, sentence embeddings).

- :func:`decontaminate` drops the rows that match an item of a benchmark (or any dataset);
- :func:`deduplicate` drops, within one dataset, every row that matches an earlier kept row,
  so the first row of each cluster of near-duplicates stays.

A match between two rows that both carry a reference answer is *spared* (kept, and listed in
the report) when the two ask another question: other answers, and texts that differ in more
than their numbers (:mod:`agentmath.synth.questions`).

Detectors run as a cascade, cheapest first (``ngram``, ``minhash``, ``semantic``): each sees
only the rows the previous ones kept. So every removal names the first detector that caught it,
with that detector's score and the matched item, and the embedding model (the slow one) reads
only what the lexical detectors let through. A detector's index is released when its stage
ends, so the peak memory is the largest stage's, not the sum.

Rows are read and written by :mod:`agentmath.synth.rows`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentmath.synth.config import DetectorSettings
from agentmath.synth.detectors import (
    Detector,
    Match,
    MinHashDetector,
    NGramDetector,
    PreparesAhead,
    SemanticDetector,
)
from agentmath.synth.questions import asks_another_question
from agentmath.synth.rows import Item


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
    order), one :class:`DetectorStats` per detector stage, and the kept rows whose only
    match(es) asked another question (``spared``: the first such match of each, input order)."""

    total: int
    kept: list[int]
    removed: list[Removal] = field(default_factory=list)
    stages: list[DetectorStats] = field(default_factory=list)
    spared: list[Removal] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``{"total", "kept" (a count), "removed": [{id, detector, score, matched, ...}],
        "spared": [...], "detectors": [...]}``: what ``agentmath decontam/dedup --json``
        prints."""
        return {"total": self.total, "kept": len(self.kept),
                "removed": [asdict(r) for r in self.removed],
                "spared": [asdict(r) for r in self.spared],
                "detectors": [asdict(s) for s in self.stages]}


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

#: Whether a matched pair asks two different questions (row, matched item) -> bool; None in
#: :func:`decontaminate` / :func:`deduplicate` turns the same-story rule off.
SpareRule = Callable[[Item, Item], bool]


def other_question(row: Item, ref: Item) -> bool:
    """The default :data:`SpareRule`: :func:`~agentmath.synth.questions.asks_another_question`."""
    return asks_another_question(row.text, row.answer, ref.text, ref.answer)


def _first_hit(index: int, row: Item, candidates: Iterable[tuple[Match, Item]],
               spare: SpareRule | None, spared: dict[int, Removal], detector: str
               ) -> tuple[Match, Item] | None:
    """The first of ``candidates`` (a detector's matches of row ``index``, best first, with
    the items they point at) that ``spare`` does not call another question; the first one it
    spares is noted in ``spared`` (a later stage may spare the row again: the first stays)."""
    for match, ref in candidates:
        if spare is not None and spare(row, ref):
            spared.setdefault(index, Removal(row.id, index, detector, match.score, ref.id,
                                             ref.source))
            continue
        return match, ref
    return None


def _cascade(rows: Sequence[Item], detectors: Sequence[Detector], stage: Stage,
             progress: Progress | None, against: Sequence[Item] = (),
             spared: dict[int, Removal] | None = None) -> DecontamReport:
    """Run ``stage`` for each detector, cheapest first, on the rows the previous ones kept;
    each pass is timed and counted, and its index released before the next one. A later
    detector that :class:`PreparesAhead` (the embedding one) is handed every text first,
    to start on while the cheaper stages run on the other core."""
    remaining = list(range(len(rows)))
    report = DecontamReport(total=len(rows), kept=remaining)
    ordered = _ordered(detectors)
    for detector in ordered[1:]:
        if isinstance(detector, PreparesAhead):
            detector.prepare([a.text for a in against] + [r.text for r in rows])
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
    kept = set(remaining)
    report.spared = [r for i, r in sorted((spared or {}).items()) if i in kept]
    return report


def decontaminate(rows: Sequence[Item], against: Sequence[Item],
                  detectors: Sequence[Detector], progress: Progress | None = None,
                  spare: SpareRule | None = other_question) -> DecontamReport:
    """Remove every row that matches an item of ``against``; ``matched`` is that item's id.
    A match ``spare`` says asks another question does not count (the next one may)."""
    spared: dict[int, Removal] = {}

    def stage(detector: Detector, remaining: list[int]) -> tuple[list[int], list[Removal]]:
        detector.index([a.text for a in against])
        matches = detector.query([rows[i].text for i in remaining])
        kept, removed = [], []
        for i, found in zip(remaining, matches, strict=True):
            hit = _first_hit(i, rows[i], ((m, against[m.ref]) for m in found), spare, spared,
                             detector.name)
            if hit is None:
                kept.append(i)
                continue
            match, ref = hit
            removed.append(Removal(rows[i].id, i, detector.name, match.score, ref.id,
                                   ref.source))
        return kept, removed

    return _cascade(rows, detectors, stage, progress, against, spared)


def deduplicate(rows: Sequence[Item], detectors: Sequence[Detector],
                progress: Progress | None = None,
                spare: SpareRule | None = other_question) -> DecontamReport:
    """Remove every row that matches an earlier kept row (the first of each cluster stays);
    ``matched`` is the id of that kept row, ``score`` the score against it. A match ``spare``
    says asks another question does not count."""
    spared: dict[int, Removal] = {}

    def stage(detector: Detector, remaining: list[int]) -> tuple[list[int], list[Removal]]:
        texts = [rows[i].text for i in remaining]
        detector.index(texts)
        matches = detector.query(texts, earlier_only=True)
        keep = [False] * len(texts)
        removed = []
        for q, found in enumerate(matches):
            hit = _first_hit(remaining[q], rows[remaining[q]],
                             ((m, rows[remaining[m.ref]]) for m in found if keep[m.ref]),
                             spare, spared, detector.name)
            if hit is None:
                keep[q] = True
                continue
            match, ref = hit
            removed.append(Removal(rows[remaining[q]].id, remaining[q], detector.name,
                                   match.score, ref.id, ref.source))
        return [i for i, k in zip(remaining, keep, strict=True) if k], removed

    return _cascade(rows, detectors, stage, progress, spared=spared)
