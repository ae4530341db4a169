"""The GPU estimates of agentmath.sim.estimate: their arithmetic on stated shapes, and that they
move the way the hardware does (more GPUs, longer episodes, sharding)."""

from __future__ import annotations

import pytest

from agentmath.sim.estimate import (
    GenerationShape,
    TrainingShape,
    generation_seconds,
    replicas,
    training_seconds,
)
from agentmath.sim.hardware import H100_SXM, QWEN3_4B, QWEN3_8B, QWEN3_30B_A3B

WORK = GenerationShape(episodes=4096, model_tokens=4000, prompt_tokens=1000)


def test_a_model_that_fits_one_card_gets_one_replica_per_card() -> None:
    assert replicas(QWEN3_4B, H100_SXM, 8) == (8, 1)
    assert replicas(QWEN3_8B, H100_SXM, 1) == (1, 1)


def test_a_mixture_of_experts_too_big_for_half_a_card_spans_two() -> None:
    # 30.5B parameters in bf16 are 61 GB: over half of an 80 GB card, so replicas of 2 cards
    assert replicas(QWEN3_30B_A3B, H100_SXM, 8) == (4, 2)


def test_generation_scales_with_gpus_and_tokens() -> None:
    one, eight = generation_seconds(WORK, QWEN3_4B, 1), generation_seconds(WORK, QWEN3_4B, 8)
    assert eight == pytest.approx(one / 8, rel=0.35)  # replicas split the episodes
    longer = GenerationShape(WORK.episodes, WORK.model_tokens * 2, WORK.prompt_tokens)
    assert generation_seconds(longer, QWEN3_4B, 1) > 1.9 * one  # more tokens, longer contexts


def test_training_seconds_is_six_flops_per_active_parameter_per_token() -> None:
    work = TrainingShape(tokens=1e9, max_length=8192)
    expected = 6 * QWEN3_4B.active_params * 1e9 / (0.5 * H100_SXM.dense_bf16_flops * 8)
    assert training_seconds(work, QWEN3_4B, 8, mfu=0.5) == pytest.approx(expected)
    rl = TrainingShape(tokens=1e9, max_length=8192, extra_forwards=2)
    assert training_seconds(rl, QWEN3_4B, 8) == pytest.approx(
        training_seconds(work, QWEN3_4B, 8) * 10 / 6)
