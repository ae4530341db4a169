"""Where a lockstep baseline's requests go: each episode pinned to one server for its life.

A synchronous (lockstep) rollout as TRL's colocated vLLM or verl's synchronous rollout run it
splits the batch across the data-parallel engines once: every sample keeps its engine, and so
its prefix cache, from turn to turn. :class:`PinnedPlacement` is that placement for the
simulator's ``sync`` row: an episode's first request goes to the next server in turn (so the
batch is spread evenly, as a sharded batch is) and every later request of the episode goes to
the same server, with no load balancing. The alternative, the router's ``round_robin`` per
request, sends each turn to another server, which re-prefills the whole context every turn: a
cost of the placement, not of lockstep.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentmath.backends.base import Backend, Generation, current_tag

__all__ = ["PinnedPlacement"]


class PinnedPlacement:
    """A :class:`~agentmath.backends.base.Backend` over ``backends`` that pins each episode
    (by its request tag's episode id) to the server its first request went to."""

    def __init__(self, backends: Sequence[Backend]) -> None:
        if not backends:
            raise ValueError("PinnedPlacement needs at least one backend")
        self.backends = list(backends)
        self.name = "pinned"
        self._homes: dict[str, int] = {}
        self._next = 0

    def home(self, episode_id: str | None) -> int:
        """The index of the server ``episode_id`` is pinned to (assigned on first use; an
        untagged request takes the next server in turn)."""
        if episode_id is not None and episode_id in self._homes:
            return self._homes[episode_id]
        index = self._next
        self._next = (self._next + 1) % len(self.backends)
        if episode_id is not None:
            self._homes[episode_id] = index
        return index

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The first backend's rendering (every simulated server renders alike)."""
        return await self.backends[0].render_prompt(messages)

    async def tokenize(self, text: str) -> list[int]:
        """The first backend's tokenization."""
        return await self.backends[0].tokenize(text)  # type: ignore[attr-defined]

    async def generate(self, prompt_ids: Sequence[int], **kwargs: Any) -> Generation:
        """Generate on the episode's home server."""
        tag = current_tag.get()
        backend = self.backends[self.home(tag.episode_id if tag is not None else None)]
        return await backend.generate(prompt_ids, **kwargs)

    def forget(self, episode_id: str | None = None, group_id: str | None = None) -> None:
        """Drop a finished episode's pin (the engine calls this as it collects a sample)."""
        if episode_id is not None:
            self._homes.pop(episode_id, None)

    async def aclose(self) -> None:
        """Close every backend."""
        for backend in self.backends:
            await backend.aclose()
