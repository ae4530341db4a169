"""Seeded synthetic word problems: multi-step, arithmetic-heavy, exact integer answers.

Each problem is a short story from one of a few templates (a warehouse, a factory, a shop...)
whose solution is a chain of :class:`Step` s: first a product of two 3-5 digit numbers, then
additions, subtractions and optionally a final multiplication or an exact division. The numbers
are large on purpose: a small model cannot multiply 3827 * 46 in its head, so these problems
are where running code helps, which is what code injection (:mod:`agentmath.synth`)
teaches. The language is simple and regular so that a tiny model can learn it.

Every step knows its Python expression over earlier step names, its value and its sentence of
reasoning, so the text chain-of-thought and the tool trajectory come from the same source.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentmath.tasks.task import Task

MAX_ANSWER = 10**12 - 1  # answers stay within 12 digits


@dataclass(frozen=True)
class Step:
    """One step of a solution: ``name = expr`` evaluates to ``value``; ``text`` explains it.

    ``text`` is ``"<premise>, so <what> is <arithmetic> = <value>."``; ``what`` names the
    computed quantity ("the number of boxes") so that a converter can say what it computes
    without the number.
    """

    expr: str  # python expression over earlier names and literals, e.g. "boxes + 530"
    name: str  # the variable it defines, e.g. "boxes_now"
    value: int
    text: str
    what: str = ""


@dataclass(frozen=True)
class _Template:
    """The phrases of one story. ``{a}``, ``{b}``, ``{c}`` are filled with numbers."""

    noun: str  # plural thing being counted; also the first variable's name
    intro: str  # problem sentences for the first product (a, b)
    premise: str  # step premise for the first product (a, b)
    add: str  # clause: c more things arrive
    sub: str  # clause: c things go away
    mul: str  # clause: there are c copies of the whole story
    mul_what: str
    mul_question: str
    div: str  # clause: everything is shared equally among c
    div_what: str
    div_question: str
    question: str  # question after the first product, additions and subtractions


TEMPLATES: tuple[_Template, ...] = (
    _Template("boxes", "A warehouse has {a} shelves. Each shelf holds {b} boxes.",
              "There are {a} shelves with {b} boxes each",
              "{c} more boxes are delivered", "{c} boxes are sold",
              "the company has {c} warehouses like this one", "the number of boxes in all",
              "How many boxes does the company have in all?",
              "all the boxes are shared equally among {c} stores",
              "the number of boxes for each store", "How many boxes does each store get?",
              "How many boxes are in the warehouse now?"),
    _Template("parts", "A factory has {a} machines. Each machine makes {b} parts a week.",
              "There are {a} machines making {b} parts each",
              "{c} more parts are made by hand", "{c} parts fail the quality check",
              "the factory works like this for {c} weeks", "the number of parts in all",
              "How many parts are made in all?",
              "the parts are packed equally into {c} crates",
              "the number of parts in each crate", "How many parts go in each crate?",
              "How many good parts does the factory have now?"),
    _Template("apples", "A farm has {a} rows of trees. Each row gives {b} apples.",
              "There are {a} rows with {b} apples each",
              "{c} more apples are bought at the market", "{c} apples are eaten",
              "there are {c} farms like this one", "the number of apples in all",
              "How many apples do all the farms have?",
              "the apples are packed equally into {c} bags",
              "the number of apples in each bag", "How many apples go in each bag?",
              "How many apples does the farm have now?"),
    _Template("kilometers", "A train makes {a} trips. Each trip is {b} kilometers long.",
              "There are {a} trips of {b} kilometers each",
              "the train goes {c} more kilometers to the depot",
              "{c} kilometers of the trips are cancelled",
              "there are {c} trains doing the same", "the number of kilometers in all",
              "How many kilometers do all the trains travel?",
              "the kilometers are shared equally among {c} drivers",
              "the number of kilometers for each driver",
              "How many kilometers does each driver travel?",
              "How many kilometers does the train travel?"),
    _Template("dollars", "A shop sells {a} lamps. Each lamp costs {b} dollars.",
              "The shop sells {a} lamps at {b} dollars each",
              "the shop also gets {c} dollars in tips", "the shop pays {c} dollars for rent",
              "there are {c} shops like this one", "the number of dollars in all",
              "How many dollars do all the shops have?",
              "the money is shared equally among {c} workers",
              "the number of dollars for each worker", "How many dollars does each worker get?",
              "How many dollars does the shop have now?"),
    _Template("sheets", "A school has {a} classes. Each class gets {b} sheets of paper.",
              "There are {a} classes with {b} sheets each",
              "{c} more sheets are bought", "{c} sheets are thrown away",
              "there are {c} schools like this one", "the number of sheets in all",
              "How many sheets do all the schools have?",
              "the sheets are shared equally among {c} teachers",
              "the number of sheets for each teacher", "How many sheets does each teacher get?",
              "How many sheets does the school have now?"),
    _Template("liters", "A pump runs for {a} minutes. It moves {b} liters each minute.",
              "The pump runs {a} minutes at {b} liters each",
              "{c} more liters come from the rain", "{c} liters leak out",
              "there are {c} pumps like this one", "the number of liters in all",
              "How many liters do all the pumps move?",
              "the water is poured equally into {c} tanks",
              "the number of liters in each tank", "How many liters go in each tank?",
              "How many liters are in the pool now?"),
    _Template("cookies", "A bakery bakes {a} trays. Each tray has {b} cookies.",
              "There are {a} trays with {b} cookies each",
              "{c} more cookies are baked", "{c} cookies are sold",
              "the bakery does this for {c} days", "the number of cookies in all",
              "How many cookies are baked in all?",
              "the cookies are packed equally into {c} boxes",
              "the number of cookies in each box", "How many cookies go in each box?",
              "How many cookies does the bakery have now?"),
)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _number(rng: random.Random, digits: tuple[int, int]) -> int:
    """A number with between digits[0] and digits[1] digits (uniform over the digit count)."""
    k = rng.randint(digits[0], digits[1])
    return rng.randint(10 ** (k - 1), 10**k - 1)


def _divisor(rng: random.Random, value: int) -> int | None:
    """A divisor of ``value`` between 11 and 999 (so the quotient is exact), or None."""
    found = [d for d in range(11, 1000) if value % d == 0 and value // d > 1]
    return rng.choice(found) if found else None


def _unique(name: str, used: set[str]) -> str:
    candidate, k = name, 2
    while candidate in used:
        candidate, k = f"{name}_{k}", k + 1
    used.add(candidate)
    return candidate


def _next_step(rng: random.Random, t: _Template, prev: Step, final: bool,
               digits: tuple[int, int], used: set[str]) -> tuple[Step, str, str]:
    """One follow-up step after ``prev``: (step, problem sentence, kind)."""
    x = prev.value
    kinds = ["add", "sub", "mul", "div"] if final else ["add", "sub"]
    kind = rng.choice(kinds)
    c = 0
    if kind == "div":
        c = _divisor(rng, x) or 0
        kind = "div" if c else "mul"
    if kind == "mul":
        c = min(_number(rng, digits), MAX_ANSWER // x)
        kind = "mul" if c >= 11 else "add"
    if kind == "add":
        c = _number(rng, digits)
    elif kind == "sub":
        c = min(_number(rng, digits), x // 2)
    clause = getattr(t, kind).format(c=c)
    noun = t.noun
    if kind in ("add", "sub"):
        op, value, what = ("+", x + c, f"the number of {noun} now") if kind == "add" else \
            ("-", x - c, f"the number of {noun} now")
        name = _unique(f"{noun}_now", used)
        expr, shown, sentence = f"{prev.name} {op} {c}", f"{x} {op} {c}", f"Then {clause}."
    elif kind == "mul":
        value, what, name = x * c, t.mul_what, _unique(f"all_{noun}", used)
        expr, shown, sentence = f"{prev.name} * {c}", f"{x} * {c}", f"{_cap(clause)}."
    else:
        value, what, name = x // c, t.div_what, _unique(f"{noun}_each", used)
        expr, shown, sentence = f"{prev.name} // {c}", f"{x} / {c}", f"{_cap(clause)}."
    text = f"{_cap(clause)}, so {what} is {shown} = {value}."
    return Step(expr, name, value, text, what), sentence, kind


def _make_problem(rng: random.Random, pid: str, n_steps: int,
                  digits: tuple[int, int]) -> Task:
    """One problem with exactly ``n_steps`` steps from a randomly chosen template."""
    t = rng.choice(TEMPLATES)
    a, b = _number(rng, digits), _number(rng, digits)
    what = f"the number of {t.noun}"
    first = Step(f"{a} * {b}", t.noun, a * b,
                 f"{t.premise.format(a=a, b=b)}, so {what} is {a} * {b} = {a * b}.", what)
    steps, sentences, kind = [first], [t.intro.format(a=a, b=b)], "first"
    used = {t.noun}
    for i in range(1, n_steps):
        step, sentence, kind = _next_step(rng, t, steps[-1], i == n_steps - 1, digits, used)
        steps.append(step)
        sentences.append(sentence)
    question = {"mul": t.mul_question, "div": t.div_question}.get(kind, t.question)
    answer = str(steps[-1].value)
    cot = "\n".join(s.text for s in steps) + f"\nThe answer is \\boxed{{{answer}}}."
    return Task(pid, " ".join([*sentences, question]), answer,
                {"solution": cot, "steps": tuple(steps)})


def generate_problems(n: int, seed: int, *, min_steps: int = 2, max_steps: int = 3,
                      digits: tuple[int, int] = (3, 5)) -> list[Task]:
    """``n`` problems, the same for the same arguments; ids are ``syn-{seed}-{i}``.

    Each is a :class:`Task` whose ``meta`` holds the text chain-of-thought (``solution``) and
    the structured steps (``steps``, a tuple of :class:`Step`) that the rule-based converter
    turns into code.

    Each has between ``min_steps`` and ``max_steps`` steps; the numbers in the story have
    between ``digits[0]`` and ``digits[1]`` digits (divisors of an exact division excepted:
    they have 2-3), and every answer is a positive integer below 10**12.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    lo, hi = digits
    if not 1 <= lo <= hi or 2 * hi > 12:
        raise ValueError(f"digits must satisfy 1 <= lo <= hi <= 6, got {digits}")
    rng = random.Random(f"agentmath-synthetic-{seed}")
    return [_make_problem(rng, f"syn-{seed}-{i}", rng.randint(min_steps, max_steps), digits)
            for i in range(n)]


def split(problems: Sequence[Task], test_size: int,
          seed: int) -> tuple[list[Task], list[Task]]:
    """(train, test): ``test_size`` problems drawn with ``seed`` for test, the rest for train.

    Both keep the input order, so the split is deterministic and easy to inspect.
    """
    if not 0 <= test_size <= len(problems):
        raise ValueError(f"test_size must be in [0, {len(problems)}], got {test_size}")
    test_idx = set(random.Random(f"agentmath-split-{seed}").sample(range(len(problems)),
                                                                    test_size))
    train = [p for i, p in enumerate(problems) if i not in test_idx]
    test = [p for i, p in enumerate(problems) if i in test_idx]
    return train, test


def make_problems(seed: int, train: int, test: int,
                  max_digits: int) -> tuple[list[Task], list[Task]]:
    """(train, test): ``train + test`` seeded problems with operands of 3..``max_digits``
    digits, ``test`` of them held out (the tool model's and the demo's problems)."""
    problems = generate_problems(train + test, seed, digits=(3, max_digits))
    return split(problems, test, seed)


def text_problem_ids(problems: Sequence[Task], share: float, seed: int) -> set[str]:
    """The ids of a seeded ``share`` of ``problems`` (one draw per problem, in order) that
    are trained as text records instead of tool trajectories; none when ``share`` is 0."""
    if share <= 0:
        return set()
    rng = random.Random(f"agentmath-tool-model-text-{seed}")
    return {p.id for p in problems if rng.random() < share}


def to_task_rows(problems: Sequence[Task]) -> list[dict[str, Any]]:
    """Rows (``id``, ``problem``, ``answer``, ``solution``) for a JSONL file that
    ``agentmath eval --dataset file.jsonl`` loads as tasks (``solution`` lands in meta)."""
    return [{"id": p.id, "problem": p.problem, "answer": p.answer, "solution": p.solution}
            for p in problems]


def steps_of(task: Task) -> tuple[Step, ...]:
    """The structured steps of a synthetic task (``meta["steps"]``); () for any other task."""
    steps = task.meta.get("steps")
    if isinstance(steps, tuple | list) and steps and all(isinstance(s, Step) for s in steps):
        return tuple(steps)
    return ()
