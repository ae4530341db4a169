"""The weight push between two RL steps while its server is down: the stand-in server
(tests/fixtures/outage_server.py, which accepts vLLM's weight-sync routes) is killed with
SIGKILL just before :meth:`VLLMWeightSync.push` and started again on the same port a few
seconds later. With ``max_outage_s`` the push waits for it (logged once as an outage) and then
loads the weights into it; past the bound, or with it off, the push fails as before with a
WeightSyncError naming the server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from pathlib import Path

import pytest

from agentmath.rl.sync_vllm import VLLMWeightSync, WeightSyncError
from tests.fixtures.outage_server import WEIGHT_LOAD, StandIn, free_port, start_process
from tests.fixtures.restart import run_through_a_restart
from tests.unit.test_weight_sync_unit import FakeModel, FakeTokenizer

pytestmark = pytest.mark.integration
DOWN_S = 2.5


def test_a_push_waits_out_a_server_killed_just_before_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentmath.backends.outage")
    answers, log = tmp_path / "answers.json", tmp_path / "posts.log"
    answers.write_text(json.dumps({}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs = [start_process(port, answers, 0.0)]

    async def main() -> tuple[str, float]:
        sync = VLLMWeightSync([url], tmp_path / "weights", served_name="m", max_outage_s=30)
        try:
            await sync.push(FakeModel(), FakeTokenizer(), 1)  # step 1's push, server up
            os.kill(procs[-1].pid, signal.SIGKILL)  # the server dies just before step 2's
            procs[-1].wait()
            started = time.monotonic()
            push = asyncio.create_task(sync.push(FakeModel(), FakeTokenizer(), 2))
            await asyncio.sleep(DOWN_S)
            assert not push.done()
            procs.append(await asyncio.to_thread(start_process, port, answers, 0.0, log))
            name = await push
            return name, time.monotonic() - started
        finally:
            await sync.aclose()

    try:
        name, took = asyncio.run(main())
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert name == "m" and DOWN_S <= took < DOWN_S + 6
    assert log.read_text().splitlines()[:3] == WEIGHT_LOAD
    messages = [r.getMessage() for r in caplog.records if r.name == "agentmath.backends.outage"]
    held = [m for m in messages if "(weight push) is unreachable" in m]
    resumed = [m for m in messages if "answers again after" in m]
    assert len(held) == 1 and len(resumed) == 1 and "ConnectError" in held[0], messages
    print(f"\npush during an outage: {resumed[0]}; then {log.read_text().split()[:2]}")


def test_a_push_waits_out_a_server_frozen_just_before_it(tmp_path: Path) -> None:
    """The stand-in frozen (SIGSTOP: its socket takes the connection, nothing answers) before
    a push, thawed 3 s later: the reload times out (http_timeout_s 1 s), /health gets no
    answer either, so the push waits as in an outage and loads the weights once it answers."""
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({}))
    port, log = free_port(), tmp_path / "posts.log"
    server = start_process(port, answers, 0.0, post_log=log)

    async def main() -> float:
        sync = VLLMWeightSync([f"http://127.0.0.1:{port}"], tmp_path / "weights",
                              served_name="m", max_outage_s=30, http_timeout_s=1.0)
        try:
            os.kill(server.pid, signal.SIGSTOP)
            started = time.monotonic()
            push = asyncio.create_task(sync.push(FakeModel(), FakeTokenizer(), 1))
            await asyncio.sleep(3.0)
            assert not push.done()
            os.kill(server.pid, signal.SIGCONT)
            await push
            return time.monotonic() - started
        finally:
            await sync.aclose()

    try:
        took = asyncio.run(main())
    finally:
        server.kill()
        server.wait()
    assert 3.0 <= took < 10.0
    assert log.read_text().splitlines()[-3:] == WEIGHT_LOAD


async def test_a_reload_that_times_out_on_a_server_whose_health_answers_is_not_resent(
        tmp_path: Path) -> None:
    """A reload that times out while /health answers at once (the engine stuck, not the
    server gone) fails after one try: no second reload for another http_timeout_s."""
    import httpx

    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path == "/collective_rpc":
            raise httpx.ReadTimeout("timed out", request=request)
        return httpx.Response(200, json={})

    sync = VLLMWeightSync(["http://a:1"], tmp_path / "w", served_name="m", max_outage_s=30,
                          transport=httpx.MockTransport(handler))
    with pytest.raises(WeightSyncError, match="ReadTimeout"):
        await sync.push(FakeModel(), FakeTokenizer(), 1)
    assert calls == ["/collective_rpc", "/health"]
    await sync.aclose()


@pytest.mark.parametrize("max_outage_s", [0.0, 1.0])
def test_a_push_to_a_server_that_stays_down_fails_naming_it(tmp_path: Path,
                                                           max_outage_s: float) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"  # nothing listens there

    async def main() -> None:
        sync = VLLMWeightSync([url], tmp_path / "weights", served_name="m",
                              max_outage_s=max_outage_s)
        try:
            await sync.push(FakeModel(), FakeTokenizer(), 1)
        finally:
            await sync.aclose()

    started = time.monotonic()
    with pytest.raises(WeightSyncError) as info:
        asyncio.run(main())
    assert url in str(info.value) and info.value.unreachable
    assert max_outage_s <= time.monotonic() - started < max_outage_s + 3
    assert ("max_outage_s" in str(info.value)) == (max_outage_s > 0)


def test_rl_waits_out_a_server_that_dies_at_a_weight_push(tiny_model_dir: Path,
                                                          tmp_path: Path) -> None:
    """``agentmath rl`` (openai generator, 3 steps, every group trained so that every step
    pushes): the stand-in server dies as step 1's push reaches it (its second reload, after
    the run's first push) and is started again DOWN_S later. The run does not crash: the push
    waits for the server (the wait logged), loads the weights into it first, and the three
    steps run."""
    import sys
    from functools import partial

    pytest.importorskip("torch")
    from tests.integration.test_outage_restart import completions_seen, posts

    tasks = [json.loads(line) for line in
             (tiny_model_dir.parent / "test.jsonl").read_text().splitlines()[:4]]
    answers, data = tmp_path / "answers.json", tmp_path / "train.jsonl"
    answers.write_text(json.dumps({t["problem"]: t["answer"] for t in tasks}))
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    port, out, cfg = free_port(), tmp_path / "rl", tmp_path / "rl.toml"
    cfg.write_text(
        f'model = "{tiny_model_dir}"\nsteps = 3\ngroup_size = 2\nprompts_per_step = 2\n'
        f'dynamic_sampling = false\ntensorboard = false\n[data]\ndataset = "{data}"\n'
        f'[loop]\nmax_model_tokens = 256\n[sandbox]\npreload = []\nspare_workers = 0\n'
        f'[generator]\nbackend = "openai"\nbase_urls = ["http://127.0.0.1:{port}"]\n'
        f'served_name = "m"\nmax_outage_s = 60\n')
    after = tmp_path / "posts-after.log"
    with StandIn(port, answers, 0.05, exit_at_reload=2) as server:
        got = run_through_a_restart(
            [sys.executable, "-m", "agentmath.cli", "rl", "--config", str(cfg), "--out",
             str(out), "--json"],
            when=lambda: not server.alive, kill=None,  # it dies at step 1's push
            start=partial(server.start, post_log=after), down_s=DOWN_S, log_dir=tmp_path)
    stderr = got.stderr
    assert got.returncode == 0, stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["policy_version"]) for r in rows] == [(1, 1), (2, 2), (3, 3)]
    held = [line for line in stderr.splitlines() if "(weight push) is unreachable" in line]
    resumed = [line for line in stderr.splitlines()
               if "(weight push) answers again after" in line]
    assert len(held) == 1 and len(resumed) == 1, stderr[-3000:]
    assert posts(after)[:3] == WEIGHT_LOAD  # the push first
    assert completions_seen(posts(after))  # then the next steps' rollouts
    print(f"\nrl, server dead at a push: 3 steps; {resumed[0].split('] ')[-1]}")
