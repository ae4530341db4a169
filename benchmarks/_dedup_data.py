"""The corpus of ``benchmarks/dedup.py``: generated word problems, the real benchmark problems,
and planted near-duplicates with known ground truth.

Generated problems come from a dozen story templates (shopping, travel, geometry, probability,
remainders, ages, work rates, discounts, savings, polynomials, recipes, tiling), each with
several phrasings, optional opening and closing sentences, and slots filled from large word
lists (names and towns built from syllables, objects, places, colours) and random numbers, so
that two generated problems share a template at most, never the same story with only its
numbers changed. Near-duplicates are then planted, each after its source:

- ``verbatim``: the same text;
- ``latex``: the same problem, marked up differently (``$5$``, ``\\dfrac{1}{2}`` vs ``1/2``,
  ``\\times`` vs ``\\cdot``, ``\\left(``, display math);
- ``numbers``: every number replaced by another;
- ``reworded``: phrases swapped for paraphrases from a table of this file, sentences reordered,
  a filler sentence added (programmatic, so lighter than a person's rewording).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from _dedup_vocab import (
    ADJECTIVES,
    APIECE,
    BUY_VERBS,
    CLOSERS,
    CODAS,
    COLORS,
    CONTAINERS,
    DAYS,
    DIRECTIONS,
    EARN_VERBS,
    EVENTS,
    FACTS,
    FAMILIES,
    HOBBIES,
    JOBS,
    MONTHS,
    MOVE_VERBS,
    OBJECTS,
    ONSETS,
    OPENERS,
    PERIODS,
    PLACES,
    RATE_VERBS,
    SHAPES,
    SHARE_VERBS,
    STRUCTURES,
    SURFACES,
    UNITS,
    VOWELS,
)

_CHOICE = re.compile(r"\[([^\[\]]*)\]")


def _word(rng: random.Random, syllables: int) -> str:
    parts = [rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(syllables)]
    return ("".join(parts) + rng.choice(CODAS)).capitalize()


@dataclass
class Slots:
    """Random slot values for one problem; :meth:`fill` also resolves ``[a|b|c]``."""

    rng: random.Random

    def __post_init__(self) -> None:
        r = self.rng
        self.name, self.name2, self.name3 = (_word(r, r.randint(1, 2)) for _ in range(3))
        self.town, self.town2, self.town3 = (
            _word(r, 2) + r.choice(("ford", "ville", "port", "by", "ton", "wick", "mere"))
            for _ in range(3))
        self.obj, self.obj2, self.obj3 = r.sample(OBJECTS, 3)
        self.adj, self.adj2, self.adj3 = r.sample(ADJECTIVES, 3)
        self.place, self.place2 = r.sample(PLACES, 2)
        self.color, self.color2, self.color3 = r.sample(COLORS, 3)
        self.container, self.structure = r.choice(CONTAINERS), r.choice(STRUCTURES)
        self.month, self.day, self.unit = r.choice(MONTHS), r.choice(DAYS), r.choice(UNITS)
        self.rate_verb, self.rate_base = r.choice(RATE_VERBS)
        self.move_verb, self.move_base = r.choice(MOVE_VERBS)
        self.buy_verb, self.apiece, self.direction = (r.choice(BUY_VERBS), r.choice(APIECE),
                                                      r.choice(DIRECTIONS))
        self.period, self.surface, self.shape = (r.choice(PERIODS), r.choice(SURFACES),
                                                 r.choice(SHAPES))
        self.earn_verb, self.job, self.event = (r.choice(EARN_VERBS), r.choice(JOBS),
                                                r.choice(EVENTS))
        self.share_verb, self.hobby = r.choice(SHARE_VERBS), r.choice(HOBBIES)

    def n(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def fill(self, template: str) -> str:
        slots = {k: v for k, v in vars(self).items() if k != "rng"}
        text = _CHOICE.sub(lambda m: self.rng.choice(m.group(1).split("|")), template)
        text = text.format(**slots).format(**slots)  # slots may hold slots ({hobby})
        return _NUMBER_SLOT.sub(lambda m: str(self.rng.randint(int(m.group(1)),
                                                               int(m.group(2)))), text)


_NUMBER_SLOT = re.compile(r"<(-?\d+)-(-?\d+)>")


_FRACTION = "$\\frac{{{{<1-4>}}}}{{{{<5-9>}}}}$"
_PEOPLE = ("name", "name2", "name3", "town", "town2", "town3")


def _problem(base: Slots, used: set[frozenset[str]]) -> str:
    """3 or 4 facts (from the combinatorial families, or fixed ones), then the question of
    one of them. No two problems use the same set of facts, every fact draws its own words,
    and only the people and towns are shared: two problems have at most all but one fact
    template in common, and then differ in most of their words."""
    rng = base.rng
    while True:
        count = rng.choice((3, 3, 3, 4))
        families = rng.sample(FAMILIES, rng.choice((1, 2, 2, 3)))
        chosen = families + rng.sample(FACTS, count - len(families))
        key = frozenset(fact for fact, _ in chosen)
        if key not in used:
            used.add(key)
            break
    rng.shuffle(chosen)
    asked = rng.randrange(len(chosen))
    parts, question = [], ""
    for j, (fact, ask) in enumerate(chosen):
        slots = Slots(rng)
        for key in _PEOPLE:
            setattr(slots, key, getattr(base, key))
        parts.append(slots.fill(fact.replace("<frac>", _FRACTION)))
        if j == asked:
            question = slots.fill(ask.replace("<frac>", _FRACTION))
    return " ".join([*parts, question])


def generate(n: int, seed: int) -> list[str]:
    """``n`` distinct generated problems."""
    rng = random.Random(seed)
    used: set[frozenset[str]] = set()
    out: list[str] = []
    while len(out) < n:
        base = Slots(rng)
        opener = base.fill(rng.choice(OPENERS)) if rng.random() < 0.4 else ""
        out.append(" ".join(p for p in (opener, _problem(base, used), rng.choice(CLOSERS))
                            if p))
    return out


# --------------------------------------------------------------------------- planting

#: Paraphrases for ``reworded`` copies (written for this benchmark, not taken from the
#: normaliser's synonym table; some coincide with it, as common paraphrases do).
PARAPHRASES: tuple[tuple[str, str], ...] = (
    ("How much", "What amount"), ("How many", "What number of"), ("What is", "Determine"),
    ("Find", "Work out"), ("Compute", "Calculate"), ("Determine", "Find"), ("Let ", "Suppose "),
    ("buys", "purchases"), ("orders", "places an order for"), ("picks out", "selects"),
    ("apiece", "for each one"), ("total bill", "overall cost"), ("spend", "pay out"),
    ("average speed", "mean speed"), ("At the same moment", "Simultaneously"),
    ("pass each other", "cross paths"), ("measures", "has dimensions"), ("holds", "contains"),
    ("without replacement", "one after another without putting any back"),
    ("at random", "randomly"), ("What is the probability that", "How likely is it that"),
    ("the smallest number", "the least possible number"), ("left over", "remaining"),
    ("times as old as", "times the age of"), ("working together", "if they work side by side"),
    ("drains", "empties"), ("During the", "In the"), ("compounded yearly", "compounded annually"),
    ("more than the week before", "more than in the previous week"), ("writes", "puts"),
    ("are needed", "are required"), ("covers", "tiles"), ("Suppose", "Assume"),
    ("positive integers", "positive whole numbers"), ("such that", "so that"),
    ("the value of", "the numerical value of"), ("Express your answer", "Write your answer"),
    ("common fraction", "fraction in lowest terms"), ("in simplest form", "fully simplified"),
    ("There are", "We have"), ("largest", "biggest"), ("smallest", "least"),
    ("rolled", "tossed"), ("If ", "Given that "), ("takes", "requires"), ("chosen", "selected"),
    ("distinct", "different"), ("Every", "Each"), ("shown", "pictured"), ("equal", "identical"),
    ("each", "per item"), ("has just moved to", "recently relocated to"),
    ("keeps careful records of everything", "writes everything down"), ("saves", "puts aside"),
)
FILLERS = ("Consider the following problem.", "Here is a puzzle.", "Read carefully.",
           "Think about this situation.")
_SENTENCE = re.compile(r"(?<=[.?!])\s+(?=[A-Z])")
_MATH = re.compile(r"(\[asy\].*?\[/asy\]|\$\$.+?\$\$|\$.+?\$|\\\[.+?\\\]|\\\(.+?\\\))",
                   re.S)
_DIGITS = re.compile(r"\d+")


def reword(text: str, rng: random.Random) -> str:
    """Swap phrases for paraphrases, move one sentence, maybe add a filler sentence."""
    for old, new in PARAPHRASES:
        if old in text and rng.random() < 0.8:
            text = text.replace(old, new, 1 if rng.random() < 0.5 else -1)
    sentences = _SENTENCE.split(text)
    if len(sentences) >= 3:  # the question stays last; swap two of the others
        i = rng.randrange(len(sentences) - 2)
        sentences[i], sentences[i + 1] = sentences[i + 1], sentences[i]
    if rng.random() < 0.5:
        sentences.insert(0, rng.choice(FILLERS))
    return " ".join(sentences)


def renumber(text: str, rng: random.Random) -> str:
    """Every integer replaced by another of the same number of digits."""
    def other(m: re.Match[str]) -> str:
        digits = len(m.group())
        lo, hi = (1, 9) if digits == 1 else (10 ** (digits - 1), 10 ** digits - 1)
        value = int(m.group())
        choice = rng.randint(lo, hi)
        while choice == value and hi > lo:
            choice = rng.randint(lo, hi)
        return str(choice)
    return _DIGITS.sub(other, text)


def _relatex_math(segment: str, rng: random.Random) -> str:
    """One math segment marked up differently (same mathematics); Asymptote code as is."""
    if segment.startswith("[asy]"):
        return segment
    inner = segment.strip("$")
    if segment.startswith("\\[") or segment.startswith("\\("):
        inner = segment[2:-2]
    inner = re.sub(r"\\frac\{(\w)\}\{(\w)\}", r"\\dfrac\1\2", inner)
    inner = inner.replace("\\frac", rng.choice(("\\dfrac", "\\tfrac")))
    inner = inner.replace("\\cdot", "\\times") if "\\cdot" in inner else inner.replace(
        "\\times", "\\cdot")
    if "\\left" not in inner and inner.count("(") == inner.count(")"):
        inner = inner.replace("(", "\\left(").replace(")", "\\right)")
    inner = re.sub(r"\^(\w)", r"^{\1}", inner)
    inner = re.sub(r"\s*([=+])\s*", r" \1 ", inner)
    display = segment.startswith(("$$", "\\["))
    return (rng.choice(("\\[{}\\]", "$${}$$")) if display else
            rng.choice(("\\({}\\)", "${}$"))).format(inner.strip())


def relatex(text: str, rng: random.Random) -> str:
    """The same problem marked up differently: math segments rewritten (``\\dfrac``,
    ``\\times``/``\\cdot``, ``\\left(``, ``\\(..\\)``), bare numbers put in ``$..$``;
    currency (``$5``, every ``$`` followed by a digit) written ``\\$5``."""
    if all(m.group(1).isdigit() for m in re.finditer(r"\$(.)", text)):
        text = re.sub(r"\$(?=\d)", lambda m: "\\$", text)
        parts = [text]
    else:
        parts = _MATH.split(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(_relatex_math(part, rng))
        else:
            out.append(re.sub(r"(?<![\\$\w.])(?<!\d,)(\d+(?:,\d{3})*(?:\.\d+)?)"
                              r"(?![\w$]|\.\d|,\d)", r"$\1$", part))
    return "".join(out).replace("\\$$", "\\$")


@dataclass
class Corpus:
    """Texts in order, with their ids, cluster (the source's index) and planted kind."""

    ids: list[str]
    texts: list[str]
    cluster: list[int]
    kind: list[str]


KINDS = ("verbatim", "latex", "numbers", "reworded")
_MAKE = {"verbatim": lambda t, r: t, "latex": relatex, "numbers": renumber,
         "reworded": reword}


def build_corpus(n: int, real: list[tuple[str, str]], seed: int = 0,
                 planted_share: float = 0.05) -> Corpus:
    """``n`` problems: the ``real`` (id, text) ones, generated ones, and ``planted_share * n``
    planted copies (an equal number of each kind), each placed after its source."""
    rng = random.Random(seed)
    planted = int(n * planted_share)
    real = rng.sample(real, min(len(real), n // 5))  # at most a fifth of a small corpus
    base = list(real)
    base += [(f"gen-{i}", t) for i, t in enumerate(generate(n - planted - len(base), seed))]
    rng.shuffle(base)
    keys: list[tuple[float, str, str, int, str]] = [
        (float(i), rid, text, i, "") for i, (rid, text) in enumerate(base)]
    made = 0
    while made < planted:
        kind = KINDS[made % len(KINDS)]
        src = rng.randrange(len(base))
        copy = _MAKE[kind](base[src][1], rng)
        if kind != "verbatim" and copy == base[src][1]:
            continue  # nothing to change (no numbers, no markup): pick another source
        keys.append((rng.uniform(src + 0.5, len(base)), f"planted-{made}-{kind}", copy, src,
                     kind))
        made += 1
    keys.sort()
    return Corpus([k[1] for k in keys], [k[2] for k in keys], [k[3] for k in keys],
                  [k[4] for k in keys])
