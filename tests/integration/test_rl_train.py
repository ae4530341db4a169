"""Agentic GRPO end to end on the CPU with the test model: learning, exact resume, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate")

from agentmath.agent.trajectory import Trajectory  # noqa: E402
from agentmath.rl.config import RLConfig  # noqa: E402
from agentmath.rl.records import StageMove, read_steps  # noqa: E402
from agentmath.rl.trainer import train_rl  # noqa: E402
from agentmath.tasks import Task  # noqa: E402

pytestmark = pytest.mark.integration


def brevity(task: Task, trajectory: Trajectory) -> float:
    """A reward the test model can learn in a few steps: write fewer tokens."""
    return -trajectory.model_tokens / 100.0


def _config(model_dir: Path, **over: Any) -> RLConfig:
    data = {
        "model": str(model_dir), "format": "code_interpreter",
        "data": {"dataset": str(model_dir.parent / "test.jsonl")},
        "steps": 6, "group_size": 4, "prompts_per_step": 4, "seed": 0,
        "rewards": [{"name": "tests.integration.test_rl_train:brevity", "weight": 1.0},
                    {"name": "accuracy", "weight": 1.0}],
        "optim": {"learning_rate": 2e-3},
        "loop": {"max_model_tokens": 160, "max_tool_calls": 3, "max_total_tokens": 1024},
        "rollout": {"mode": "sync"}, "generator": {"max_batch": 16},
        "tensorboard": False, "checkpoint_every": 0,
    }
    for key, value in over.items():
        node = data
        *parents, last = key.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return RLConfig.model_validate(data)


def test_grpo_raises_a_learnable_reward(tiny_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    result = train_rl(_config(tiny_model_dir, tensorboard=True), tmp_path / "run",
                      progress=False)
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    rows = read_steps(result.metrics)
    assert [r.step for r in rows] == list(range(1, 7))
    first = sum(r.reward_mean for r in rows[:2]) / 2
    last = sum(r.reward_mean for r in rows[-2:]) / 2
    assert last > first + 0.1, [round(r.reward_mean, 3) for r in rows]
    assert result.policy_version == sum(r.groups_trained > 0 for r in rows)
    assert all(r.loss_tokens > 0 for r in rows if r.groups_trained)
    assert Path(result.final_dir, "config.json").exists()
    assert rows[0].reward_terms.keys() == {"brevity", "accuracy"}
    for r in rows:  # what a step trained on, and how far sampler and trainer were apart
        assert len(r.prompts) == r.groups_trained
        assert sum(map(len, r.prompts_dropped.values())) == r.groups_dropped
        assert r.staleness_max == 0 and r.staleness_mean == 0.0  # sync rollout: on-policy
        # the in-process generator and the trainer run the same weights: float rounding only
        assert 0.0 <= r.mismatch_kl < 1e-3 and 0.0 <= r.mismatch_max < 0.1
        assert r.mismatch_masked == 0.0


def test_resume_after_a_kill_gives_the_same_next_step(tiny_model_dir: Path,
                                                      tmp_path: Path) -> None:
    # One request per generate batch: each sample's seed alone decides its tokens, so the
    # two runs sample the same trajectories whatever the order episodes reach the backend.
    # That decodes one token of one sample per forward pass, so a step costs in proportion to
    # its samples: two groups of two (each step still trains: brevity spreads the rewards)
    # check the resumed sampler, data order, optimizer and schedules as four groups of four
    # did, in about a quarter of the time.
    cfg = _config(tiny_model_dir, steps=3, checkpoint_every=1, generator__max_batch=1,
                  group_size=2, prompts_per_step=2,
                  temperature__start=1.2, temperature__end=0.7)
    whole = train_rl(cfg, tmp_path / "whole", progress=False)
    cut = train_rl(cfg, tmp_path / "cut", progress=False, stop_after=2)
    assert cut.final_dir is None and cut.steps == 2
    resumed = train_rl(cfg, tmp_path / "cut", progress=False)
    assert resumed.resumed_from == 2 and resumed.steps == 3
    a, b = read_steps(whole.metrics), read_steps(resumed.metrics)
    assert len(b) == 3
    keys = ("reward_mean", "loss", "temperature", "lr", "policy_version", "model_tokens_mean",
            "groups_trained", "groups_dropped")
    assert {k: getattr(a[2], k) for k in keys} == {k: getattr(b[2], k) for k in keys}
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    wa = load_file(str(Path(whole.final_dir, "model.safetensors")))
    wb = load_file(str(Path(resumed.final_dir, "model.safetensors")))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_cli_rl_json_and_bad_config(tiny_model_dir: Path, tmp_path: Path) -> None:
    # A start model stored with its training prompt (agentmath.models.prompts): with no
    # loop.system_prompt the run uses it, and its final model keeps it.
    import shutil

    from agentmath.models.prompts import TrainedPrompts

    start = tmp_path / "start"
    shutil.copytree(tiny_model_dir, start)
    prompt = "Solve the problem with Python in <code> blocks."
    TrainedPrompts({"code_interpreter": prompt, "markdown": "other"}).write(start)
    cfg = tmp_path / "rl.toml"
    cfg.write_text(
        f'model = "{start}"\nsteps = 1\ngroup_size = 2\nprompts_per_step = 2\n'
        f'tensorboard = false\n[data]\ndataset = "{tiny_model_dir.parent / "test.jsonl"}"\n'
        '[loop]\nmax_model_tokens = 64\n[rollout]\nmode = "async"\n')
    cmd = [sys.executable, "-m", "agentmath.cli", "rl", "--config", str(cfg), "--out",
           str(tmp_path / "out"), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert data["steps"] == 1 and isinstance(data["last"], dict)
    assert "system prompt: the one" in " ".join(out.stderr.split())
    used = json.loads((tmp_path / "out" / "rl_config.json").read_text())
    assert used["loop"]["system_prompt"] == prompt
    assert TrainedPrompts.read(data["final_dir"]) == TrainedPrompts(
        {"code_interpreter": prompt, "markdown": "other"})
    bad = subprocess.run(cmd[:-3] + ["--set", "group_size=1", "--out", str(tmp_path / "b")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "group_size" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = subprocess.run(cmd[:-3] + ["--set", "model=/no/such/model", "--out",
                                         str(tmp_path / "m")],
                             capture_output=True, text=True, timeout=300)
    # a missing model is the startup check's: exit 1 naming it (docs/cli.md)
    assert missing.returncode == 1 and "/no/such/model" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_lora_grpo_trains_the_adapter_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from safetensors.torch import load_file

    cfg = _config(tiny_model_dir, steps=2, optim__lora=True, optim__lora_r=4,
                  optim__learning_rate=1e-2)
    result = train_rl(cfg, tmp_path / "lora", progress=False)
    assert result.policy_version >= 1
    assert Path(tmp_path / "lora" / "adapter" / "adapter_config.json").exists()
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    tuned = load_file(str(Path(result.final_dir, "model.safetensors")))
    changed = [k for k in base if not torch.equal(base[k], tuned[k])]
    assert changed  # the merged adapter moved some weights
    assert not any("norm" in k for k in changed)  # LoRA touches linear layers only


def test_rl_runs_its_rollouts_on_a_remote_sandbox(tiny_model_dir: Path, tmp_path: Path) -> None:
    """--sandbox-url: the rollout code runs on a sandbox service (cells counted there)."""
    import httpx

    from tests.integration.test_sandbox_service import TOKENS, serve

    with serve(tmp_path) as (url, _, _):
        cfg = _config(tiny_model_dir, steps=2, sandbox_url=[url],
                      sandbox_token_file=str(tmp_path / "tokens"))
        result = train_rl(cfg, tmp_path / "remote", progress=False)
        metrics = httpx.get(f"{url}/metrics",
                            headers={"Authorization": f"Bearer {TOKENS[0]}"}).text
    rows = read_steps(result.metrics)
    calls = round(sum(r.tool_calls_mean * r.samples for r in rows))
    served = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                 if line.startswith("agentmath_sandbox_cells_total{"))
    assert result.steps == 2 and calls > 0
    assert served >= calls  # every tool call of every rollout ran on the service


def test_a_tight_first_stage_moves_on_in_a_real_run(tiny_model_dir: Path,
                                                    tmp_path: Path) -> None:
    """Stage 0 allows 16 model tokens, so most episodes are truncated; the first step's
    truncation rate passes the threshold, the budgets grow, and the transition is in the
    result's events and the metrics log (with the stage each step ran in)."""
    stages = [{"max_total_tokens": 1024, "max_model_tokens": 16, "max_tool_calls": 3},
              {"max_total_tokens": 1024, "max_model_tokens": 160, "max_tool_calls": 3}]
    cfg = _config(tiny_model_dir, steps=2, stages={
        "stages": stages, "truncation_threshold": 0.5, "window": 16})
    result = train_rl(cfg, tmp_path / "run", progress=False)
    moves = [e for e in result.events if isinstance(e, StageMove)]
    assert len(moves) == 1 and (moves[0].old, moves[0].new, moves[0].step) == (0, 1, 1)
    assert moves[0].rate >= 0.5 and moves[0].budgets.max_model_tokens == 160
    rows = read_steps(result.metrics)
    assert [r.stage for r in rows] == [1, 1]  # logged after the step's observation
    assert rows[0].truncation_rate >= 0.5  # (all truncated: its groups may carry no signal)
    assert sum(isinstance(e, StageMove) for e in rows[0].events) == 1
    assert rows[1].truncation_rate < rows[0].truncation_rate


def test_a_larger_generation_batch_trains_the_need_and_counts_the_rest(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    """generation_batch_factor 2 in a real run: one round draws 8 groups for the 4 a step
    trains on; with a reward that varies within every group, 4 are trained and 4 logged as
    surplus, and nothing else moves."""
    cfg = _config(tiny_model_dir, steps=2, generation_batch_factor=2.0,
                  rollout__mode="async")
    result = train_rl(cfg, tmp_path / "run", progress=False)
    rows = read_steps(result.metrics)
    assert [(r.groups_trained, r.groups_surplus, r.extra.rounds, r.samples) for r in rows] \
        == [(4, 4, 1, 16)] * 2
    assert result.policy_version == 2


def test_killed_sandbox_sessions_are_left_out_of_their_groups(tiny_model_dir: Path,
                                                               tmp_path: Path) -> None:
    """The fault injector kills half the sandbox sessions' processes on their first snippet:
    those samples are excluded from their groups (infra_excluded), the rest train, and the
    step log says which prompts were trained on and which were lost to the infrastructure."""
    from agentmath.rl.dump import dump_path, read_rollout_dump

    cfg = _config(tiny_model_dir, steps=2, sandbox__fault_kill_rate=0.5,
                  sandbox__fault_seed=3, dump_rollouts=True)
    result = train_rl(cfg, tmp_path / "run", progress=False)
    rows = read_steps(result.metrics)
    assert sum(r.infra_excluded for r in rows) > 0
    for r in rows:  # the dump holds every sample generated, and what became of it
        dumped = read_rollout_dump(dump_path(tmp_path / "run", r.step))
        assert sum(d.status == "trained" for d in dumped) == r.samples
        assert sum(d.status in ("infra", "removed_infra") and d.trajectory.infra_failure
                   is not None for d in dumped) == r.infra_excluded
    for r in rows:
        kept = r.samples  # trained samples: every group's valid ones only
        assert kept <= 4 * r.groups_trained and len(r.prompts) == r.groups_trained
        lost = len(r.prompts_dropped.get("infra", []))
        assert r.infra_excluded >= 3 * lost  # a group drops with at most one valid sample
