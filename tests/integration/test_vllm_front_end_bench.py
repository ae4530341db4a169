"""``benchmarks/vllm_front_end.py`` against the session's shared vLLM server, at smoke size: the
burst and round rows it prints are measured, with their counts and engine steps."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from benchmarks.vllm_front_end import measure

pytestmark = [pytest.mark.vllm, pytest.mark.integration]


def test_the_front_end_benchmark_measures_bursts_and_rounds(vllm_server: str) -> None:
    args = argparse.Namespace(lengths=[16], burst=4, round=4, repeats=1, seed=0)
    result = asyncio.run(measure(vllm_server, args))
    [burst] = result["bursts"]
    assert burst["prompt_tokens"] == 32 and burst["requests"] == 4
    assert 1 <= burst["engine_steps"] <= 4 + 1  # one step per request at most (and warm-up)
    assert isinstance(burst["per_extra_request_ms"], float)
    [lockstep] = result["rounds"]
    assert lockstep["requests"] == 4 and 8 <= lockstep["longest_turn"] <= 160
    # every request wrote its exact length, so the engine stepped at least the longest turn
    assert lockstep["engine_steps"] >= lockstep["longest_turn"]
    assert lockstep["wall_s"] > 0 and lockstep["steps_over_longest"] >= 1.0
