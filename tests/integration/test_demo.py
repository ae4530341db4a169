"""The demo recipe end to end at a toy scale: every stage runs, outputs exist, two runs with
the same seed give the same numbers, and no test problem is read before the final
evaluation."""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def toy_config(seed: int = 0, **changes: Any):
    from agentmath.recipes.demo import DemoConfig

    # min_start_pass_at_k 1.0: no toy start passes, so the demo grows the tool model again
    # (its second attempt) and runs GRPO from the last one. sandbox_preload: the cells still
    # run in the real sandbox, whose start (numpy, sympy, scipy imported up front) is the one
    # thing a toy demo's many evaluations do not need.
    settings: dict[str, Any] = dict(
        seed=seed, steps=3, copy_steps=2, train_problems=20, test_problems=6,
        validation_problems=5, sampled_problems=4, sampled_samples=2, eval_max_tokens=48,
        vocab_size=400, batch_size=4, rl_steps=2, rl_group_size=2, rl_prompts=2, headroom_k=2,
        start_attempts=2, min_start_pass_at_k=1.0, sandbox_preload=("math",))
    return DemoConfig(**{**settings, **changes})


SPLITS = ("train.jsonl", "validation.jsonl", "test.jsonl")  # the demo's problem files


def _ids(path: Path) -> set[str]:
    return {json.loads(line)["id"] for line in path.read_text().splitlines()}


def test_demo_runs_every_stage_and_is_deterministic(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the demo trains models: needs the 'train' extra")
    from agentmath.recipes.demo import demo_pool

    # The three demos share one pool of the demo's two workers (its interpreter start and
    # imports, a large part of a toy demo, paid once): a demo's jobs already run one after
    # another in its workers, each seeding its own RNGs, so the second run on workers that
    # ran the first still must give the same numbers.
    with demo_pool() as pool:
        _three_demos(tmp_path, pool)


def _three_demos(tmp_path: Path, pool: Any) -> None:
    from agentmath.recipes.demo import run_demo
    from agentmath.recipes.summary import DemoSummary

    first = run_demo(toy_config(), tmp_path / "a", tmp_path / "saved-model",
                     stage=lambda _: None, pool=pool).to_dict()  # summary.json's form, --json
    names = [m["model"] for m in first["models"]]
    assert names == ["text-only", "tool", "tool + grpo", "tool + grpo (unmasked)"]
    assert "grpo" in names[2] and "unmasked" in names[3] and "unmasked" not in names[2]
    conversion = first["conversion"]  # the tool model's mixture: verified code, or text
    assert conversion["kept"] + conversion["text"] == 20 and not conversion["dropped"]
    assert conversion["text"] > 0 and conversion["kept"] > 0
    head = first["headroom"]  # measured before GRPO, on the start model, on validation
    assert head["split"] == "validation" and head["k"] == 2 and head["problems"] == 5
    assert 0 <= head["greedy_pass@1"] <= 1 and 0 <= head["sampled_pass@1"] <= head["pass@2"] <= 1
    # the tool row's validation accuracy is its headroom's greedy run (what chose solve's model)
    assert first["models"][1]["validation_accuracy"] == head["greedy_pass@1"]
    assert first["tool_model_is"] in ("tool", "tool + grpo")
    assert "validation_accuracy" in first["models"][2]
    assert "validation_accuracy" not in first["models"][0]
    assert first["sampling"] == {"samples": 2, "temperature": 1.0, "problems": 4,
                                 "split": "test"}
    test_ids, first_four = _ids(tmp_path / "a" / "test.jsonl"), {}
    for row, run in zip(first["models"], ("text-only", "tool", "tool-grpo",
                                          "tool-grpo-unmasked"), strict=True):
        # every row: greedy and sampled accuracy, on the same test problems
        records = [json.loads(r) for r in
                   (tmp_path / "a" / f"sampled-{run}" / "samples.jsonl").read_text().splitlines()]
        assert len(records) == 8  # 2 samples on each of the first 4 test problems
        problems = {r["problem_id"] for r in records}
        assert len(problems) == 4 and problems <= test_ids
        assert problems == first_four.setdefault("ids", problems)  # the same for every row
        assert row["sampled_accuracy"] == pytest.approx(
            sum(r["correct"] is True for r in records) / 8)
    starts = first["starts"]  # the first start failed its headroom: a second was grown
    assert [(a["attempt"], a["used"]) for a in starts] == [(1, False), (2, True)]
    assert starts[0]["sft_seed"] == 0 and starts[1]["sft_seed"] != 0
    assert starts[1]["headroom"] == head  # GRPO ran from the second start
    assert (tmp_path / "a" / "start-2" / "model-tool" / "final" / "config.json").exists()
    for run in ("tool-greedy", "tool-sampled"):
        assert (tmp_path / "a" / "start-2" / "validation" / run / "samples.jsonl").exists()
    for row in first["models"]:  # GRPO rows say when their budget stage moved on
        assert ("stage_transitions" in row) == ("grpo" in row["model"])
    for row in first["models"][2:]:  # a toy start runs out of tokens: stage 0 -> 1 at step 1
        assert [(ev["step"], ev["old"], ev["new"]) for ev in row["stage_transitions"]] \
            == [(1, 0, 1)]
        assert row["stage_transitions"][0]["rate"] >= 0.05
        assert row["stage_transitions"][0]["budgets"]["max_tool_calls"] == 6
    assert all(m["n"] == 6 for m in first["models"])
    assert (tmp_path / "saved-model" / "config.json").exists()  # solve's default model
    # Every model keeps the system prompt it was trained under (eval and solve read it).
    from agentmath.models.prompts import TrainedPrompts
    from agentmath.recipes.demo import FORMAT, TEXT_SYSTEM, TOOL_SYSTEM

    run_a = tmp_path / "a"
    for model_dir, prompt in [(run_a / "model-text-only" / "final", TEXT_SYSTEM),
                              (run_a / "model-tool" / "final", TOOL_SYSTEM),
                              (run_a / "start-2" / "model-tool" / "final", TOOL_SYSTEM),
                              (run_a / "rl-grpo" / "final", TOOL_SYSTEM),
                              (tmp_path / "saved-model", TOOL_SYSTEM)]:
        assert TrainedPrompts.read(model_dir) == TrainedPrompts({FORMAT: prompt}), model_dir
    assert Path(first["report"]["viewer"]).exists()
    # JSON all the way down: rows are objects and plots a list of paths, not Python reprs.
    assert [row["run"] for row in first["report"]["rows"]] == [
        "run-text-only", "run-tool", "run-tool-grpo", "run-tool-grpo-unmasked"]
    assert any(p.endswith("training_curves.png") for p in first["report"]["plots"])
    for row in first["models"]:
        lo, hi = row["accuracy_ci95"]
        assert lo <= row["accuracy"] <= hi
    assert first["report"]["plots"] and all(Path(p).exists() for p in first["report"]["plots"])
    saved = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert saved["models"] == first["models"] and saved["report"] == first["report"]
    second = run_demo(toy_config(), tmp_path / "b", None, stage=lambda _: None,
                      pool=pool).to_dict()
    assert second["models"] == first["models"]  # same seed: same accuracy, tokens, calls
    # Again into the first run's folder with another seed: fresh evaluations of the new
    # models on the new problems, not a resume of the first run's samples.
    third = run_demo(toy_config(seed=1), tmp_path / "a", None, stage=lambda _: None, pool=pool)
    saved_third = DemoSummary.read(tmp_path / "a")  # the saved file reads back as returned
    assert json.dumps(saved_third.to_dict()) == json.dumps(third.to_dict())
    test_ids = _ids(tmp_path / "a" / "test.jsonl")
    for row in third.report.rows:
        records = (tmp_path / "a" / row["run"] / "samples.jsonl").read_text().splitlines()
        assert {json.loads(r)["problem_id"] for r in records} == test_ids
        assert len(records) == 6
    # The splits on disk: disjoint, and each evaluation read the file of its stage.
    run_a = tmp_path / "a"
    train, validation = _ids(run_a / "train.jsonl"), _ids(run_a / "validation.jsonl")
    assert len(validation) == 5 and not (train & validation or train & test_ids
                                         or validation & test_ids)
    for config in run_a.rglob("config.json"):
        dataset = json.loads(config.read_text()).get("dataset")
        if dataset is None:  # a model's config, not an evaluation's
            continue
        final = config.parent.name.startswith(("run-", "sampled-"))
        assert Path(dataset).name == ("test.jsonl" if final else "validation.jsonl"), config


class _Reads:
    """Every read of the demo's problem files in this process, in order, between the stage
    messages: ("stage", message) and ("read", file name, problem ids or None for a raw read)."""

    def __init__(self, root: Path) -> None:
        self.root, self.log = str(root), []

    def stage(self, message: str) -> None:
        self.log.append(("stage", message, None))

    def loaded(self, load: Any) -> Any:
        def load_tasks(source: Any, *args: Any, **kwargs: Any) -> Any:
            tasks = load(source, *args, **kwargs)
            if str(source).startswith(self.root):
                self.log.append(("read", Path(source).name, {t.id for t in tasks}))
            return tasks
        return load_tasks

    def opened(self, real_open: Any) -> Any:
        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            name = os.fspath(file) if isinstance(file, str | os.PathLike) else ""
            if isinstance(name, str) and name.startswith(self.root) and \
                    Path(name).name in SPLITS and not set(mode) & set("wax+"):
                self.log.append(("read", Path(name).name, None))
            return real_open(file, mode, *args, **kwargs)
        return open_


def test_no_test_problem_is_read_before_the_final_evaluation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every choice of the demo is made on validation problems: with the demo's jobs run in
    this process, every read of its problem files is logged (the task loader that evaluation
    and GRPO use, and any open of a .jsonl file), and test.jsonl is read only after the
    final evaluation began, once every choice is made."""
    pytest.importorskip("torch", reason="the demo trains models: needs the 'train' extra")
    import agentmath.recipes.demo as recipe
    import agentmath.tasks as datasets  # where the loaders import load_tasks from

    out = tmp_path / "demo"
    reads = _Reads(out)
    monkeypatch.setattr(datasets, "load_tasks", reads.loaded(datasets.load_tasks))
    monkeypatch.setattr(builtins, "open", reads.opened(builtins.open))
    monkeypatch.setattr(io, "open", reads.opened(io.open))
    monkeypatch.setattr(recipe, "demo_pool", lambda: contextlib.nullcontext(None))
    monkeypatch.setattr(recipe, "run_parallel",  # the jobs, one after another, here
                        lambda fn, jobs, pool=None: [fn(*job) for job in jobs])
    summary = recipe.run_demo(toy_config(seed=2), out, None, stage=reads.stage)
    assert summary.headroom.split == "validation"
    log = reads.log
    final = next(i for i, (kind, text, _) in enumerate(log)
                 if kind == "stage" and text.startswith("final evaluation"))
    test_reads = [i for i, (kind, name, _) in enumerate(log)
                  if kind == "read" and name == "test.jsonl"]
    assert test_reads and min(test_reads) > final, log  # the test problems: last, only
    assert any(text.startswith("the tool model for `solve`") for _, text, _ in log[:final])
    test_ids = _ids(out / "test.jsonl")
    earlier = [(name, ids) for kind, name, ids in log[:final] if kind == "read"]
    assert {name for name, _ in earlier} == {"train.jsonl", "validation.jsonl"}
    assert not any(ids & test_ids for _, ids in earlier if ids)
    # the final evaluation: 4 models, greedy and sampled runs, each on the test problems
    loaded = [ids for kind, name, ids in log[final:] if kind == "read" and ids is not None]
    assert len(loaded) == 8 and all(ids <= test_ids for ids in loaded)

