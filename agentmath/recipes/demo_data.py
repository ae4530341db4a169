"""The demo's data: its three problem splits (train, validation, test), both SFT mixtures and
the tokenizer, written under the demo's ``out`` folder.

The test problems are the held-out set of the final table and nothing else; every choice the
demo makes is measured on the validation problems, which come from the same seeded generator
as the others, disjoint from them by construction (:func:`split_problems`) and checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath import _loop as event_loop
from agentmath.recipes.demo_config import FORMAT, TEXT_SYSTEM, TOOL_SYSTEM, DemoConfig

if TYPE_CHECKING:
    from agentmath.synth.tool_records import Conversion
    from agentmath.tasks import Task

TRAIN_FILE, VALIDATION_FILE, TEST_FILE = "train.jsonl", "validation.jsonl", "test.jsonl"


@dataclass(frozen=True)
class DemoData:
    """What the demo trains, chooses and evaluates on (written under its ``out`` folder)."""

    mixed: list[dict[str, Any]]  # the tool model's SFT records: verified tool trajectories, text
    text_examples: list[dict[str, Any]]  # the text-only model's: every problem as text
    conversion: Conversion  # the code injection's funnel (kept, dropped, text)
    train_file: Path
    validation_file: Path  # every choice of the demo is measured on these problems
    test_file: Path  # read by the final evaluation only
    tokenizer_dir: Path
    n_validation: int
    n_test: int


def split_problems(cfg: DemoConfig) -> tuple[list[Task], list[Task], list[Task]]:
    """(train, validation, test) from one seeded generator: the first ``train_problems +
    test_problems`` problems split into train and test, then the validation problems from
    those the generator makes after them, skipping any whose text is already taken (the
    generator may repeat a story by chance). Raises ValueError if the splits share an id or a
    problem text."""
    from agentmath.tasks.synthetic import generate_problems, split

    n, want = cfg.train_problems + cfg.test_problems, cfg.validation_problems
    problems = generate_problems(n + 2 * want, cfg.seed, digits=(3, cfg.max_digits))
    train, test = split(problems[:n], cfg.test_problems, cfg.seed)
    taken = {p.problem for p in problems[:n]}
    validation = []
    for task in problems[n:]:
        if len(validation) == want:
            break
        if task.problem not in taken:
            taken.add(task.problem)
            validation.append(task)
    if len(validation) < want:
        raise ValueError(f"the generator gave {len(validation)} new problems for "
                         f"{want} validation problems (seed {cfg.seed})")
    check_disjoint({"train": train, "validation": validation, "test": test})
    return train, validation, test


def check_disjoint(splits: dict[str, Sequence[Task]]) -> None:
    """ValueError naming the two splits and the problem when any two share an id or a
    problem text."""
    names = list(splits)
    for i, first in enumerate(names):
        ids = {t.id: t for t in splits[first]}
        texts = {t.problem: t for t in splits[first]}
        for second in names[i + 1:]:
            for task in splits[second]:
                other = ids.get(task.id) or texts.get(task.problem)
                if other is not None:
                    raise ValueError(f"the {first} and {second} problems overlap: "
                                     f"{other.id!r} and {task.id!r}")


def prepare_data(cfg: DemoConfig, out: Path,
                 stage: Callable[[str], None] = print) -> DemoData:
    """The demo's problems (train/validation/test JSONL), both SFT mixtures and the
    tokenizer."""
    from agentmath.jsonl import write_jsonl
    from agentmath.models.tiny import build_tokenizer
    from agentmath.synth.inject import text_only_example
    from agentmath.synth.tool_records import tool_records
    from agentmath.tasks.synthetic import text_problem_ids, to_task_rows
    from agentmath.train.grow import corpus_texts

    out.mkdir(parents=True, exist_ok=True)
    stage("generating problems")
    train, validation, test = split_problems(cfg)
    for rows, name in ((train, TRAIN_FILE), (validation, VALIDATION_FILE), (test, TEST_FILE)):
        write_jsonl(to_task_rows(rows), out / name)
    # the tool model's data: a seeded text_share of the problems as text chain-of-thought
    # (under the tool system prompt), the rest as verified tool trajectories
    text_ids = text_problem_ids(train, cfg.text_share, cfg.seed)
    stage(f"code injection: executing {len(train) - len(text_ids)} trajectories in the "
          f"sandbox ({len(text_ids)} more problems stay text chain-of-thought)")
    mixed, by_format = event_loop.run(tool_records(
        train, [FORMAT], system_prompts={FORMAT: TOOL_SYSTEM}, text_ids=text_ids))
    text_examples = [text_only_example(p, TEXT_SYSTEM) for p in train]
    stage("building the tokenizer and two identical tiny models")
    tokenizer = build_tokenizer(corpus_texts(mixed + text_examples),
                                vocab_size=cfg.vocab_size)
    tokenizer.save_pretrained(str(out / "tokenizer"))
    return DemoData(mixed=mixed, text_examples=text_examples, conversion=by_format[FORMAT],
                    train_file=out / TRAIN_FILE, validation_file=out / VALIDATION_FILE,
                    test_file=out / TEST_FILE, tokenizer_dir=out / "tokenizer",
                    n_validation=len(validation), n_test=len(test))
