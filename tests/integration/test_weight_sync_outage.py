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
from tests.fixtures.outage_server import free_port, start_process
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
    assert log.read_text().splitlines()[:2] == ["/collective_rpc", "/reset_prefix_cache"]
    messages = [r.getMessage() for r in caplog.records if r.name == "agentmath.backends.outage"]
    held = [m for m in messages if "(weight push) is unreachable" in m]
    resumed = [m for m in messages if "answers again after" in m]
    assert len(held) == 1 and len(resumed) == 1 and "ConnectError" in held[0], messages
    print(f"\npush during an outage: {resumed[0]}; then {log.read_text().split()[:2]}")


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
