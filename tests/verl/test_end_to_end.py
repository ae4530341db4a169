"""The agent loop through more of verl's real machinery: verl's own ``LLMServerClient`` routing
through the agentmath router plug-in to two servers; agentmath's tiny test model as the
policy; the sandbox as a service; a dataset file read by verl's ``RLHFDataset``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.llm_server import LLMServerClient

from agentmath import grading
from agentmath.formats import get_format
from agentmath.tasks import Task
from agentmath.verl.data import write_parquet
from agentmath.verl.router import AgentMathRouter
from tests.fixtures.models import held_out_problems
from tests.integration.test_sandbox_service import TOKENS, serve
from tests.verl.fakes import (
    FakeServerManager,
    Gate,
    LocalActor,
    ModelServer,
    ScriptedServer,
    dataset_fields,
    make_agent_loop,
    runs,
    sandbox_outputs,
    verl_config,
)
from tests.verl.test_agent_loop import CELLS, SAMPLING, TASK, TURNS, entry

pytestmark = pytest.mark.usefixtures("close_sandboxes")


async def test_verls_client_routes_episodes_through_the_agentmath_router(tokenizer: Any
                                                                         ) -> None:
    gate = Gate(6)  # the six first requests are in flight together: the router sees the load
    servers = {sid: ScriptedServer(tokenizer, TURNS, sid, gate=gate) for sid in ("s0", "s1")}
    router = AgentMathRouter({sid: LocalActor(s) for sid, s in servers.items()}, {})
    config = verl_config()
    client = LLMServerClient(config, load_balancer_handle=LocalActor(router))
    tasks = [TASK, Task("t2", "Compute 123 times 457, plus one.", "56212")]
    jobs = [make_agent_loop(config, client, tokenizer).run(
        dict(SAMPLING), **dataset_fields(task, index=g, uid=f"group-{g}"))
        for g, task in enumerate(tasks) for _ in range(3)]
    outputs = await asyncio.gather(*jobs)
    assert [o.reward_score for o in outputs] == [1.0] * 6
    assert router.get_total_inflight() == 0  # every acquire was released
    firsts = {tuple(o.prompt_ids) for o in outputs}
    assert len(firsts) == 2  # one prompt per group
    placement: dict[tuple[int, ...], set[str]] = {p: set() for p in firsts}
    for sid, server in servers.items():
        for call in server.calls:
            group = next(p for p in firsts if tuple(call["prompt_ids"][:len(p)]) == p)
            placement[group].add(sid)
    # each group (3 episodes x 3 turns) stayed on one server; the two groups on two servers
    assert sorted(len(s) for s in placement.values()) == [1, 1]
    assert set().union(*placement.values()) == {"s0", "s1"}
    assert sum(len(s.calls) for s in servers.values()) == 18


async def test_tiny_model_episode_through_the_agent_loop(tiny_dir: Path,
                                                         tokenizer: Any) -> None:
    task = held_out_problems(1)[0]
    server = ModelServer(str(tiny_dir))
    loop = make_agent_loop(verl_config(response_length=600), FakeServerManager(server),
                           tokenizer, entry(loop={"max_tool_calls": 4}))
    out = await loop.run({**SAMPLING, "temperature": 0.0}, **dataset_fields(task))
    fmt = get_format("code_interpreter")
    model_runs, tool_runs = runs(out.response_mask, 1), runs(out.response_mask, 0)
    assert tool_runs, "the test model makes tool calls in this format"
    for call, (start, _) in zip(server.calls, model_runs, strict=True):  # token-exact contexts
        assert call["prompt_ids"] == out.prompt_ids + out.response_ids[:start]
    codes = []
    for (start, end), _ in zip(model_runs, tool_runs, strict=False):
        found = fmt.find_call(tokenizer.decode(out.response_ids[start:end]))
        assert found is not None
        codes.append(found.code)
    tool_text = [tokenizer.decode(out.response_ids[a:b]) for a, b in tool_runs]
    assert tool_text == await sandbox_outputs(codes)  # the sandbox's real output, as read
    assert out.response_logprobs is not None
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask,
                                          strict=True) if not m)
    assert all(lp < 0.0 or lp == pytest.approx(0.0, abs=1e-4)
               for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m)
    model_text = "".join(tokenizer.decode(out.response_ids[a:b]) for a, b in model_runs)
    graded = grading.grade(task.answer, model_text, timeout=20)
    assert out.reward_score == (1.0 if graded.correct else 0.0)
    assert out.extra_fields["agentmath"]["tool_calls"] == len(tool_runs)


def _cells_on(url: str) -> float:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKENS[0]}"}).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("agentmath_sandbox_cells_total{") and 'api="session"' in line)


async def test_code_runs_on_the_sandbox_service(tokenizer: Any, tmp_path: Path) -> None:
    with serve(tmp_path) as (url, _, _):
        before = await asyncio.to_thread(_cells_on, url)
        loop = make_agent_loop(verl_config(), FakeServerManager(ScriptedServer(tokenizer, TURNS)),
                               tokenizer, entry(sandbox_url=[url],
                                                sandbox_token_file=str(tmp_path / "tokens")))
        out = await loop.run(dict(SAMPLING), **dataset_fields(TASK))
        after = await asyncio.to_thread(_cells_on, url)
    assert after - before == len(CELLS)
    tool_text = [tokenizer.decode(out.response_ids[a:b]) for a, b in runs(out.response_mask, 0)]
    assert tool_text == await sandbox_outputs(CELLS)
    assert out.reward_score == 1.0


async def test_rows_read_by_verls_dataset_drive_the_loop(tokenizer: Any,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    assert write_parquet([TASK], path) == 1
    config = verl_config()
    dataset = RLHFDataset([str(path)], tokenizer, config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[0]]))
    fields = {k: v[0] for k, v in batch.non_tensor_batch.items()}
    assert fields.pop("agent_name") == "agentmath"  # the worker picks the loop by it
    loop = make_agent_loop(config, FakeServerManager(ScriptedServer(tokenizer, TURNS)),
                           tokenizer)
    out = await loop.run(dict(SAMPLING), **fields)
    assert out.reward_score == 1.0
    assert out.extra_fields["agentmath"]["task_id"] == "t1"
