"""The demo grows its tool model again when the first start has no headroom: a tiny model learns
to copy the problem's numbers into code at an SFT step that varies widely with its
initialisation and data order, and now and then not at all within the SFT budget."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import agentmath.recipes.demo as recipe
from agentmath.recipes.demo import DemoConfig, DemoData, StartJob, start_seed
from agentmath.recipes.demo_jobs import StartResult


def _metrics(pass_at_8: float) -> Any:
    """What Headroom.measure reads of a run (a greedy or a sampled one)."""
    return SimpleNamespace(avg=SimpleNamespace(value=0.0), pass_at={"8": pass_at_8},
                           tools=SimpleNamespace(calls_per_sample=0.7), n_problems=100)


def _start(attempt: int, pass_at_8: float) -> Any:
    run = _metrics(pass_at_8)
    return recipe._Start.measured(DemoConfig(), attempt, f"model-{attempt}", run, run)


def _prepared(tmp_path: Path) -> DemoData:
    return DemoData(mixed=[{"id": "p"}], text_examples=[], conversion=None,
                    train_file=tmp_path / "train.jsonl",
                    validation_file=tmp_path / "validation.jsonl",
                    test_file=tmp_path / "test.jsonl", tokenizer_dir=tmp_path / "tokenizer",
                    n_validation=1, n_test=1)


def _grow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cfg: DemoConfig, first: Any,
          later: dict[int, float]) -> tuple[list[Any], Any, list[StartJob], list[str]]:
    """Run the recipe's start logic with the jobs replaced: ``later`` maps an attempt to the
    pass@8 its start would reach. Returns (starts, chosen, the jobs asked for, messages)."""
    asked: list[StartJob] = []

    def fake_parallel(fn: Any, jobs: list[tuple[StartJob]], pool: Any = None) -> list[Any]:
        assert fn is recipe.start_job
        asked.extend(job for (job,) in jobs)
        attempts = [_attempt(job) for (job,) in jobs]
        # start_job's contract: the model dir and the two headroom runs, greedy and sampled
        return [StartResult(f"model-{a}", (_metrics(later[a]), _metrics(later[a])))
                for a in attempts]

    monkeypatch.setattr(recipe, "run_parallel", fake_parallel)
    messages: list[str] = []
    starts, chosen = recipe._more_starts(cfg, _prepared(tmp_path), tmp_path, messages.append,
                                         None, first)
    return starts, chosen, asked, messages


def _attempt(job: StartJob) -> int:
    """The attempt a start job grows (its folder is ``start-N``)."""
    return int(Path(job.sft.out).parent.name.removeprefix("start-"))


def test_a_start_with_headroom_is_used_and_nothing_is_grown_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first = _start(1, 0.82)
    starts, chosen, asked, _ = _grow(monkeypatch, tmp_path, DemoConfig(), first, {})
    assert starts == [first] and chosen is first and asked == []


def test_a_failed_start_is_grown_again_side_by_side_and_the_first_passing_one_used(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = DemoConfig(seed=3, start_attempts=4, min_start_pass_at_k=0.2)
    starts, chosen, asked, messages = _grow(monkeypatch, tmp_path, cfg, _start(1, 0.0),
                                            {2: 0.1, 3: 0.9, 4: 0.95})
    assert [_attempt(job) for job in asked] == [2, 3, 4]  # every remaining attempt, one batch
    assert [job.sft.seed for job in asked] == [start_seed(3, a) for a in (2, 3, 4)]
    for job in asked:  # each start's headroom is measured on the validation problems
        assert [run.data for run in job.headroom] == [str(tmp_path / "validation.jsonl")] * 2
        assert [(run.samples, run.temperature) for run in job.headroom] == [(1, 0.0), (8, 1.0)]
        assert all(Path(run.out).is_relative_to(Path(job.sft.out).parent)
                   for run in job.headroom)
    assert [s.attempt for s in starts] == [1, 2, 3, 4]
    assert chosen.attempt == 3 and chosen.model_dir == "model-3"  # the first that passes
    assert any("below 20%" in m and "attempts 2-4 of 4" in m for m in messages)


def test_when_no_start_passes_grpo_runs_from_the_last_and_says_so(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = DemoConfig(start_attempts=2)
    starts, chosen, _, messages = _grow(monkeypatch, tmp_path, cfg, _start(1, 0.0), {2: 0.05})
    assert len(starts) == 2 and chosen is starts[-1]
    assert any("no start reached" in m and "another --seed" in m for m in messages)


def test_one_attempt_keeps_the_first_start_whatever_its_headroom(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first = _start(1, 0.0)
    starts, chosen, asked, _ = _grow(monkeypatch, tmp_path, DemoConfig(start_attempts=1),
                                     first, {})
    assert starts == [first] and chosen is first and asked == []


def test_start_seeds_keep_the_first_and_derive_the_others() -> None:
    assert start_seed(3, 1) == 3  # the first start is the demo's figures of before
    seeds = [start_seed(3, a) for a in (2, 3, 4)]
    assert len(set(seeds)) == 3 and 3 not in seeds
    assert seeds == [start_seed(3, a) for a in (2, 3, 4)]  # the same in any process
    assert start_seed(4, 2) != start_seed(3, 2)
    assert all(0 <= s < 2**63 for s in seeds)  # within SFTConfig.seed's bounds


def test_start_settings_are_bounded() -> None:
    with pytest.raises(ValueError, match="start_attempts"):
        DemoConfig(start_attempts=0)
    with pytest.raises(ValueError, match="min_start_pass_at_k"):
        DemoConfig(min_start_pass_at_k=1.5)
