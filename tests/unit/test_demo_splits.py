"""The demo's three problem splits, its typed jobs and its choice of solve's model: the test
problems stay what they were, the validation problems come from the same seeded generator and
share nothing with train or test, and every job is one picklable record."""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from agentmath.recipes.demo import (
    TOOL_SYSTEM,
    DemoConfig,
    EvalJob,
    EvalRun,
    GRPOJob,
    SFTJob,
    StartJob,
    _choose,
    _Model,
    final_runs,
    headroom_runs,
    rl_config,
)
from agentmath.recipes.demo_data import DemoData, check_disjoint, split_problems
from agentmath.tasks.synthetic import generate_problems, split

SMALL = DemoConfig(seed=4, train_problems=40, test_problems=12, validation_problems=9)


def test_train_and_test_are_the_split_of_before_and_validation_is_new() -> None:
    train, validation, test = split_problems(SMALL)
    # the first train + test problems of the generator, split as before the validation split
    old_train, old_test = split(generate_problems(52, 4, digits=(3, 3)), 12, 4)
    assert [t.id for t in train] == [t.id for t in old_train]
    assert [t.id for t in test] == [t.id for t in old_test]
    assert len(validation) == 9
    ids = {t.id for t in train} | {t.id for t in test}
    texts = {t.problem for t in train} | {t.problem for t in test}
    assert not ids & {t.id for t in validation}
    assert not texts & {t.problem for t in validation}
    assert split_problems(SMALL) == (train, validation, test)  # seeded


def test_splits_sharing_a_problem_are_refused() -> None:
    train, validation, test = split_problems(SMALL)
    check_disjoint({"train": train, "validation": validation, "test": test})
    with pytest.raises(ValueError, match="the validation and test problems overlap"):
        check_disjoint({"train": train, "validation": [*validation, test[3]], "test": test})
    reworded = replace(train[0], id="fresh")  # another id, the same story
    with pytest.raises(ValueError, match="the train and validation problems overlap"):
        check_disjoint({"train": train, "validation": [reworded], "test": test})


def test_the_sampled_problems_are_some_of_the_test_problems() -> None:
    assert DemoConfig(test_problems=50).sampled_on() == 50  # all of them when fewer
    assert DemoConfig().sampled_on() == 100 and DemoConfig().sampled_samples == 8


def _data(tmp_path: Path) -> DemoData:
    return DemoData(mixed=[], text_examples=[], conversion=None,  # type: ignore[arg-type]
                    train_file=tmp_path / "train.jsonl",
                    validation_file=tmp_path / "validation.jsonl",
                    test_file=tmp_path / "test.jsonl", tokenizer_dir=tmp_path / "tokenizer",
                    n_validation=100, n_test=300)


def test_headroom_reads_validation_and_the_final_runs_read_test(tmp_path: Path) -> None:
    cfg, data = DemoConfig(), _data(tmp_path)
    greedy, sampled = headroom_runs(cfg, data, tmp_path / "validation")
    assert greedy.data == sampled.data == str(tmp_path / "validation.jsonl")
    assert (greedy.samples, greedy.temperature, greedy.limit) == (1, 0.0, None)
    assert (sampled.samples, sampled.temperature) == (cfg.headroom_k, cfg.rl_temperature)
    greedy, sampled = final_runs(cfg, data, tmp_path, "tool + grpo (unmasked)")
    assert greedy.data == sampled.data == str(tmp_path / "test.jsonl")
    assert greedy.out == str(tmp_path / "run-tool-grpo-unmasked")  # the report's run
    assert (sampled.samples, sampled.temperature, sampled.limit) == (8, 1.0, 100)


def test_jobs_are_typed_records_that_pickle(tmp_path: Path) -> None:
    cfg = DemoConfig(seed=2)
    run = EvalRun(str(tmp_path / "v.jsonl"), str(tmp_path / "run"), 8, 1.0, 100)
    sft = SFTJob(cfg, [{"prompt": "p", "completion": "c"}], "tok", "out", TOOL_SYSTEM, seed=7)
    for job in (EvalJob(cfg, "model", TOOL_SYSTEM, (run,)), sft, StartJob(sft, (run, run)),
                GRPOJob(cfg, "start", "train.jsonl", False, "rl", (run,))):
        again = pickle.loads(pickle.dumps(job))
        assert again == job and again.__class__ is job.__class__


def test_rl_config_is_an_rl_config() -> None:
    from agentmath.rl.config import RLConfig

    cfg = DemoConfig(rl_first_tool_calls=3, rl_steps=5)
    rl = rl_config(cfg, "model", Path("train.jsonl"), masked=False)
    assert isinstance(rl, RLConfig)
    assert rl.steps == 5 and rl.loss.mask_tool_tokens is False
    assert [s.max_tool_calls for s in rl.stages.stages] == [3, 6]
    assert rl.stages.window == cfg.rl_prompts * cfg.rl_group_size
    assert rl.data.dataset == "train.jsonl" and rl.rewards[0].name == "accuracy"


def test_solve_gets_grpo_unless_its_start_does_better_on_validation() -> None:
    tool = _Model("tool", "t", TOOL_SYSTEM, validation_accuracy=0.10)
    said: list[str] = []
    assert _choose(said.append, tool) is tool and not said  # no GRPO run: the start
    for grpo_acc, expected in ((0.5, "tool + grpo"), (0.10, "tool + grpo"), (0.05, "tool")):
        grpo = _Model("tool + grpo", "g", TOOL_SYSTEM, validation_accuracy=grpo_acc)
        assert _choose(said.append, tool, grpo).name == expected
    assert "greedy on the validation problems: tool 10.0%, tool + grpo 5.0%" in said[-1]


def test_a_job_submitted_without_a_pool_runs_at_once() -> None:
    """On a one-core machine the demo has no pool: a submitted job runs in this process
    and its future is already done (an error in it handed back through the future)."""
    from agentmath.recipes._parallel import submit

    ran: list[int] = []
    done = submit(None, lambda x: ran.append(x) or x * 2, 21)
    assert ran == [21] and done.done() and done.result() == 42
    failed = submit(None, lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result()
