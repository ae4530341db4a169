"""A run directory written by an older version resumes under the current code.

``tests/fixtures/rundirs/rl_v0`` was written by the code before the RL records were typed (see
``make_rl_run.py``): its checkpoint state is a plain dict with the events as JSON text and no
version field. Resuming it must restore the step, policy version, stage, data cursor and events
and go on to the end of the run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate")
pytest.importorskip("peft")

from agentmath.rl.config import RLConfig  # noqa: E402
from agentmath.rl.records import NoUpdate, StageMove, read_steps  # noqa: E402
from agentmath.rl.trainer import train_rl  # noqa: E402
from tests.fixtures.rundirs.make_rl_run import RUN, fixture_config  # noqa: E402

pytestmark = pytest.mark.integration


def _stored_run(tmp_path: Path, model_dir: Path) -> Path:
    """A copy of the stored run whose checkpoint names this machine's test model (the path is
    a structural setting; the state keeps the old format otherwise)."""
    import torch

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    state_file = run / "checkpoint-2" / "trainer_state.pt"
    state = torch.load(state_file, map_location="cpu", weights_only=True)
    assert isinstance(state["events"], str) and "format_version" not in state  # the old form
    state["config"]["model"] = str(model_dir)
    torch.save(state, state_file)
    return run


def test_a_run_written_before_typed_records_resumes(tiny_model_dir: Path,
                                                    tmp_path: Path) -> None:
    run = _stored_run(tmp_path, tiny_model_dir)
    config = RLConfig.model_validate(fixture_config(tiny_model_dir))
    result = train_rl(config, run, progress=False)
    assert result.resumed_from == 2 and result.steps == 3 and result.final_dir
    assert result.stage == 1  # the stored stage, not stage 0's tight budgets
    assert [type(e) for e in result.events[:2]] == [NoUpdate, StageMove]
    assert result.events[1].budgets.max_model_tokens == 96
    rows = read_steps(result.metrics)
    assert [r.step for r in rows] == [1, 2, 3]
    assert rows[2].policy_version >= 1  # the stored version (1) went on from where it was
