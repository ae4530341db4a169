"""The demo recipe end to end at a toy scale: every stage runs, outputs exist, and two runs
with the same seed give the same numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def toy_config(seed: int = 0):
    from agentmath.recipes.demo import DemoConfig

    # min_start_pass_at_k 1.0: no toy start passes, so the demo grows the tool model again
    # (its second attempt) and runs GRPO from the last one. sandbox_preload: the cells still
    # run in the real sandbox, whose start (numpy, sympy, scipy imported up front: ~2 s of
    # each toy evaluation's ~2.5 s) is the one thing a toy demo's nine per run do not need.
    return DemoConfig(seed=seed, steps=3, copy_steps=2, train_problems=20, test_problems=5,
                      eval_max_tokens=48, vocab_size=400, batch_size=4, rl_steps=2,
                      rl_group_size=2, rl_prompts=2, headroom_k=2, start_attempts=2,
                      min_start_pass_at_k=1.0, sandbox_preload=("math",))


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
    head = first["headroom"]  # measured before GRPO, on the start model
    assert head["k"] == 2 and head["problems"] == 5 and 0 <= head["greedy_pass@1"] <= 1
    assert head["greedy_pass@1"] == first["models"][1]["accuracy"]  # the tool row's greedy run
    assert 0 <= head["sampled_pass@1"] <= head["pass@2"] <= 1
    starts = first["starts"]  # the first start failed its headroom: a second was grown
    assert [(a["attempt"], a["used"]) for a in starts] == [(1, False), (2, True)]
    assert starts[0]["sft_seed"] == 0 and starts[1]["sft_seed"] != 0
    assert starts[1]["headroom"] == head  # GRPO ran from the second start
    assert (tmp_path / "a" / "start-2" / "model-tool" / "final" / "config.json").exists()
    assert (tmp_path / "a" / "start-2" / "headroom" / "samples.jsonl").exists()
    assert (tmp_path / "a" / "start-2" / "run-tool" / "samples.jsonl").exists()
    for row in first["models"]:  # GRPO rows say when their budget stage moved on
        assert ("stage_transitions" in row) == ("grpo" in row["model"])
        for ev in row.get("stage_transitions", []):
            assert ev["old"] + 1 == ev["new"] and ev["rate"] >= 0.05
    assert all(m["n"] == 5 for m in first["models"])
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
    test_ids = {json.loads(line)["id"]
                for line in (tmp_path / "a" / "test.jsonl").read_text().splitlines()}
    for row in third.report.rows:
        records = (tmp_path / "a" / row["run"] / "samples.jsonl").read_text().splitlines()
        assert {json.loads(r)["problem_id"] for r in records} == test_ids
        assert len(records) == 5

