"""Hand-written text normalisation for near-duplicate detection of math problems.

Why hand-written: no general library knows that ``$\\dfrac12$``, ``\\frac{1}{2}`` and ``1/2``
are the same text, that ``\\left(`` is ``(``, that ``\\cdot``, ``\\times`` and ``*`` all
multiply, that ``30^\\circ`` is ``30 degrees``, or that a problem with its numbers changed is
still the same problem. Two levels:

- :func:`canonical_text`: LaTeX and Unicode math rewritten as plain lowercase text, numbers
  kept; :func:`model_text`, what the embedding model reads, is that without function words;
- :func:`fingerprint`: the token stream the N-gram and MinHash detectors compare: numbers
  (digits, fractions, decimals, number words) masked as ``#``, stopwords and punctuation
  dropped, common synonyms of problem wording mapped to one word (compute / calculate /
  determine -> find, "how many" -> count), plural and verb endings stripped. Verbatim copies,
  LaTeX reformattings, number changes and light rewordings collapse onto the same tokens, while
  two problems that merely share a topic still differ in most of theirs. A very short text
  (fewer than :data:`MIN_WORDS_TO_MASK` words, "What is $513^2-487^2$?") keeps its numbers:
  there the numbers are the problem.

:func:`numbers` lists a text's numbers as written; :func:`number_agreement` compares two lists
(the semantic detector's check that a match keeps the numbers).
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Sequence

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
@functools.lru_cache(maxsize=1 << 17)
def canonical_text(text: str) -> str:
    """``text`` with LaTeX and Unicode math rewritten as plain lowercase text, numbers kept
    (``"$\\dfrac12 \\cdot 3$"`` -> ``"1 / 2 * 3"``); the form the embedding model reads.
    Cached: the fingerprint, the model's text and the numbers of one row all start here."""
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


#: Function words left out of what the embedding model reads (negations and quantifiers stay):
#: about a sixth fewer tokens, and rewordings and distinct problems separate as well as with
#: the full text on the built-in benchmarks.
_MODEL_STOPWORDS = _STOPWORDS - frozenset(
    "not no more most than each every all only exactly both either neither same other another "
    "many much".split())


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


@functools.lru_cache(maxsize=1 << 16)
def model_text(text: str) -> str:
    """What the embedding model reads: :func:`canonical_text` without function words (numbers
    kept: a copy with other numbers is the lexical detectors' catch, and masked numbers would
    make every short calculation look alike)."""
    return " ".join(w for w in canonical_text(text).split() if w not in _MODEL_STOPWORDS)


def _tokens(text: str) -> list[str]:
    """The fingerprint tokens of ``text``, each number one token as written (``1/2``)."""
    canon = canonical_text(text).replace("'", "")
    canon = _NUMBER.sub(lambda m: " " + m.group().replace(" ", "") + " ", canon)
    tokens: list[str] = []
    for word in _apply_phrases(_TOKEN.findall(canon)):
        if word in _NUMBER_WORDS:
            tokens.append(_NUMBER_WORDS[word])
            continue
        if word in _STOPWORDS:
            continue
        mapped = _SYNONYMS.get(word) or _SYNONYMS.get(_stem(word)) or _stem(word)
        if mapped == "count" and tokens and tokens[-1] == "find":
            tokens.pop()  # "find the number of" == "how many"
        tokens.extend(sys.intern(t) for t in mapped.split())
    return tokens


def _masked(tokens: Sequence[str]) -> tuple[str, ...]:
    """``tokens`` with every number (a token starting with a digit, or ``.5``) as ``#``."""
    return tuple("#" if t[0].isdigit() or (t[0] == "." and len(t) > 1) else t for t in tokens)


@functools.lru_cache(maxsize=1 << 17)
def fingerprint(text: str) -> tuple[str, ...]:
    """The token stream the N-gram and MinHash detectors compare: :func:`canonical_text`,
    phrases and synonyms mapped, stopwords dropped, words stemmed, brackets, ``*`` and
    punctuation dropped (they differ between equal formattings), and every number (digits,
    fractions, decimals, number words) masked as ``#`` -- unless the text has fewer than
    :data:`MIN_WORDS_TO_MASK` words, then numbers are kept."""
    tokens = number_tokens(text)
    return tokens if keeps_numbers(tokens) else _masked(tokens)


def keeps_numbers(tokens: Sequence[str]) -> bool:
    """Whether a text of these fingerprint tokens is too short in words to mask its numbers
    (fewer than :data:`MIN_WORDS_TO_MASK`): its fingerprint is then :func:`number_tokens`, and
    its N-grams differ from those of a longer row quoting it, which masks them."""
    return sum(1 for t in tokens if len(t) > 1 and t.isalpha()) < MIN_WORDS_TO_MASK


@functools.lru_cache(maxsize=1 << 17)
def number_tokens(text: str) -> tuple[str, ...]:
    """The fingerprint's tokens of ``text`` with its numbers kept as written, however long the
    text: the fingerprint masks them from these, and a short problem is found inside a longer
    row by them (:mod:`agentmath.synth.containment`)."""
    return tuple(_tokens(text))


@functools.lru_cache(maxsize=1 << 14)
def masked_wording(text: str) -> tuple[str, ...]:
    """The fingerprint's tokens of ``text`` with every number masked as ``#``, however short
    the text: two texts with equal masked wording differ at most in their numbers (a copy,
    or a renumbered copy). The same-story rule (:mod:`agentmath.synth.questions`) uses it;
    cached, as one benchmark item may be matched by many rows."""
    return _masked(number_tokens(text))


@functools.lru_cache(maxsize=1 << 17)
def numbers(text: str) -> tuple[str, ...]:
    """The numbers of ``text`` as written after normalisation (``\\frac12`` -> ``1/2``,
    ``seven`` -> ``7``), in order; the semantic detector's check that a match keeps them.
    The numbers of :func:`_tokens` without its phrase, stopword and stemming passes (no
    phrase or synonym holds a number), which cost two thirds of the time."""
    canon = _NUMBER.sub(lambda m: " " + m.group().replace(" ", "") + " ",
                        canonical_text(text).replace("'", ""))
    found = (_NUMBER_WORDS.get(word, word) for word in _TOKEN.findall(canon))
    return tuple(t for t in found if t[0].isdigit() or t[0] == ".")


def number_agreement(a: Sequence[str], b: Sequence[str]) -> float:
    """Multiset Jaccard similarity of two texts' :func:`numbers` (1.0 when neither has any)."""
    if not a and not b:
        return 1.0
    ca, cb = Counter(a), Counter(b)
    return sum((ca & cb).values()) / sum((ca | cb).values())
