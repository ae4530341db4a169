"""bf16 mixed precision in RL covers the update's forwards and not the in-process generator's.

accelerate wraps a prepared model's forward in autocast; the generator shares that model, and
on a GPU its decode steps ran ~5x slower under bf16 autocast than in fp32 (measured on an H200,
docs/gpu.md). The learner now strips the wrapper and the updater enters autocast itself. On the
CPU, accelerate's bf16 is CPU autocast: the same paths, checked here."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from agentmath.rl.trainer import train_rl  # noqa: E402
from tests.integration.test_rl_train import _config as rl_config  # noqa: E402

pytestmark = pytest.mark.integration


def test_bf16_autocasts_the_update_and_not_the_generator(tiny_model_dir: Path,
                                                         tmp_path: Path) -> None:
    seen: list[tuple[bool, bool]] = []  # (grad enabled, autocast enabled) per model forward

    def record(module: torch.nn.Module, args: tuple) -> None:
        # the base model (Qwen3Model) inside the causal LM: a hook on the causal LM itself
        # runs before the forward that accelerate wraps, so it would never see autocast
        if type(module).__name__.endswith("Model"):
            seen.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        train_rl(rl_config(tiny_model_dir, steps=1, device="cpu", optim__bf16=True,
                           loss__kl_coef=0.0), tmp_path / "run", progress=False)
    finally:
        handle.remove()
    training = [autocast for grad, autocast in seen if grad]
    generation = [autocast for grad, autocast in seen if not grad]
    assert training and all(training), seen  # the update's forwards: under bf16 autocast
    assert generation and not any(generation), seen  # prefill and decode steps: fp32


def test_runs_of_other_precisions_follow_each_other_in_one_process(tiny_model_dir: Path,
                                                                   tmp_path: Path) -> None:
    """accelerate keeps one state per process and refused the second run's precision
    (ValueError at its start) until the learner dropped a single-process state that differs."""
    for i, bf16 in enumerate((False, True, False)):
        result = train_rl(rl_config(tiny_model_dir, steps=1, device="cpu", optim__bf16=bf16),
                          tmp_path / f"run-{i}", progress=False)
        assert Path(result.final_dir).is_dir()
