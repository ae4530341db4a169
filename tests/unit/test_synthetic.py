"""Tests of the synthetic problem generator: determinism, exact answers, steps, digits, split."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentmath.grading import extract_answer
from agentmath.tasks import Task, load_tasks
from agentmath.tasks.synthetic import (
    generate_problems,
    split,
    steps_of,
    to_task_rows,
)


@pytest.fixture(scope="module")
def problems() -> list[Task]:
    return generate_problems(300, seed=7)


def _replay(problem: Task) -> dict[str, int]:
    """Evaluate every step's expression in order, over the names of earlier steps."""
    env: dict[str, int] = {}
    for step in steps_of(problem):
        env[step.name] = eval(step.expr, {"__builtins__": {}}, dict(env))  # noqa: S307
    return env


def test_same_seed_same_problems() -> None:
    assert generate_problems(50, seed=3) == generate_problems(50, seed=3)
    assert generate_problems(50, seed=3) != generate_problems(50, seed=4)
    # a prefix does not depend on how many problems are asked for
    assert generate_problems(10, seed=3) == generate_problems(50, seed=3)[:10]


def test_ids_unique_and_named_by_seed(problems: list[Task]) -> None:
    assert [p.id for p in problems] == [f"syn-7-{i}" for i in range(len(problems))]


def test_answers_are_recomputed_from_steps(problems: list[Task]) -> None:
    for p in problems:
        env = _replay(p)
        for step in steps_of(p):
            assert env[step.name] == step.value, (p.id, step)
            assert f"= {step.value}." in step.text
        assert str(steps_of(p)[-1].value) == p.answer
        assert 0 < int(p.answer) < 10**12


def test_multi_step_with_fresh_names(problems: list[Task]) -> None:
    lengths = {len(steps_of(p)) for p in problems}
    assert lengths == {2, 3}
    for p in problems:
        names = [s.name for s in steps_of(p)]
        assert len(set(names)) == len(names)
        for i, step in enumerate(steps_of(p)[1:], 1):
            assert steps_of(p)[i - 1].name in step.expr  # each step builds on the previous one
            assert step.name.isidentifier()
    ops = {op for p in problems for s in steps_of(p) for op in ("+", "-", "*", "//")
           if f" {op} " in s.expr}
    assert ops == {"+", "-", "*", "//"}


def test_step_bounds() -> None:
    one = generate_problems(30, seed=1, min_steps=1, max_steps=1)
    assert all(len(steps_of(p)) == 1 for p in one)
    five = generate_problems(30, seed=1, min_steps=4, max_steps=5)
    assert {len(steps_of(p)) for p in five} <= {4, 5}
    for p in five:
        assert _replay(p)[steps_of(p)[-1].name] == int(p.answer)
    with pytest.raises(ValueError):
        generate_problems(3, seed=1, min_steps=3, max_steps=2)


def test_first_factors_have_the_requested_digits(problems: list[Task]) -> None:
    for p in problems:
        a, b = (int(x) for x in steps_of(p)[0].expr.split(" * "))
        assert 3 <= len(str(a)) <= 5 and 3 <= len(str(b)) <= 5
        assert str(a) in p.problem and str(b) in p.problem
    small = generate_problems(40, seed=2, digits=(2, 2))
    for p in small:
        assert all(len(str(int(x))) == 2 for x in steps_of(p)[0].expr.split(" * "))


def test_division_is_exact_and_numbers_in_text(problems: list[Task]) -> None:
    for p in problems:
        for step in steps_of(p):
            for literal in re.findall(r"\d+", step.expr):
                assert literal in p.problem, (p.id, literal)
            if "//" in step.expr:
                divisor = int(step.expr.split("//")[1])
                assert step.value * divisor == _replay(p)[step.expr.split()[0]]


def test_cot_ends_with_the_boxed_answer(problems: list[Task]) -> None:
    for p in problems:
        assert p.solution.endswith(f"The answer is \\boxed{{{p.answer}}}.")
        assert extract_answer(p.solution) == p.answer
        assert p.solution.splitlines()[:-1] == [s.text for s in steps_of(p)]
        assert p.problem.endswith("?")


def test_split_is_deterministic_and_disjoint(problems: list[Task]) -> None:
    train, test = split(problems, 50, seed=1)
    assert (train, test) == split(problems, 50, seed=1)
    assert len(test) == 50 and len(train) == len(problems) - 50
    assert {p.id for p in train}.isdisjoint({p.id for p in test})
    assert {p.id for p in train} | {p.id for p in test} == {p.id for p in problems}
    assert split(problems, 50, seed=2)[1] != test
    with pytest.raises(ValueError):
        split(problems, len(problems) + 1, seed=1)


def test_task_rows_load_as_an_eval_dataset(tmp_path: Path,
                                           problems: list[Task]) -> None:
    path = tmp_path / "syn.jsonl"
    rows = to_task_rows(problems[:20])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tasks = load_tasks(str(path))
    assert [(t.id, t.problem, t.answer) for t in tasks] == \
        [(p.id, p.problem, p.answer) for p in problems[:20]]
    assert tasks[0].meta["solution"] == problems[0].solution
