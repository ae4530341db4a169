"""Asynchronous RL with partial rollout, killed with SIGKILL three times and resumed: nothing of
the data is drawn twice or passed over, and the parked episodes a checkpoint held continue.

A real run on the test model (the in-process hf generator, request-level async rollout,
segments of a few tokens with interrupted turns, so that every step ends with episodes parked
and groups held back) runs in a subprocess and is killed at three different moments: as a step
line lands (its checkpoint being written), and half a second and a second and a half after one
(mid-step: episodes running, parked, groups buffered). Each time the run is started again and
resumes from its newest checkpoint. At the end, every problem in the step log (trained on, or
drawn and left out, by reason) and the groups still pending in the last checkpoint are, as a
multiset, exactly the first ``cursor`` draws of the seeded order an uninterrupted run draws
from; and the first step after each resume counts what became of the pending groups of the
checkpoint it resumed from (``resumed_kept``, ``resumed_continued``, ``resumed_regenerated``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate")

from agentmath.agent.trajectory import Trajectory  # noqa: E402
from agentmath.rl.config import RLConfig  # noqa: E402
from agentmath.rl.records import CheckpointState, StepMetrics, read_steps  # noqa: E402
from agentmath.rl.rollouts import RequestStream  # noqa: E402
from agentmath.rl.trainer import train_rl  # noqa: E402
from agentmath.tasks import Task, load_tasks  # noqa: E402
from agentmath.train.plumbing import list_checkpoints  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RUN = ("import sys; from agentmath.rl.config import RLConfig; "
       "from agentmath.rl.trainer import train_rl; "
       "train_rl(RLConfig.model_validate_json(open(sys.argv[1]).read()), sys.argv[2], "
       "progress=False)")


def brevity(task: Task, trajectory: Trajectory) -> float:
    """A reward with variance within a group: fewer tokens is better."""
    return -trajectory.model_tokens / 100.0


def _config(model_dir: Path, **rollout: Any) -> RLConfig:
    return RLConfig.model_validate({
        "model": str(model_dir), "format": "code_interpreter",
        "data": {"dataset": str(model_dir.parent / "test.jsonl"), "limit": 6},
        "steps": 7, "group_size": 2, "prompts_per_step": 2, "seed": 0,
        "rewards": [{"name": "tests.integration.test_rl_async_resume:brevity", "weight": 1.0}],
        "optim": {"learning_rate": 1e-3}, "max_sampling_rounds": 2,
        "loop": {"max_model_tokens": 96, "max_tool_calls": 2, "max_total_tokens": 1024},
        "rollout": {"mode": "async", "segment_tokens": 24, "interrupt_turns": True,
                    "max_staleness": 3, "max_in_flight": 4, "max_new_groups": 3,
                    "max_parked_sessions": 8, **rollout},
        "generator": {"max_batch": 8}, "tensorboard": False,
        "checkpoint_every": 1, "keep_checkpoints": 0,
    })


def _lines(out: Path) -> int:
    path = out / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _newest(out: Path) -> int:
    found = list_checkpoints(out)
    return found[-1][0] if found else 0


def _state(out: Path, step: int) -> CheckpointState:
    import torch

    payload = torch.load(out / f"checkpoint-{step}" / "trainer_state.pt", map_location="cpu",
                         weights_only=True)
    return CheckpointState.from_payload(payload)


def _run_and_kill(cmd: list[str], out: Path, delay_s: float, log: Path) -> None:
    """Start ``cmd``; ``delay_s`` after a new step line lands, SIGKILL its process group."""
    start = _lines(out)
    with log.open("ab") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 240
        while _lines(out) <= start:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no step in 240 s"
            time.sleep(0.02)
        time.sleep(delay_s)
        assert proc.poll() is None, "the run ended before its kill"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _drawn(rows: list[StepMetrics], pending: list[str]) -> Counter[str]:
    ids = [i for r in rows for i in r.prompts]
    ids += [i for r in rows for lst in r.prompts_dropped.values() for i in lst]
    return Counter(ids + pending)


def test_killed_three_times_the_async_run_loses_and_repeats_nothing(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = _config(tiny_model_dir)
    out = tmp_path / "run"
    config_file = tmp_path / "rl.json"
    config_file.write_text(cfg.model_dump_json())
    cmd = [sys.executable, "-c", RUN, str(config_file), str(out)]
    resumes = []
    for delay in (0.0, 0.5, 1.5):
        _run_and_kill(cmd, out, delay, tmp_path / "stderr.txt")
        resumes.append(_newest(out))
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]

    rows = read_steps(out)
    assert [r.step for r in rows] == list(range(1, cfg.steps + 1))
    final = _state(out, cfg.steps)
    # the order an uninterrupted run draws from, from the seeded sampler
    tasks = load_tasks(cfg.data.dataset, limit=cfg.data.limit, allow_hub=False)
    stream = RequestStream(tasks, cfg.group_size, seed=cfg.seed, shuffle=cfg.data.shuffle)
    order = [next(stream).task.id for _ in range(final.cursor)]
    assert final.cursor > len(tasks)  # the draws crossed an epoch
    pending = [p.task_id for p in final.pending]
    positions = [p.position for p in final.pending]
    assert len(set(positions)) == len(positions)
    assert all(p is not None and 0 <= p < final.cursor for p in positions)
    assert _drawn(rows, pending) == Counter(order)  # none twice, none passed over

    # the first step after each resume counts what became of its checkpoint's pending groups
    firsts = {r + 1: _state(out, r).pending if r else [] for r in resumes}
    for row in rows:
        kept = continued = regenerated = 0
        if row.step in firsts:
            kept = sum(len(p.samples) for p in firsts[row.step])
            continued = sum(len(p.progress) for p in firsts[row.step])
            regenerated = sum(cfg.group_size for p in firsts[row.step] if not p.saved)
        got = (row.resumed_kept, row.resumed_continued, row.resumed_regenerated)
        assert got == (kept, continued, regenerated), (row.step, sorted(firsts))
        assert row.staleness_max <= cfg.rollout.max_staleness
    assert sum(r.resumed_continued for r in rows) > 0  # parked episodes went on after a kill
    assert sum(r.parked for r in rows) > 0


@pytest.mark.parametrize("policy", ["drop", "wait"])
def test_the_staleness_bound_drops_or_waits(tiny_model_dir: Path, tmp_path: Path,
                                            policy: str) -> None:
    """Episodes span weight updates (segments of 24 tokens); with a bound of one version
    nothing trained on lags more, and the step log counts the groups dropped, or the
    episodes waited for."""
    cfg = _config(tiny_model_dir, max_staleness=1, stale=policy).model_copy(
        update={"steps": 5, "checkpoint_every": 0})
    result = train_rl(cfg, tmp_path / policy, progress=False)
    rows = read_steps(result.metrics)
    assert all(r.staleness_max <= 1 for r in rows), [r.staleness_max for r in rows]
    assert any(len(r.extra.sample_versions) > 1 for r in rows)  # spanned an update
    assert all(len(r.prompts_dropped.get("stale", [])) == r.stale_dropped for r in rows)
    dropped = sum(r.stale_dropped for r in rows)
    waited = sum(r.stale_waited for r in rows)
    assert sum(r.regenerated for r in rows) == 0
    if policy == "drop":
        assert dropped > 0 and waited == 0
    else:
        assert waited > 0 and dropped == 0
