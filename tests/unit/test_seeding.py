"""One seed derivation for RL and eval, each caller's seeds unchanged: the values below were
computed with the two hashes as they were before they were merged (rl.rollouts.derive_seed and
eval.runner.sample_seed), and the stored run directory holds the seeds its samples ran with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentmath.seeding import EVAL, RL, Scheme, derive_seed, eval_sample_seed

RUN = Path(__file__).parents[1] / "fixtures" / "rundirs" / "eval_v1"

OLD_RL = {(0, "epoch", 0): 4865804915835450929,
          (1, "sample", 3, 2, 17): 8264619297716962194,
          (7, "filters", 5, "g", 1): 210985695835464167,
          (123, "sample", -1, 0, 0): 3766398738792092366}
OLD_EVAL = {(0, "a", 0): 2504032706, (7, "b", 0): 1447987184,
            (42, "test/precalculus/807.json", 15): 3130448924}


@pytest.mark.parametrize(("parts", "seed"), OLD_RL.items())
def test_rl_seeds_are_unchanged(parts: tuple[object, ...], seed: int) -> None:
    assert derive_seed(*parts) == derive_seed(*parts, scheme=RL) == seed


@pytest.mark.parametrize(("parts", "seed"), OLD_EVAL.items())
def test_eval_seeds_are_unchanged(parts: tuple[int, str, int], seed: int) -> None:
    assert eval_sample_seed(*parts) == derive_seed(*parts, scheme=EVAL) == seed


def test_the_stored_runs_samples_ran_with_these_seeds() -> None:
    config = json.loads((RUN / "config.json").read_text())
    for line in (RUN / "samples.jsonl").read_text().splitlines():
        record = json.loads(line)
        sampling = record["trajectory"]["meta"]["sampling"]  # where the old code kept it
        assert sampling["seed"] == eval_sample_seed(config["seed"], record["problem_id"],
                                                    record["sample_index"])


def test_width_bounds() -> None:
    assert derive_seed("x", scheme=Scheme(":", 1)) in (0, 1)
    with pytest.raises(ValueError):
        derive_seed("x", scheme=Scheme(":", 65))
