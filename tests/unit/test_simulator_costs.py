"""The simulator's H100 cost model against the published measurements it cites
(``agentmath/sim/hardware.py``), and its workload against what AgentMath states."""

from __future__ import annotations

import numpy as np
import pytest

from agentmath.sim import ServerCostModel, Workload
from agentmath.sim.hardware import H100_SXM, LLAMA3_8B, QWEN3_8B, step_coefficients

H100 = ServerCostModel.h100_qwen3_8b()
#: The same derivation for Llama-3-8B, the model the published numbers were measured on.
LLAMA = ServerCostModel(**step_coefficients(LLAMA3_8B, H100_SXM))  # type: ignore[arg-type]


def test_kv_bytes_and_capacity_follow_from_the_shape() -> None:
    # 2 (K, V) x 36 layers x 8 KV heads x 128 x 2 bytes
    assert QWEN3_8B.kv_bytes_per_token == 147_456
    assert LLAMA3_8B.kv_bytes_per_token == 131_072
    # 0.9 x 81,559 MiB - 16.4 GB of weights - 2.5 GiB, in 144 KiB tokens
    expected = (0.9 * 81_559 * 2**20 - 8.19e9 * 2 - 2.5 * 2**30) / 147_456
    assert H100.kv_tokens == pytest.approx(expected, rel=1e-6)
    assert 380_000 < H100.kv_tokens < 400_000


def test_decode_step_at_small_batch_matches_lambda_prompt_10() -> None:
    # [L10]: median ITL 72.30 ms per 10-step chunk -> 7.2 ms per step, batch <= 10, contexts
    # of ~250 tokens (137 input + output so far); within 10%
    assert LLAMA.step_time(10, 0, 10 * 250) == pytest.approx(0.00723, rel=0.10)


def test_decode_step_at_batch_256_matches_lambda_prompt_320() -> None:
    # [L320]: 10-step chunks of 0.125-0.131 s while ~256 requests run, ~300-token contexts;
    # within 15%
    assert LLAMA.step_time(256, 0, 256 * 300) == pytest.approx(0.0127, rel=0.15)


def test_batch_one_decode_is_bandwidth_bound_as_measured() -> None:
    # [JM]: an 8B model decodes at 77% of the HBM roofline at batch 1 (A100); on an H100 the
    # same share gives 1 / (16.06 GB / (0.77 x 3.35 TB/s)) = 161 tok/s before the fixed
    # overhead; the model's rate must be within 15% of it
    assert LLAMA.decode_rate(1, 1000) == pytest.approx(161, rel=0.15)


@pytest.mark.parametrize(("tokens", "seconds"), [(10_000, 0.2), (40_000, 1.1), (60_000, 2.1),
                                                 (80_000, 3.8), (100_000, 7.0)])
def test_prefill_time_matches_the_published_chart(tokens: int, seconds: float) -> None:
    # [KV]: prefill time of Llama-3.1-8B on an H100 by prompt length, read off a chart: 30%
    assert LLAMA.prefill_time(tokens) == pytest.approx(seconds, rel=0.30)


def test_prefill_is_quadratic_and_decode_is_kv_bound() -> None:
    # doubling a long prompt more than doubles its prefill (attention), and a step's cost
    # grows with the context it reads: 23 agentic contexts of 17k cost as much as 256 of 1.5k
    assert H100.prefill_time(80_000) > 2.2 * H100.prefill_time(40_000)
    assert H100.step_time(23, 0, 23 * 17_000) == pytest.approx(
        H100.step_time(256, 0, 256 * 1_500), rel=0.1)
    # the preset is what the derivation gives for Qwen3-8B on an H100
    for name, value in step_coefficients(QWEN3_8B, H100_SXM).items():
        assert getattr(H100, name) == pytest.approx(value)


def test_server_charges_prefill_attention_by_position() -> None:
    import simpy

    from agentmath.sim import BlockHasher, SimServer

    cost = ServerCostModel(a=0.01, b=0.0, c=1e-5, d=0.0, e=1e-8, max_batched_tokens=1000,
                           max_running=8, kv_tokens=64_000)
    env = simpy.Environment()
    server = SimServer(env, cost)
    done: list[object] = []
    ids = [i % 200 for i in range(2500)]
    server.submit(2500, 1, BlockHasher(16).hashes(None, 0, ids), done.append)
    env.run(until=100)
    assert done
    # three chunks of 1000, 1000, 500 tokens at positions 0.., 1000.., 2000..
    assert server.stats.busy_s == pytest.approx(cost.prefill_time(2500))


# ------------------------------------------------------------------------------ workload

def test_workload_matches_the_papers_statistics() -> None:
    workload = Workload(n_groups=1024)  # 8,192 episodes
    scripts = workload.scripts()
    calls = np.array([s.calls for s in scripts])
    tokens = np.array([s.total_tokens for s in scripts])
    assert workload.group_size == 8
    assert calls.mean() == pytest.approx(8.3, rel=0.03)
    assert tokens.mean() == pytest.approx(16_900, rel=0.03)
    assert calls.max() <= 96 and workload.max_calls == 96
    assert tokens.max() <= 96 * 1024 and workload.max_episode_tokens == 96 * 1024
    # the long tail reaches the context cap: some episodes are cut there, and p99 is > 64k
    assert any(s.ending == "truncated" for s in scripts)
    assert np.percentile(tokens, 99) > 64_000
    # the loop's budgets let every script play out
    config = workload.loop_config()
    assert config.max_tool_calls == 96 and config.max_total_tokens == 96 * 1024


def test_stale_kv_keeps_the_cache_across_a_weight_update() -> None:
    from agentmath.backends.base import RequestTag, SamplingParams, tagged
    from agentmath.formats import get_format
    from agentmath.sim import build_fleet

    stop = get_format("code_interpreter").stop_strings
    workload = Workload(n_groups=4)
    cached = {}
    for stale in (False, True):
        fleet = build_fleet(workload, 1, H100, stale_kv=stale)
        backend = fleet.backends[0]

        async def main() -> int:
            prompt = await backend.render_prompt([{"role": "user",  # noqa: B023
                                                   "content": workload.problem(2)}])
            with tagged(RequestTag("sim-2#0", "sim-2", 0)):
                first = await backend.generate(prompt, stop=stop, max_tokens=50,  # noqa: B023
                                               sampling=SamplingParams())
            with tagged(RequestTag("sim-2#0", "sim-2", 1)):  # parked, resumed under v1
                again = await backend.generate(prompt + first.token_ids, stop=stop,  # noqa: B023
                                               max_tokens=10, sampling=SamplingParams())
            return again.info["cached_tokens"]

        cached[stale] = fleet.run(main)
    assert cached[False] == 0  # salted by version: re-prefilled
    assert cached[True] > 0  # stale KV reused


def test_the_ideal_counts_the_steps_the_kv_capacity_forces() -> None:
    from agentmath.sim import ideal_makespan

    workload = Workload(n_groups=16)
    ideal = ideal_makespan(workload, 1, H100)
    # agentic contexts: the KV cache holds few of them, so decode steps are small and many
    assert ideal.context_token_steps / H100.kv_tokens > ideal.decode_tokens / H100.max_running
    bigger = ideal_makespan(workload, 1, H100.with_(kv_tokens=10 * H100.kv_tokens))
    assert bigger.work_s < ideal.work_s
