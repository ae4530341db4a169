"""Sharded GRPO (``optim.sharding = "fsdp"``, agentmath/rl/sharded.py) on the CPU: the tiny
Qwen3-like model's learner across 2 processes (gloo), rank 0 running the rollouts with the
in-process generator on a gathered copy, takes the steps of one process (same samples, loss
and weights to float tolerance); a sharded LoRA run resumes from its checkpoint exactly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate")

from safetensors.torch import load_file  # noqa: E402

from agentmath.rl.config import RLConfig  # noqa: E402
from agentmath.rl.records import read_steps  # noqa: E402
from agentmath.rl.trainer import train_rl  # noqa: E402
from tests.fixtures.qwen3_like import qwen3_like_dir  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def text_parity(task: Any, trajectory: Any) -> float:
    """A reward with variance in every group of a random-weight model (whose episodes all run
    to the token budget, so a length reward would give none): the parity of the text's
    character codes, fixed by the sampled tokens, the same in every process."""
    text = "".join(segment.text for segment in trajectory.segments)
    return float(sum(map(ord, text)) % 2)


def _settings(model: Path, tasks: Path, **optim: Any) -> dict[str, Any]:
    return {
        "model": str(model), "format": "code_interpreter", "data": {"dataset": str(tasks)},
        "steps": 2, "group_size": 2, "prompts_per_step": 2, "seed": 0,
        "dynamic_sampling": False, "checkpoint_every": 1, "keep_checkpoints": 0,
        "tensorboard": False, "device": "cpu",
        "rewards": [{"name": "tests.integration.test_rl_fsdp:text_parity", "weight": 1.0}],
        "optim": {"learning_rate": 1e-3, **optim}, "loss": {"share_prompt": 0},
        "loop": {"max_model_tokens": 24, "max_tool_calls": 1, "max_total_tokens": 512},
        "rollout": {"mode": "sync"}, "generator": {"max_batch": 8},
    }


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rl-fsdp") / "tasks.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "problem": f"What is {i} + {i + 3}?",
                                        "answer": str(2 * i + 3)}) + "\n" for i in range(8)))
    return path


def _launch(settings: dict[str, Any], out: Path) -> subprocess.CompletedProcess[str]:
    """`accelerate launch` of `agentmath rl` on 2 CPU processes (docs/gpu.md)."""
    config = out.parent / f"{out.name}.yaml"
    config.write_text(json.dumps(settings))  # JSON is YAML
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           "configs/accelerate/fsdp_8gpu.yaml", "--num_processes", "2", "-m", "agentmath.cli",
           "rl", "--config", str(config), "--out", str(out), "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)


def _weights(directory: Path) -> dict[str, Any]:
    return load_file(directory / "model.safetensors")


def _max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert sorted(a) == sorted(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.recipe("configs/accelerate/fsdp_8gpu.yaml")
def test_a_sharded_learner_takes_the_steps_of_one_process(tasks: Path, tmp_path: Path) -> None:
    model = qwen3_like_dir("qwen3")
    sharded = _launch(_settings(model, tasks, sharding="fsdp"), tmp_path / "sharded")
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    one = train_rl(RLConfig.model_validate(_settings(model, tasks)), tmp_path / "one",
                   progress=False)
    mine, theirs = (read_steps(tmp_path / d / "metrics.jsonl") for d in ("sharded", "one"))
    assert [m.reward_mean for m in mine] == [m.reward_mean for m in theirs]  # same samples
    assert [m.loss_tokens for m in mine] == [m.loss_tokens for m in theirs]
    # a GRPO loss is ~0 at a step whose ratios are 1 (advantages sum to 0): absolute there
    assert [m.loss for m in mine] == pytest.approx([m.loss for m in theirs], rel=1e-5,
                                                    abs=1e-6)
    assert [m.grad_norm for m in mine] == pytest.approx([m.grad_norm for m in theirs], rel=1e-4)
    assert one.final_dir is not None
    final = _weights(Path(one.final_dir))
    moved = _max_diff(final, _weights(model))
    assert moved > 1e-4  # the steps moved the weights
    # AdamW divides each gradient by its own scale, so a reduction order's float noise on a
    # tiny gradient shows at update size: the two runs agree to 5% of the largest move
    assert _max_diff(final, _weights(tmp_path / "sharded" / "final")) < 0.05 * moved


def test_a_sharded_lora_run_resumes_exactly(tasks: Path, tmp_path: Path) -> None:
    settings = _settings(qwen3_like_dir("qwen3"), tasks, sharding="fsdp", lora=True,
                         learning_rate=1e-2)
    out = tmp_path / "run"
    first = _launch(settings, out)
    assert first.returncode == 0, first.stderr[-3000:]
    reference = _weights(out / "final")
    for name in ("final", "adapter", "checkpoint-2"):  # as if killed after step 1's checkpoint
        shutil.rmtree(out / name)
    again = _launch(settings, out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["resumed_from"] == 1
    assert _max_diff(reference, _weights(out / "final")) < 1e-6
