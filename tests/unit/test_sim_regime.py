"""What bounds a simulated RL step (work or the longest episode), and the lockstep baseline's
pinned placement."""

from __future__ import annotations

import numpy as np
import pytest

from agentmath.backends.base import RequestTag, SamplingParams, tagged
from agentmath.formats import get_format
from agentmath.sim import (
    PinnedPlacement,
    ServerCostModel,
    Workload,
    build_fleet,
    ideal_makespan,
    servers_for_step,
    step_regime,
)
from agentmath.sim.ideal import lockstep_bound, turn_seconds

H100 = ServerCostModel.h100_qwen3_8b()


def test_step_work_is_the_work_bound_of_an_average_batch() -> None:
    workload = Workload(n_groups=64)
    regime = step_regime(workload, 4, H100, batch_groups=16)
    ideal = ideal_makespan(workload, 4, H100)
    assert regime.work_s == pytest.approx(ideal.work_s * 16 / 64)
    assert 0 < regime.longest_episode_s <= ideal.critical_path_s * 1.01
    # twice the servers: half the work per step, the same longest episode
    wider = step_regime(workload, 8, H100, batch_groups=16)
    assert wider.work_s == pytest.approx(regime.work_s / 2)
    assert wider.tail_ratio == pytest.approx(2 * regime.tail_ratio)


def test_paper_batches_on_8_servers_are_bound_by_their_work() -> None:
    # AgentMath's batch (64 groups of 8, 16.9k tokens per episode) on 8 H100s serving an 8B
    # model: a step's work (~1,300 s) exceeds its longest episode (~960 s) run alone
    workload = Workload(n_groups=256)
    regime = step_regime(workload, 8, H100, batch_groups=64)
    assert 1_000 < regime.work_s < 1_700
    assert 700 < regime.longest_episode_s < 1_200
    assert regime.tail_ratio < 1


def test_a_reported_step_time_bounds_the_fleet_from_below() -> None:
    workload = Workload(n_groups=256)
    one = step_regime(workload, 1, H100, batch_groups=64).work_s
    assert servers_for_step(workload, H100, 64, one / 10) == pytest.approx(10)
    # the paper's fastest row, 750-900 s per step, needs more than 8 such servers
    assert servers_for_step(workload, H100, 64, 900) > 8
    with pytest.raises(ValueError):
        servers_for_step(workload, H100, 64, 0)


def test_lockstep_rounds_wait_for_their_slowest_turn() -> None:
    workload = Workload(n_groups=16)
    groups = range(8)
    turns = [turn_seconds(workload.script(g, s), H100) for g in groups for s in range(8)]
    bound = lockstep_bound(workload, H100, groups)
    longest = max(sum(t) for t in turns)
    assert bound >= longest  # every round takes at least the longest episode's own turn
    rounds = max(len(t) for t in turns)
    assert bound == pytest.approx(sum(max(t[r] for t in turns if len(t) > r)
                                      for r in range(rounds)))
    # one turn: its decode alone (a + b per token, d per context token read) + its tool
    script = workload.script(0, 0)
    first = script.turns[0]
    g, ctx = first.gen_tokens, script.prompt_tokens
    assert turn_seconds(script, H100)[0] == pytest.approx(
        g * (H100.a + H100.b) + H100.d * (g * ctx + g * (g - 1) / 2) + first.tool_latency_s)


def test_a_narrower_turn_spread_keeps_the_mean_and_shortens_lockstep() -> None:
    workload = Workload(n_groups=512)
    narrow = workload.with_turn_sigma(0.5)
    tokens = np.array([s.total_tokens for s in narrow.scripts()])
    assert tokens.mean() == pytest.approx(16_900, rel=0.03)  # the paper's mean still holds
    assert narrow.turn_tokens.sigma == 0.5
    wide = step_regime(workload, 8, H100, 64)
    assert step_regime(narrow, 8, H100, 64).lockstep_s < 0.8 * wide.lockstep_s
    # with the default spread a lockstep step is several times the longest episode
    assert wide.lockstep_s > 3 * wide.longest_episode_s
    with pytest.raises(ValueError):
        workload.with_turn_sigma(-1)


def test_pinned_placement_keeps_an_episode_on_its_first_server() -> None:
    workload = Workload(n_groups=4)
    fleet = build_fleet(workload, 3, H100)
    placement = PinnedPlacement(fleet.backends)
    stop = get_format("code_interpreter").stop_strings

    async def main() -> list[str]:
        servers = []
        for episode in ("sim-0#0", "sim-0#1", "sim-1#0", "sim-0#0", "sim-0#1"):
            prompt = await placement.render_prompt(
                [{"role": "user", "content": workload.problem(int(episode[4]))}])
            with tagged(RequestTag(episode, episode.split("#")[0], 0)):
                gen = await placement.generate(prompt, stop=stop, max_tokens=4,
                                               sampling=SamplingParams())
            servers.append(gen.info["server"])
        return servers

    servers = fleet.run(main)
    assert servers[:3] == ["sim-0", "sim-1", "sim-2"]  # spread in turn, as a sharded batch
    assert servers[3:] == ["sim-0", "sim-1"]  # later turns stay home
    placement.forget(episode_id="sim-0#0")
    assert placement.home("sim-0#0") == 0  # a new episode takes the next server in turn
    with pytest.raises(ValueError):
        PinnedPlacement([])
