"""Stand-ins for verl's GPU side, with verl's own interfaces and types.

* :class:`ScriptedServer`: a rollout server's ``generate`` (vLLM's semantics on token ids:
  ``stop`` strings matched in the new text and kept (vLLM's ``include_stop_str_in_output``,
  SGLang's ``no_stop_trim``), ``max_tokens``, the end-of-turn id, one logprob per sampled
  token) returning verl's ``TokenOutput``, from a deterministic script of model turns.
* :class:`ModelServer`: the same interface backed by agentmath's tiny test model (greedy,
  through agentmath's ``hf`` backend).
* :class:`FakeServerManager`: verl's ``LLMServerClient.generate`` signature over one server
  (what an agent loop sees as ``self.server_manager``).
* :class:`LocalActor`: a Ray actor handle stand-in (``handle.method.remote(...)`` awaitable),
  so verl's real ``LLMServerClient`` can route through a load balancer and servers in-process.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import os
from collections.abc import Sequence
from typing import Any

import hydra
import verl
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from verl.experimental.agent_loop.agent_loop import (
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from agentmath.formats import get_format
from agentmath.sandbox.pool import SandboxPool
from agentmath.tasks import Task
from agentmath.verl.data import to_verl_row

VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def verl_config(*overrides: str, prompt_length: int = 512, response_length: int = 256,
                rollout: str = "vllm") -> DictConfig:
    """verl's own trainer config (ppo_trainer.yaml composed by hydra), with overrides: a copy
    of the one composed for these arguments (hydra's compose takes 1-2 s here, and the suite
    asks for a handful of distinct configs some 40 times), so a test may change its own."""
    return copy.deepcopy(_composed((f"actor_rollout_ref.rollout.name={rollout}",
                                    f"actor_rollout_ref.rollout.prompt_length={prompt_length}",
                                    f"actor_rollout_ref.rollout.response_length="
                                    f"{response_length}", *overrides)))


@functools.cache
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def logprob_of(token_id: int) -> float:
    """The scripted servers' logprob of a sampled token: a function of the id, so a test can
    check that every logprob stayed aligned with its token."""
    return -0.01 - (token_id % 97) / 100.0


class Gate:
    """Holds requests until ``n`` have arrived, so that they are in flight together (a
    router's load then counts them all, whatever the machine's speed)."""

    def __init__(self, n: int, timeout: float = 60.0) -> None:
        self.n, self.timeout = n, timeout
        self.arrived = 0
        self.open = asyncio.Event()

    async def arrive(self) -> None:
        self.arrived += 1
        if self.arrived >= self.n:
            self.open.set()
        await asyncio.wait_for(self.open.wait(), self.timeout)


class ScriptedServer:
    """A vLLM-like server playing ``turns``: turn k is played for a context that extends k
    distinct contexts seen before (each earlier turn of the same conversation; sibling
    samples with equal contexts count once)."""

    def __init__(self, tokenizer: Any, turns: Sequence[str], name: str = "server", *,
                 gate: Gate | None = None) -> None:
        self.tokenizer = tokenizer
        self.turns = list(turns)
        self.name = name
        self.gate = gate  # first turns wait there until all have arrived (they overlap)
        self.eos = tokenizer.eos_token_id
        self.seen: set[tuple[int, ...]] = set()
        self.calls: list[dict[str, Any]] = []

    def _turn(self, prompt: tuple[int, ...]) -> int:
        index = sum(1 for p in self.seen if len(p) < len(prompt) and prompt[:len(p)] == p)
        self.seen.add(prompt)
        return min(index, len(self.turns) - 1)

    def _cut(self, ids: list[int], stop: Sequence[str], max_tokens: int) -> list[int]:
        out: list[int] = []
        for token in ids:
            out.append(token)
            if token == self.eos or len(out) >= max_tokens:
                break
            if any(s in self.tokenizer.decode(out) for s in stop):
                break
        return out

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any],
                       request_id: str, image_data: Any = None, video_data: Any = None,
                       **_: Any) -> TokenOutput:
        params = dict(sampling_params)
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids),
                           "sampling_params": dict(params)})
        turn = self._turn(tuple(prompt_ids))
        if turn == 0 and self.gate is not None:
            await self.gate.arrive()
        text = self.turns[turn]
        ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + [self.eos]
        out = self._cut(ids, params.get("stop") or [], int(params.get("max_tokens", 1 << 30)))
        logprobs = [logprob_of(t) for t in out] if params.get("logprobs") else None
        await asyncio.sleep(0)
        return TokenOutput(token_ids=out, log_probs=logprobs, stop_reason="completed",
                           num_preempted=0, extra_fields={"global_steps": 0})


class ModelServer:
    """verl's server interface over agentmath's tiny test model (greedy, ``hf`` backend)."""

    def __init__(self, model_dir: str) -> None:
        from agentmath.backends.hf import HFBackend

        self.backend = HFBackend(model_dir)
        self.calls: list[dict[str, Any]] = []

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any],
                       request_id: str, **_: Any) -> TokenOutput:
        from agentmath.backends.base import SamplingParams

        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids),
                           "sampling_params": dict(sampling_params)})
        gen = await self.backend.generate(
            prompt_ids, stop=sampling_params.get("stop") or [],
            max_tokens=int(sampling_params["max_tokens"]),
            sampling=SamplingParams(temperature=0.0, logprobs=True))
        return TokenOutput(token_ids=gen.token_ids, log_probs=gen.logprobs,
                           stop_reason="completed")


class FakeServerManager:
    """verl's ``LLMServerClient.generate`` interface, all requests on one server."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.request_ids: list[str] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int],
                       sampling_params: dict[str, Any], image_data: Any = None,
                       video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, **kwargs: Any) -> TokenOutput:
        self.request_ids.append(request_id)
        return await self.server.generate(prompt_ids=prompt_ids,
                                          sampling_params=dict(sampling_params),
                                          request_id=request_id)


class _Remote:
    def __init__(self, method: Any) -> None:
        self.method = method

    def remote(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        result = self.method(*args, **kwargs)
        if asyncio.iscoroutine(result):
            return asyncio.ensure_future(result)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(result)
        return future


class LocalActor:
    """``handle.method.remote(...)`` -> an awaitable, like a Ray actor handle, in-process."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> _Remote:
        return _Remote(getattr(self.target, name))


def dataset_fields(task: Task, *, index: int = 0, uid: str = "group-0") -> dict[str, Any]:
    """The keyword fields verl's AgentLoopWorker passes to ``run`` for a dataset row written
    by :func:`agentmath.verl.data.to_verl_row` (RLHFDataset turns ``prompt`` into
    ``raw_prompt``; ``agent_name`` is consumed by the worker)."""
    row = to_verl_row(task, index=index)
    return {"raw_prompt": row["prompt"], "data_source": row["data_source"],
            "reward_model": row["reward_model"], "extra_info": row["extra_info"],
            "ability": row["ability"], "index": index, "tools_kwargs": {},
            "interaction_kwargs": {}, "uid": uid}


def make_agent_loop(config: DictConfig, server_manager: Any, tokenizer: Any,
                    entry: dict[str, Any] | None = None) -> Any:
    """An agent loop built the way verl's AgentLoopWorker builds one per sample: hydra
    instantiates the registry entry (or ``entry``) with the worker's arguments."""
    entry = entry if entry is not None else _agent_loop_registry["agentmath"]
    return hydra.utils.instantiate(
        config=entry, trainer_config=DictConfigWrap(config=config),
        server_manager=server_manager, tokenizer=tokenizer, processor=None,
        hf_model_type=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]))


def runs(mask: list[int], value: int) -> list[tuple[int, int]]:
    """(start, end) of each maximal run of ``value`` in ``mask``."""
    out, start = [], None
    for i, m in enumerate([*mask, 1 - value]):
        if m == value and start is None:
            start = i
        elif m != value and start is not None:
            out.append((start, i))
            start = None
    return out


#: :func:`sandbox_outputs`' own pool on each event loop (its own zygote, not the agent loop's),
#: kept until :func:`close_reference_pools`: starting a pool takes 1-2 s here.
_reference_pools: dict[asyncio.AbstractEventLoop, SandboxPool] = {}


async def sandbox_outputs(cells: list[str], fmt_name: str = "code_interpreter") -> list[str]:
    """The format's rendering of ``cells`` run in one fresh agentmath sandbox session (a new
    worker of a reference pool apart from the agent loop's sandbox)."""
    fmt = get_format(fmt_name)
    loop = asyncio.get_running_loop()
    if loop not in _reference_pools:
        pool = SandboxPool()
        await pool.start()
        _reference_pools[loop] = pool
    session = _reference_pools[loop].session()
    try:
        return [fmt.render(await session.run(code, timeout=10.0), max_chars=2000)
                for code in cells]
    finally:
        await session.close()


async def close_reference_pools() -> None:
    """Close :func:`sandbox_outputs`' pool of the running event loop, if it has one."""
    pool = _reference_pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.close()
