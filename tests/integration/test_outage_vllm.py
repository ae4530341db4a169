"""Riding out an outage of a real vLLM (CPU) server of the tiny model (the stand-in tests:
test_outage_restart.py, test_outage_hung.py, test_weight_sync_outage.py).

The server is the second of the session's pair (``vllm_server_pair``: killable, dev mode for
weight pushes). It is killed with SIGKILL (its whole process group: front end, engine core,
worker) while requests are in flight, and started again on the same port ``DOWN_S`` later,
which takes a real vLLM start (25 to 60 s on 2 busy cores with the compile cache). "In
flight" is made certain rather than caught by polling (a fast machine finished a whole run
between two polls): at the moment, the engine is frozen (SIGSTOP) and the kill waits until
the front end has taken in one more request
(:func:`tests.fixtures.vllm_server.held_in_flight`). ``agentmath eval`` and ``agentmath rl``
(local engine) ride it out: no errored sample or episode, the wait logged once, and in RL the
restarted server gets the current weights before the held requests. A frozen engine behind a
live front end (``/health`` answers, no generation finishes) holds an outage open until it
moves again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from functools import partial
from pathlib import Path

import httpx
import pytest

from agentmath.backends.base import SamplingParams
from agentmath.backends.openai import OpenAIBackend
from tests.fixtures.models import held_out_problems
from tests.fixtures.restart import records, run_through_a_restart
from tests.fixtures.vllm_server import STARTUP_TIMEOUT_S, VllmPair, held_in_flight

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

DOWN_S = 5.0  # between the kill and the start of the new server (which then takes ~25 s)
#: The bound: past the longest restart the fixture allows (on a busy 2-core machine one took
#: ~200 s), so that only a failed restart can outlast it.
MAX_OUTAGE_S = STARTUP_TIMEOUT_S + 60
KILLED = 1  # the pair's server that is killed (the other is the session's shared one)
#: A test that restarts the server may take a vLLM start (up to STARTUP_TIMEOUT_S, 300 s) on
#: top of the pair's own start (its setup, in the first test that asks for it).
RESTARTS = pytest.mark.timeout(900)


@pytest.fixture
def killable(vllm_server_pair: VllmPair) -> VllmPair:
    """The pair, its killable server running (started again if a test before was stopped
    between a kill and the end of the restart)."""
    vllm_server_pair.revive(KILLED)
    return vllm_server_pair


def outage_lines(log: str) -> tuple[list[str], list[str]]:
    """The lines of a run's log that start and end an outage."""
    lines = log.splitlines()
    return ([line for line in lines if "is unreachable" in line],
            [line for line in lines if "answers again after" in line])


def waited_s(resumed: str) -> float:
    return float(resumed.split("answers again after ")[1].split(" s")[0])


def posts(log: Path) -> list[str]:
    """The paths of the POSTs a vLLM server's access log shows, in order."""
    return re.findall(r'"POST ([^\s?]+)\S* HTTP', log.read_text(errors="replace"))


@RESTARTS
def test_eval_waits_out_a_vllm_server_killed_mid_run(killable: VllmPair, tmp_path: Path) -> None:
    """``agentmath eval`` (16 samples, 4 at a time, ``--http-retries 2``: ~1.5 s of retries
    without the gate) with its server killed once 2 samples are recorded and a request is
    in flight: every sample is recorded and graded, none an error, the wait logged once."""
    pair, out = killable, tmp_path / "run"
    url = pair.urls[KILLED]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": p.id, "problem": p.problem, "answer": p.answer})
                            + "\n" for p in held_out_problems(8)))
    in_flight = held_in_flight(lambda: len(records(out)) >= 2, partial(pair.freeze, KILLED),
                               partial(pair.added, KILLED))

    got = run_through_a_restart(
        [sys.executable, "-m", "agentmath.cli", "eval", "--dataset", str(data), "--model",
         "tiny", "--base-url", url, "--format", "code_interpreter", "--samples", "2",
         "--concurrency", "4", "--temperature", "1.0", "--max-model-tokens", "200",
         "--http-retries", "2", "--max-outage", f"{MAX_OUTAGE_S:g}", "--out", str(out),
         "--json"],
        when=in_flight, kill=partial(pair.kill, KILLED), start=partial(pair.restart, KILLED),
        down_s=DOWN_S, timeout_s=300, log_dir=tmp_path)
    assert got.returncode == 0, got.stderr[-3000:]
    rows = records(out)
    assert len(rows) == 16
    assert [r["error"] for r in rows if r["finish_reason"] == "error"] == []
    assert all(r["correct"] in (True, False) and not r["grade_timed_out"] for r in rows)
    assert json.loads(got.stdout.strip().splitlines()[-1])["n_errors"] == 0
    held, resumed = outage_lines(got.stderr)
    assert len(held) == 1 and len(resumed) == 1, got.stderr[-3000:]
    assert DOWN_S + got.restart_s - 3 <= waited_s(resumed[0]) <= DOWN_S + got.restart_s + 10
    print(f"\neval, vLLM killed with request(s) held in its frozen engine "
          f"({got.killed_s:.1f} s into the run), restarted {got.down_s:.1f} s later, up again "
          f"{got.restart_s:.1f} s after that: 0 errors of {len(rows)}, "
          f"{sum(bool(r['correct']) for r in rows)} correct; "
          f"{resumed[0].split('] ')[-1]} (run {got.total_s:.1f} s)")


@RESTARTS
def test_rl_waits_out_a_vllm_server_killed_mid_step(killable: VllmPair, tiny_model_dir: Path,
                                                     tmp_path: Path) -> None:
    """``agentmath rl`` (local engine, openai generator on the killable server, 3 steps of 4
    groups of 2: 8 episodes at once), the server killed once a step is logged and a request
    of the next step is in flight: no episode of any step
    ends in an error, the wait is logged once, and the restarted server's first POSTs are the
    reload of the current weights and the cache reset, before the held completions. The
    tiny model's own weights are loaded back into the server afterwards."""
    pytest.importorskip("torch")
    import yaml

    pair, out = killable, tmp_path / "rl"
    url = pair.urls[KILLED]
    (config := tmp_path / "rl.yaml").write_text(yaml.safe_dump({
        "model": str(tiny_model_dir), "format": "code_interpreter",
        "data": {"dataset": str(tiny_model_dir.parent / "test.jsonl")},
        "steps": 3, "group_size": 2, "prompts_per_step": 4, "dynamic_sampling": False,
        "rewards": [{"name": "accuracy"},
                    {"name": "tests.fixtures.restart:errored", "weight": 0.0, "key": "errored"}],
        "optim": {"learning_rate": 1e-3},
        "loop": {"max_model_tokens": 96, "max_tool_calls": 2, "max_total_tokens": 1024},
        "generator": {"backend": "openai", "base_urls": [url], "served_name": "tiny",
                      "max_outage_s": MAX_OUTAGE_S},
        "tensorboard": False, "checkpoint_every": 0}))
    metrics = out / "metrics.jsonl"

    def logged() -> int:
        return len(metrics.read_text().splitlines()) if metrics.exists() else 0

    # a step logged (its weights pushed: the next requests are the next step's), the engine
    # frozen, and a request of the next step taken in: it is in flight at the kill
    in_flight = held_in_flight(lambda: logged() >= 1, partial(pair.freeze, KILLED),
                               partial(pair.added, KILLED))

    try:
        got = run_through_a_restart(
            [sys.executable, "-m", "agentmath.cli", "rl", "--config", str(config), "--out",
             str(out), "--json"],
            when=in_flight, kill=partial(pair.kill, KILLED),
            start=partial(pair.restart, KILLED), down_s=DOWN_S, timeout_s=400,
            log_dir=tmp_path)
        after = posts(pair.log_path(KILLED))
    finally:
        if pair.procs[KILLED] is not None and pair.procs[KILLED].poll() is None:
            with httpx.Client(base_url=url, timeout=120) as client:
                client.post("/collective_rpc", json={"method": "reload_weights", "kwargs": {
                    "weights_path": str(tiny_model_dir)}}).raise_for_status()
                client.post("/collective_rpc", json={  # what VLLMWeightSync does next
                    "method": "agentmath_refresh_cpu_gemms"}).raise_for_status()
                client.post("/reset_prefix_cache").raise_for_status()
    assert got.returncode == 0, got.stderr[-3000:]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["reward_terms"]["errored"] for r in rows] == [0.0, 0.0, 0.0]
    held, resumed = outage_lines(got.stderr)
    assert len(held) == 1 and len(resumed) == 1, got.stderr[-3000:]
    # the restored weights (reload, the GEMM refresh), then the cache reset
    assert after[:3] == ["/collective_rpc", "/collective_rpc", "/reset_prefix_cache"], after[:6]
    assert "/v1/completions" in after  # then the held requests, and the next step's
    print(f"\nrl, vLLM killed with request(s) held in its frozen engine once step "
          f"1 was logged ({got.killed_s:.1f} s into the run), restarted "
          f"{got.down_s:.1f} s later, up again {got.restart_s:.1f} s after that: 3 steps, no "
          f"errored episode; {resumed[0].split('] ')[-1]}; then {after[:3]} "
          f"(run {got.total_s:.1f} s)")


@RESTARTS
async def test_a_live_health_without_generation_does_not_end_an_outage(
        killable: VllmPair, caplog: pytest.LogCaptureFixture) -> None:
    """The server's engine processes stopped (SIGSTOP) for FROZEN_S while its front end runs:
    requests time out (``timeout_s`` 3), the gate opens, and the probes find ``/health``
    answering 200 but a one-token completion not answering, so the outage goes on until the
    engine is continued; then the held requests finish."""
    frozen_s = 10.0
    caplog.set_level(logging.INFO, logger="agentmath.backends.outage")
    pair = killable
    url = pair.urls[KILLED]
    backend = OpenAIBackend(url, "tiny", timeout_s=3.0, max_retries=1, max_outage_s=60)
    sampling = SamplingParams(temperature=0.0, logprobs=False)
    prompt = list(range(20, 60))
    try:
        before = await backend.generate(prompt, stop=[], max_tokens=4, sampling=sampling)
        pair.freeze(KILLED)
        try:
            frozen_at = time.monotonic()
            held = [asyncio.create_task(backend.generate(prompt, stop=[], max_tokens=4,
                                                         sampling=sampling))
                    for _ in range(2)]
            await asyncio.sleep(frozen_s)
            async with httpx.AsyncClient(timeout=5) as client:
                health = (await client.get(f"{url}/health")).status_code
            assert health == 200 and backend.outage.is_open
            assert not any(task.done() for task in held)
        finally:
            pair.thaw(KILLED)
        after = await asyncio.gather(*held)
        took = time.monotonic() - frozen_at
    finally:
        await backend.aclose()
    assert before.token_ids and all(g.token_ids for g in after)  # they were answered
    messages = [r.getMessage() for r in caplog.records if r.name == "agentmath.backends.outage"]
    opened = [m for m in messages if "is unreachable" in m]
    resumed = [m for m in messages if "answers again after" in m]
    assert len(opened) == 1 and len(resumed) == 1, messages
    assert "1-token completion got no answer" in opened[0], opened[0]
    assert frozen_s - 3.5 <= waited_s(resumed[0]) and took >= frozen_s
    print(f"\nengine frozen {frozen_s:g} s behind a live /health: {opened[0]}; {resumed[0]}; "
          f"held requests done {took:.1f} s after the freeze")
