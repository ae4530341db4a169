"""One-shot episodes: run an :class:`~agentmath.agent.episode.Episode` from start to finish.

``run_episode`` (a text tool format, token-exact) and ``run_chat_episode`` (native tool calling
over ``/v1/chat/completions``) are conveniences over the one episode loop; anything that pauses
and resumes episodes (the rollout engine, partial rollout) uses :class:`Episode` directly.
Neither raises for model, sandbox or budget failures: they are recorded as the trajectory's
finish reason and ``error``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentmath.agent.episode import Episode
from agentmath.agent.prompts import CHAT_SYSTEM_PROMPT, build_messages
from agentmath.agent.trajectory import Trajectory
from agentmath.backends.base import Backend, SamplingParams
from agentmath.config import LoopConfig
from agentmath.formats.base import ToolFormat
from agentmath.formats.openai_tools import OPENAI_TOOLS
from agentmath.sandbox.client import SandboxClient

__all__ = ["CHAT_SYSTEM_PROMPT", "build_messages", "run_chat_episode", "run_episode"]


async def run_episode(
    problem: str,
    backend: Backend,
    fmt: ToolFormat,
    pool: SandboxClient | None,
    config: LoopConfig | None = None,
    sampling: SamplingParams | None = None,
    few_shot: Sequence[tuple[str, str]] = (),
    meta: dict[str, Any] | None = None,
) -> Trajectory:
    """Run one episode of ``problem`` in a text tool format and return its trajectory.

    ``pool`` is any sandbox client (the local :class:`~agentmath.sandbox.SandboxPool`, a
    remote service, a fake) or None for a text-only run (a tool call then ends the episode).
    """
    episode = Episode(problem, backend, fmt, pool, config, sampling, few_shot=few_shot,
                      meta=meta)
    await episode.advance()
    return episode.trajectory


async def run_chat_episode(
    problem: str,
    backend: Any,
    pool: SandboxClient | None,
    config: LoopConfig | None = None,
    sampling: SamplingParams | None = None,
    few_shot: Sequence[tuple[str, str]] = (),
    meta: dict[str, Any] | None = None,
) -> Trajectory:
    """Run one episode with native tool calling (``backend`` needs a ``chat`` method)."""
    episode = Episode(problem, backend, OPENAI_TOOLS, pool, config, sampling,
                      few_shot=few_shot, meta=meta, chat=True)
    await episode.advance()
    return episode.trajectory
