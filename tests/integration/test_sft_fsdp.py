"""Sharded SFT (FSDP2, agentmath/train/sharding.py) on the CPU: the tiny Qwen3-like model
trained across 2 processes (gloo) under the documented `accelerate launch` command gives the
loss and the weights of one process, to float tolerance; a sharded run resumes from its
checkpoint to the same weights. (A launch of several processes unsharded is refused:
tests/unit/test_sharding.py.)"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from safetensors.torch import load_file  # noqa: E402

from agentmath.train.sft import SFTConfig, train_sft  # noqa: E402
from tests.fixtures.qwen3_like import qwen3_like_dir  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_CONFIG = "configs/accelerate/fsdp_8gpu.yaml"
SETTINGS = {"max_steps": 3, "batch_size": 4, "grad_accum": 2, "learning_rate": 1e-3,
            "checkpoint_every": 2, "keep_checkpoints": 0, "device": "cpu"}


def _examples(n: int = 16) -> list[dict[str, Any]]:
    """Tool-integrated trajectories with masked tool output, in the SFT converter's format."""
    rng, rows = random.Random(0), []
    for i in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 9)
        rows.append({"id": f"p{i}", "messages": [{"role": "user", "content": f"{a} * {b}?"}],
                     "completion": [
                         {"text": f"<think>\nCompute.\n</think>\n\n```python\nprint({a}*{b})\n```",
                          "train": True},
                         {"text": f"\n```output\n{a * b}\n```\n", "train": False},
                         {"text": f"The answer is \\boxed{{{a * b}}}.", "train": True}]})
    return rows


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fsdp-data") / "sft.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in _examples()))
    return path


def _launch(model: Path, data: Path, out: Path, *extra: str, processes: int = 2,
            cuda: bool = False) -> subprocess.CompletedProcess[str]:
    """The documented command (docs/gpu.md, "Sharded training"), on 2 CPU processes."""
    sets = [f"--set={k}={v}" for k, v in SETTINGS.items()]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", LAUNCH_CONFIG,
           "--num_processes", str(processes), "-m", "agentmath.cli", "sft", "--data", str(data),
           "--model", str(model), "--out", str(out), "--json", *sets, *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           **({} if cuda else {"CUDA_VISIBLE_DEVICES": ""})}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def _losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "loss.jsonl").read_text().splitlines()]


def _max_diff(a: Path, b: Path) -> float:
    left, right = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert sorted(left) == sorted(right)
    return max(float((left[k] - right[k]).abs().max()) for k in left)


@pytest.mark.recipe("configs/accelerate/fsdp_8gpu.yaml")
def test_two_sharded_processes_train_as_one(data: Path, tmp_path: Path) -> None:
    model = qwen3_like_dir("qwen3")
    sharded = _launch(model, data, tmp_path / "sharded", "--set=sharding=fsdp")
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    one = train_sft(SFTConfig(**SETTINGS), data, str(model), tmp_path / "one", progress=False)
    assert one.final_dir is not None
    assert _losses(tmp_path / "sharded") == pytest.approx(_losses(tmp_path / "one"), rel=1e-5)
    # the step moved the weights, and both runs moved them alike
    assert _max_diff(Path(one.final_dir), model) > 1e-3
    assert _max_diff(Path(one.final_dir), tmp_path / "sharded" / "final") < 1e-5
    # checkpoints of a sharded run are full ones, loadable as the unsharded run's
    assert _max_diff(tmp_path / "one" / "checkpoint-2",
                     tmp_path / "sharded" / "checkpoint-2") < 1e-5


def test_a_sharded_lora_run_resumes_from_its_checkpoint(data: Path, tmp_path: Path) -> None:
    model, out = qwen3_like_dir("qwen3"), tmp_path / "sharded"
    first = _launch(model, data, out, "--set=sharding=fsdp", "--lora")
    assert first.returncode == 0, first.stderr[-3000:]
    reference = load_file(out / "final" / "model.safetensors")
    for name in ("final", "adapter", "checkpoint-3"):  # as if killed after step 2
        subprocess.run(["rm", "-rf", str(out / name)], check=True)
    again = _launch(model, data, out, "--set=sharding=fsdp", "--lora")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["resumed_from"] == 2
    resumed = load_file(out / "final" / "model.safetensors")
    assert max(float((reference[k] - resumed[k]).abs().max()) for k in reference) < 1e-6


@pytest.mark.gpu
def test_sharded_bf16_sft_on_one_gpu(data: Path, tmp_path: Path) -> None:
    # the sharded trainer's CUDA path (NCCL, bf16 gathered weights, activation checkpointing)
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    result = _launch(qwen3_like_dir("qwen3"), data, tmp_path / "gpu", "--set=sharding=fsdp",
                     "--bf16", "--device", "cuda", "--set=fsdp.activation_checkpointing=true",
                     processes=1, cuda=True)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = _losses(tmp_path / "gpu")
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
    assert (tmp_path / "gpu" / "final" / "model.safetensors").exists()
