"""The rollout worker: runs whole episodes on one node of a Ray cluster.

A worker is a plain class made into an async Ray actor by the driver (``ray.remote`` at run
time, so this module does not import Ray). On its first call it builds what an episode needs
on its own node: the model client (any backend: the openai client of the model servers, or a
router over several), the sandbox (a local pool on the node, or the sandbox services) and a
:class:`~agentmath.rollout.scheduler.RolloutEngine` over them; each call then runs one sample
to its end with the sampling the driver chose, and returns the finished
:class:`~agentmath.rollout.records.Sample` (its trajectory holds every token and tool result;
``meta["ray_node"]`` names the node it ran on).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

from agentmath.backends.base import SamplingParams
from agentmath.backends.registry import BackendSettings
from agentmath.config import LoopConfig, SandboxConfig
from agentmath.rollout.records import GroupRequest, Sample


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to run episodes, sent to every worker (picklable).

    ``backend`` names a backend of :mod:`agentmath.backends.registry` and ``settings`` are what
    the worker builds it from (the model, its servers, HTTP retries and timeout);
    ``sandbox_token_file`` is read on the worker's node (the token itself is never sent)."""

    backend: str
    settings: BackendSettings
    format: str = "code_interpreter"
    loop: LoopConfig = field(default_factory=LoopConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    sandbox_url: list[str] | None = None
    sandbox_token_file: str | None = None
    chat: bool = False
    in_flight: int = 32  # episodes one worker runs at once (its actor's max_concurrency)


@dataclass(frozen=True)
class EpisodePolicy:
    """What the driver may change between calls (an RL trainer, between steps): the policy
    version segments are tagged with, the model name requests send (a LoRA adapter per
    version) and the episode budgets (a stage's). None keeps the worker spec's."""

    version: int = 0
    model: str | None = None
    loop: LoopConfig | None = None


class RolloutWorker:
    """An async actor that runs episodes; one per slot of the cluster."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self._engine: Any = None
        self._stack = contextlib.AsyncExitStack()
        self._starting: asyncio.Lock | None = None
        self._model = spec.settings.model
        self._node_id = ""  # the Ray node this actor runs on (set by _start)

    async def _start(self) -> Any:
        """The worker's rollout engine, built on first use (once, even under concurrency)."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._engine is not None:
                return self._engine
            import ray

            from agentmath.backends.registry import build_backend
            from agentmath.config import RolloutConfig
            from agentmath.formats import get_format
            from agentmath.rollout.scheduler import RolloutEngine
            from agentmath.sandbox.factory import open_sandbox

            self._node_id = ray.get_runtime_context().get_node_id()
            spec = self.spec
            sandbox = await self._stack.enter_async_context(
                open_sandbox(spec.sandbox, spec.sandbox_url, spec.sandbox_token_file))
            backend = build_backend(spec.backend, spec.settings)
            self._stack.push_async_callback(backend.aclose)  # part of the Backend protocol
            self._engine = RolloutEngine(backend, sandbox, get_format(spec.format),
                                         loop=spec.loop, chat=spec.chat,
                                         config=RolloutConfig(max_in_flight=spec.in_flight))
            return self._engine

    async def ready(self) -> dict[str, Any]:
        """Start (model client, sandbox) and say where this worker runs."""
        await self._start()
        return {"node_id": self._node_id, "pid": os.getpid()}

    async def run(self, request: GroupRequest, index: int, sampling: SamplingParams,
                  policy: EpisodePolicy | None = None) -> Sample:
        """Sample ``index`` of ``request`` run to its end with ``sampling`` under ``policy``
        (the driver sends the same policy to every episode in flight, so setting it on the
        shared engine is safe)."""
        engine = await self._start()
        self._apply(engine, policy or EpisodePolicy())
        sample = await engine.run_sample(request, index, sampling)
        # where it ran: for the user reading a cluster run's samples (and a test that must
        # remove a node known to be running episodes)
        sample.trajectory.meta["ray_node"] = self._node_id
        return sample

    def _apply(self, engine: Any, policy: EpisodePolicy) -> None:
        if engine.version != policy.version:
            engine.set_policy_version(policy.version)
        engine.loop = policy.loop or self.spec.loop
        if policy.model is not None and policy.model != self._model:
            from agentmath.backends import use_model

            use_model(engine.backend, policy.model)
            self._model = policy.model

    async def close(self) -> None:
        """Close the sandbox and the model client (the driver kills the actor after)."""
        await self._stack.aclose()
        self._engine = None
